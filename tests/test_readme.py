"""The README's Python API example, run as it stands: a notebook user's first call must work."""

import os
import re
import subprocess
import sys

from conftest import needs_tools
from poet.paths import REPO_ROOT


def _api_example() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@needs_tools("qemu-system-riscv32", "riscv64-unknown-elf-gcc")  # the emulated ESP32-C3
def test_the_readme_python_example_runs(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-c", _api_example()], capture_output=True, text=True, timeout=600,
                       cwd=tmp_path, env=dict(os.environ, POET_WORKSPACE=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    first, *table = r.stdout.splitlines()
    # the plan had to recompute and page at this budget, and the account has the kinds a paged plan runs
    m = re.match(r"(optimal|feasible): (\d+) recomputes, (\d+) page-ins, ([0-9.]+) uJ per step", first)
    assert m and int(m.group(2)) > 0 and int(m.group(3)) > 0 and float(m.group(4)) > 0, r.stdout
    text = "\n".join(table)
    for kind in ("forward", "backward", "recompute", "page"):
        assert kind in text, text
    assert (tmp_path / "runs").is_dir()
