"""The schedule format: Python round trip, every validation code, and the Python validator held
to the C one (firmware/core/schedule.c) on the same corrupted schedules."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from fwhelpers import cnn, frugal, keep_all, mlp, native_link
from poet.device import firmware
from poet.device.protocol import MODEL, SCHEDULE, DeviceError
from poet.ops import BY_CODE as OPS_BY_CODE
from poet.plan.lowering.lower import forward_lowered
from poet.plan.lowering.modelblob import KIND_LOSS, ModelBlob
from poet.plan.lowering.schedule import (
    COMPUTE,
    ERRORS,
    FORWARD,
    FREE,
    IN_PLACE,
    NO_DETAIL,
    PAGE_IN,
    PAGE_OUT,
    RECOMPUTE,
    Instr,
    Schedule,
    validate,
)

BIG = 1 << 30
NEEDS_CC = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
CODE = {name: code for code, name in ERRORS.items()}


# validate-asan: the same harness under ASan + UBSan (firmware/ports/linux/port.mk)
VALIDATORS = {"validate": "build/linux/validate", "validate-asan": "build/linux-asan/validate"}


def validator(target: str) -> Path:
    if target == "validate":
        return firmware.build(target)
    subprocess.run(["make", "-C", str(firmware.FIRMWARE_DIR), target], check=True, capture_output=True)
    return firmware.FIRMWARE_DIR / VALIDATORS[target]


def c_validate(model: ModelBlob | None, pool_free: int, schedules: list[bytes],
               target: str = "validate") -> list[tuple[int, int]]:
    """Run the C validator over many schedules in one process (firmware/tests/validate_main.c)."""
    exe = validator(target)
    mb = model.encode() if model is not None else b""
    stream = struct.pack("<II", pool_free, len(mb)) + mb
    stream += b"".join(struct.pack("<I", len(s)) + s for s in schedules)
    out = subprocess.run([str(exe)], input=stream, capture_output=True, check=True).stdout.decode()
    return [(int(a), int(b)) for a, b in (line.split() for line in out.splitlines())]


def recrc(data: bytes | bytearray) -> bytes:
    body = bytes(data[:-4])
    return body + struct.pack("<I", zlib.crc32(body))


def with_instrs(s: Schedule, instrs: list[Instr], **kw: int) -> bytes:
    return replace(s, instrs=instrs, **kw).encode()


def test_round_trip() -> None:
    for net in (mlp(), cnn()):
        for s in (keep_all(net.blob), frugal(net.blob)):
            data = s.encode()
            assert len(data) == 28 + 8 * len(s.instrs)
            assert Schedule.decode(data) == s
            assert Schedule.decode(data).encode() == data
            assert validate(data, net.blob, BIG) == (0, NO_DETAIL)
        assert ModelBlob.decode(net.blob.encode()).encode() == net.blob.encode()


def test_decode_rejects_damage() -> None:
    data = bytearray(keep_all(mlp().blob).encode())
    data[30] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        Schedule.decode(bytes(data))


def _cases() -> list[tuple[str, bytes, ModelBlob | None, int, tuple[int, int]]]:
    """(label, schedule, model, pool_free, expected (status, detail)) for every code 1..19."""
    net = mlp()
    m = net.blob
    s = keep_all(m)
    ok = s.encode()
    ins = list(s.instrs)
    n = len(m.nodes)
    cases = []

    def add(label: str, data: bytes, want: tuple[int, int], model: ModelBlob | None = m, pool: int = BIG) -> None:
        cases.append((label, data, model, pool, want))

    add("SHORT", ok[:27], (CODE["SHORT"], NO_DETAIL))
    add("MAGIC", b"XSCH" + ok[4:], (CODE["MAGIC"], NO_DETAIL))
    add("VERSION", ok[:4] + b"\x02" + ok[5:], (CODE["VERSION"], NO_DETAIL))
    add("LENGTH", ok + bytes(8), (CODE["LENGTH"], NO_DETAIL))
    bad_crc = bytearray(ok)
    bad_crc[-1] ^= 0x80
    add("CRC", bytes(bad_crc), (CODE["CRC"], NO_DETAIL))
    add("HASH", replace(s, model_hash=s.model_hash ^ 1).encode(), (CODE["HASH"], NO_DETAIL))
    add("HASH-no-model", ok, (CODE["HASH"], NO_DETAIL), model=None)
    add("NODES", replace(s, n_nodes=n + 1).encode(), (CODE["NODES"], NO_DETAIL))
    add("ARENA", ok, (CODE["ARENA"], NO_DETAIL), pool=s.arena_bytes - 1)
    add("ARENA-exact-fit", ok, (0, NO_DETAIL), pool=s.arena_bytes)
    add("OPCODE", with_instrs(s, ins[:3] + [Instr(6, 3, 0)] + ins[3:]), (CODE["OPCODE"], 3))
    reserved = bytearray(ok)
    reserved[24 + 8 * 2 + 1] = 2  # a flag no instruction has (IN_PLACE is 1)
    add("OPCODE-reserved", recrc(reserved), (CODE["OPCODE"], 2))
    free_at = next(k for k, i in enumerate(ins) if i.op == FREE)
    add("OPCODE-in-place-free", with_instrs(s, [*ins[:free_at], replace(ins[free_at], flags=IN_PLACE),
                                                 *ins[free_at + 1:]]), (CODE["OPCODE"], free_at))
    # in place (docs/spec.md 1): only an op that may overwrite its dep 0, at the dep's offset, the dep leaving
    relu = next(k for k, i in enumerate(ins) if i.op == COMPUTE and OPS_BY_CODE[m.nodes[i.node].op].inplace)
    dep = m.nodes[ins[relu].node].deps[0]
    at_dep = next(i.offset for i in ins if i.op == COMPUTE and i.node == dep)
    over = [*ins[:relu], replace(ins[relu], offset=at_dep, flags=IN_PLACE),
            *(i for i in ins[relu + 1:] if not (i.op == FREE and i.node == dep))]
    lin = next(k for k, i in enumerate(ins) if i.op == COMPUTE and not OPS_BY_CODE[m.nodes[i.node].op].inplace
               and m.nodes[i.node].deps and m.nodes[i.node].arena_bytes)
    assert relu < next(k for k, i in enumerate(ins) if i.op == FREE and i.node == dep), "the dep leaves after"
    add("OK-in-place", with_instrs(s, over), (0, NO_DETAIL))
    add("OVERLAP-in-place-offset", with_instrs(s, [*over[:relu], replace(over[relu], offset=over[relu].offset + 4),
                                                   *over[relu + 1:]]), (CODE["OVERLAP"], relu))
    add("OVERLAP-in-place-op", with_instrs(s, [*ins[:lin], replace(ins[lin], flags=IN_PLACE), *ins[lin + 1:]]),
        (CODE["OVERLAP"], lin))
    add("NOT_LIVE-in-place-dep-freed", with_instrs(s, [*over[:relu + 1], Instr(FREE, dep), *over[relu + 1:]]),
        (CODE["NOT_LIVE"], relu + 1))
    add("NODE_RANGE", with_instrs(s, ins[:1] + [Instr(FREE, n, 0)] + ins[1:]), (CODE["NODE_RANGE"], 1))
    add("BOUNDS", with_instrs(s, ins[:1] + [Instr(COMPUTE, 1, s.arena_bytes)] + ins[2:]), (CODE["BOUNDS"], 1))
    add("BOUNDS-unaligned", with_instrs(s, ins[:1] + [Instr(COMPUTE, 1, ins[1].offset + 2)] + ins[2:]),
        (CODE["BOUNDS"], 1))
    add("OVERLAP", with_instrs(s, ins[:2] + [Instr(COMPUTE, 2, ins[1].offset + 4)] + ins[3:]), (CODE["OVERLAP"], 2))
    add("NOT_RESIDENT", with_instrs(s, [*ins[:2], Instr(FREE, 1), *ins[2:]]), (CODE["NOT_RESIDENT"], 3))
    add("NOT_PAGED", with_instrs(s, [*ins[:2], Instr(PAGE_IN, 1, 0), *ins[2:]]), (CODE["NOT_PAGED"], 2))
    # the input is the staged batch, read in place (docs/spec.md section 1): never in the arena, so never
    # paged out (hence never paged in) or freed, and its readers need nothing resident
    add("NOT_PAGED-input", with_instrs(s, [ins[0], Instr(PAGE_IN, 0, 0), *ins[1:]]), (CODE["NOT_PAGED"], 1))
    add("NOT_LIVE-input-free", with_instrs(s, [ins[0], Instr(FREE, 0), *ins[1:]]), (CODE["NOT_LIVE"], 1))
    add("NOT_LIVE-input-page-out", with_instrs(s, [ins[0], Instr(PAGE_OUT, 0), *ins[1:]]), (CODE["NOT_LIVE"], 1))
    add("OK-input-at-any-offset", with_instrs(s, [Instr(COMPUTE, 0, ins[1].offset), *ins[1:]]), (0, NO_DETAIL))
    add("DOUBLE_ALLOC", with_instrs(s, ins[:2] + [Instr(RECOMPUTE, 1, ins[1].offset)] + ins[2:]),
        (CODE["DOUBLE_ALLOC"], 2))
    add("DOUBLE_ALLOC-page-in", with_instrs(s, [*ins[:2], Instr(PAGE_OUT, 1), Instr(PAGE_IN, 1, 0), *ins[2:]]),
        (CODE["DOUBLE_ALLOC"], 3))
    add("NOT_LIVE", with_instrs(s, [ins[0], Instr(FREE, 1), *ins[1:]]), (CODE["NOT_LIVE"], 1))
    add("NOT_LIVE-zero-bytes", with_instrs(s, ins[:n] + [Instr(PAGE_OUT, n - 1)] + ins[n:]),
        (CODE["NOT_LIVE"], n))
    add("RECOMPUTE-backward", with_instrs(s, ins[:7] + [Instr(RECOMPUTE, 6, 0)] + ins[7:]),
        (CODE["RECOMPUTE"], 7))
    add("RECOMPUTE-input", with_instrs(s, ins[:1] + [Instr(RECOMPUTE, 0, 0)] + ins[1:]), (CODE["RECOMPUTE"], 1))
    add("RECOMPUTE-not-yet", with_instrs(s, ins[:1] + [Instr(RECOMPUTE, 2, 0)] + ins[1:]), (CODE["RECOMPUTE"], 1))
    add("ORDER", with_instrs(s, [ins[1], ins[0], *ins[2:]]), (CODE["ORDER"], 0))
    add("ORDER-end", with_instrs(s, ins[: n - 1] + ins[n:]), (CODE["ORDER"], NO_DETAIL))
    add("LEAK", with_instrs(s, ins[:-1]), (CODE["LEAK"], NO_DETAIL))
    # a forward schedule (predict): the nodes before the loss, ending on the loss's input
    f = forward_lowered(m).schedule
    fins = list(f.instrs)
    loss = next(i for i, node in enumerate(m.nodes) if node.kind == KIND_LOSS)
    out = m.nodes[loss].deps[0]
    assert FORWARD == 1 and f.flags == FORWARD
    add("FORWARD-ok", f.encode(), (0, NO_DETAIL))
    add("VERSION-flag", replace(f, flags=2).encode(), (CODE["VERSION"], NO_DETAIL))
    add("ORDER-past-loss", with_instrs(f, fins + [Instr(COMPUTE, loss, 0)]), (CODE["ORDER"], len(fins)))
    last = max(k for k, i in enumerate(fins) if i.op == COMPUTE)
    assert fins[-1].op == FREE and fins[last].node == loss - 1
    add("ORDER-forward-end", with_instrs(f, fins[:last]), (CODE["ORDER"], NO_DETAIL))
    add("LEAK-forward", with_instrs(f, fins[:-1]), (CODE["LEAK"], NO_DETAIL))
    add("OUTPUT", with_instrs(f, fins + [Instr(FREE, out)]), (CODE["OUTPUT"], NO_DETAIL))
    add("FORWARD-full-step", replace(s, flags=FORWARD).encode(), (CODE["ORDER"], loss))
    return cases


CASES = _cases()


def test_every_code_is_provoked() -> None:
    assert {want[0] for *_, want in CASES} >= set(ERRORS)


@pytest.mark.parametrize("label,data,model,pool,want", CASES, ids=[c[0] for c in CASES])
def test_python_validator_codes(label: str, data: bytes, model: ModelBlob | None, pool: int,
                                want: tuple[int, int]) -> None:
    assert validate(data, model, pool) == want


@NEEDS_CC
@pytest.mark.parametrize("target", VALIDATORS)
def test_c_validator_codes(target: str) -> None:
    for model in (mlp().blob, None):
        group = [c for c in CASES if c[2] is model]
        for pool in sorted({c[3] for c in group}):
            sub = [c for c in group if c[3] == pool]
            got = c_validate(model, pool, [c[1] for c in sub], target)
            assert got == [c[4] for c in sub], [c[0] for c in sub]


def corruptions(base: Schedule, n: int, seed: int) -> list[bytes]:
    """Deterministic damage of a valid schedule: bit flips (CRC fixed up, or not), truncations,
    offset changes, reordered, dropped and duplicated instructions, changed nodes and opcodes."""
    rng = random.Random(seed)
    ok = base.encode()
    out: list[bytes] = []
    for k in range(n):
        kind = k % 9
        ins = list(base.instrs)
        i = rng.randrange(len(ins))
        if kind == 0:
            d = bytearray(ok)
            bit = rng.randrange(8 * (len(d) - 4))
            d[bit // 8] ^= 1 << (bit % 8)
            out.append(recrc(d))
        elif kind == 1:
            d = bytearray(ok)
            bit = rng.randrange(8 * len(d))
            d[bit // 8] ^= 1 << (bit % 8)
            out.append(bytes(d))
        elif kind == 2:
            out.append(ok[: rng.randrange(len(ok))])
        elif kind == 3:
            delta = rng.choice([-8, -4, -2, 4, 16, 64, base.arena_bytes, -(1 << 31)])
            ins[i] = replace(ins[i], offset=(ins[i].offset + delta) % (1 << 32))
            out.append(with_instrs(base, ins))
        elif kind == 4:
            j = rng.randrange(len(ins))
            ins[i], ins[j] = ins[j], ins[i]
            out.append(with_instrs(base, ins))
        elif kind == 5:
            del ins[i]
            out.append(with_instrs(base, ins))
        elif kind == 6:
            ins.insert(i, ins[rng.randrange(len(ins))])
            out.append(with_instrs(base, ins))
        elif kind == 7:
            ins[i] = replace(ins[i], node=rng.randrange(base.n_nodes + 2))
            out.append(with_instrs(base, ins))
        else:
            ins[i] = replace(ins[i], op=rng.randrange(0, 8))
            arena = base.arena_bytes + rng.choice([0, 0, -4, 1 << 20])
            out.append(with_instrs(base, ins, arena_bytes=max(arena, 0)))
    return out


@NEEDS_CC
@pytest.mark.parametrize("target", VALIDATORS)
def test_differential_python_vs_c(target: str) -> None:
    statuses: set[int] = set()
    for net, base in ((n, b) for n in (mlp(), cnn()) for b in (frugal(n.blob), forward_lowered(n.blob).schedule)):
        cases = corruptions(base, 200, seed=1234)
        pool = base.arena_bytes + 4096
        py = [validate(d, net.blob, pool) for d in cases]
        assert c_validate(net.blob, pool, cases, target) == py
        statuses |= {s for s, _ in py}
    # the corpus reaches most of the validator, not just the header checks
    assert len(statuses) >= 12, sorted(statuses)


@NEEDS_CC
def test_device_answers_like_python_validator(tmp_path: Path) -> None:
    """Through the protocol: END_BLOB's (status, detail) and the pool arithmetic of section 6."""
    net = cnn()
    base = frugal(net.blob)
    with native_link(tmp_path) as link:
        pool_free = net.blob.pool_free(link.hello().pool_bytes)
        link.upload(MODEL, net.blob.encode())
        samples = corruptions(base, 27, seed=7)
        samples.append(replace(base, arena_bytes=pool_free).encode())
        samples.append(replace(base, arena_bytes=pool_free + 1).encode())
        for data in samples:
            want = validate(data, net.blob, pool_free)
            if len(data) > 2048:
                continue
            try:
                link.upload(SCHEDULE, data)
                got = (0, NO_DETAIL)
            except DeviceError as exc:
                got = (exc.code, exc.detail)
                assert ERRORS[exc.code] in str(exc)
            assert got == want
