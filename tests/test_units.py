import pytest
from poet.errors import UsageError
from poet.units import format_size, parse_deadline, parse_size


@pytest.mark.parametrize("text,value", [("256k", 262144), ("1m", 1 << 20), ("4096", 4096), ("1.5k", 1536),
                                        ("128KiB", 131072), ("2g", 2 << 30)])
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["abc", "", "12q", "-5k", "k"])
def test_bad_sizes_say_what_to_type(text):
    with pytest.raises(UsageError, match="k/m/g suffix"):
        parse_size(text)


def test_deadlines():
    assert parse_deadline("1.5x", 2.0) == 3.0
    assert parse_deadline("45ms", 99.0) == pytest.approx(0.045)
    assert parse_deadline("800us", 1.0) == pytest.approx(8e-4)
    with pytest.raises(UsageError):
        parse_deadline("fast", 1.0)
    with pytest.raises(UsageError):
        parse_deadline("0x", 1.0)


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(131072) == "128.0 KiB"
