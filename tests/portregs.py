"""The board ports' register constants against their chip vendors' headers (tests/test_port_registers.py).

Every #define of a board port's sources is sorted here into one of three kinds:
  registers  a register (its address, and its width where the vendor states one) or a peripheral's base,
             with the vendor's name for it;
  values     a field, bit, key or interrupt number, with an expression over the vendor's constants;
  other      what no vendor header defines: pins the board wires, sizes, timeouts, software choices.
The vendor's side comes from tests/data/vendor_registers/<chip>.json (tools/vendor_registers.py made it
from nrfx, the SAM D21 CMSIS pack, ESP-IDF and Arm's CMSIS core, at the commits it records). The port's
side is what the port's own compiler makes of each macro, with each build's flags (so `#if` branches,
-D overrides and the arithmetic are the firmware's, not a re-implementation): a probe file includes
the port's source and defines a constant per macro, compiled to assembly and read back.

A key is a C expression: a macro's name, or a function-like macro called with constants. A vendor
name may differ per build (a dict, "*" for the rest); a values entry may be a list of expressions
that must all equal the port's (one bit shared by two registers). "addr:EXPR" compares a register's
address with a vendor value (the SAM D21's calibration row has an address constant, not a register).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIRMWARE = REPO / "firmware"
VENDOR_DIR = Path(__file__).resolve().parent / "data" / "vendor_registers"

Spec = str | list[str] | dict[str, str]


@dataclass(frozen=True)
class Build:
    name: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class Port:
    name: str                      # firmware/ports/<name>
    chip: str                      # tests/data/vendor_registers/<chip>.json
    compiler: str
    arch: tuple[str, ...]
    builds: tuple[Build, ...]
    files: tuple[str, ...]         # the port's sources whose #defines are checked
    registers: Mapping[str, Spec]
    values: Mapping[str, Spec]
    other: frozenset[str]
    # peripheral address windows of the chip: a literal there in a shared source is a register use to check
    windows: tuple[tuple[int, int], ...] = field(default=())


# ---------------------------------------------------------------- the vendor's side

@dataclass(frozen=True)
class Vendor:
    chip: str
    sources: dict[str, dict[str, object]]
    bases: dict[str, int]
    registers: dict[str, tuple[int, int | None]]
    values: dict[str, int]

    def by_address(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for name, (addr, _) in self.registers.items():
            out.setdefault(addr, []).append(name)
        return out

    def eval(self, expr: str) -> int:
        """An expression over the vendor's values and bases: names, integers, ( ) | & ^ << >> + - * ~."""
        names = {**self.bases, **self.values}

        def ev(node: ast.AST) -> int:
            if isinstance(node, ast.Expression):
                return ev(node.body)
            if isinstance(node, ast.Constant) and isinstance(node.value, int):
                return node.value
            if isinstance(node, ast.Name):
                if node.id not in names:
                    raise KeyError(f"{node.id} is not in tests/data/vendor_registers/{self.chip}.json")
                return names[node.id]
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
                return ~ev(node.operand) & 0xFFFFFFFF
            if isinstance(node, ast.BinOp):
                a, b = ev(node.left), ev(node.right)
                ops = {ast.BitOr: a | b, ast.BitAnd: a & b, ast.BitXor: a ^ b, ast.Add: a + b, ast.Sub: a - b,
                       ast.Mult: a * b}
                if isinstance(node.op, ast.LShift):
                    return (a << b) & 0xFFFFFFFF
                if isinstance(node.op, ast.RShift):
                    return a >> b
                if type(node.op) in ops:
                    return ops[type(node.op)] & 0xFFFFFFFF
            raise ValueError(f"cannot evaluate {ast.unparse(node)!r}")

        return ev(ast.parse(expr, mode="eval"))


@functools.cache
def vendor(chip: str) -> Vendor:
    doc = json.loads((VENDOR_DIR / f"{chip}.json").read_text())
    return Vendor(chip, doc["sources"],
                  {k: int(v[0], 16) for k, v in doc["bases"].items()},
                  {k: (int(v[0], 16), v[1]) for k, v in doc["registers"].items()},
                  {k: int(v[0], 16) for k, v in doc["values"].items()})


def vendor_names(spec: Spec, register: bool = False) -> set[str]:
    """The vendor values a mapping entry refers to (tools/vendor_registers.py keeps only those): every name of
    a values expression, of a register's only an `addr:` expression's."""
    texts = list(spec.values()) if isinstance(spec, dict) else spec if isinstance(spec, list) else [spec]
    if register:
        texts = [t[5:] for t in texts if t.startswith("addr:")]
    return {n for t in texts for n in re.findall(r"\b[A-Za-z_]\w*", re.sub(r"\b\d\w*", "", t))}


def spec_for(spec: Spec, build: str) -> list[str]:
    if isinstance(spec, dict):
        return [spec.get(build, spec.get("*", ""))] if (build in spec or "*" in spec) else []
    return list(spec) if isinstance(spec, list) else [spec]


# ---------------------------------------------------------------- the port's side

def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n") or " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def defines(text: str) -> dict[str, tuple[tuple[str, ...] | None, str]]:
    """Each macro a source #defines (in any #if branch): name -> (parameters or None, the first body seen)."""
    out: dict[str, tuple[tuple[str, ...] | None, str]] = {}
    for line in strip_comments(text).replace("\\\n", " ").splitlines():
        m = re.match(r"\s*#\s*define\s+(\w+)(\(([^)]*)\))?\s*(.*)$", line)
        if m and m.group(1) not in out:
            params = tuple(p.strip() for p in m.group(3).split(",")) if m.group(2) else None
            out[m.group(1)] = (params, m.group(4).strip())
    return out


REGISTER_USE = re.compile(r"\bREG\w*\s*\(")  # a register macro's body: one of the port's REG accessors


def call_sites(text: str, names: set[str], macros: set[str]) -> set[str]:
    """Calls of the function-like macros `names` whose arguments are constants: integer literals and
    object-like macros of the file; a loop variable's call is covered by the mapping's instantiations."""
    code = strip_comments(text).replace("\\\n", " ")
    found = set()
    for m in re.finditer(r"\b(\w+)\s*\(", code):
        if m.group(1) not in names:
            continue
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        args = code[m.end():i - 1]
        idents = set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\b\d\w*", "", args)))
        line_start = code.rfind("\n", 0, m.start()) + 1
        if re.match(r"\s*#\s*define\s+" + re.escape(m.group(1)) + r"\b", code[line_start:]):
            continue
        if idents <= macros and "\n" not in args:
            found.add(f"{m.group(1)}({' '.join(args.split())})")
    return found


@dataclass(frozen=True)
class Probe:
    expr: str
    kind: str  # "address" (an lvalue: its address and width) or "value"


def _guard(expr: str) -> str:
    names = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\b\d\w*", "", expr))))
    return " && ".join(f"defined({n})" for n in names) or "1"


def run_probes(port: Port, build: Build, source: Path, probes: list[Probe]) -> dict[str, tuple[int, int | None]]:
    """What the port's compiler makes of each probe in `source` under `build`: expr -> (address or value, width
    in bits for an address); exprs whose macros that build does not define are left out."""
    lines = [f'#include "{source}"']
    for i, p in enumerate(probes):
        lines.append(f"#if {_guard(p.expr)}")
        if p.kind == "address":
            lines.append(f"const unsigned int poet_probe_{i} = (unsigned int)(uintptr_t)&({p.expr});")
            lines.append(f"const unsigned int poet_probe_{i}_w = (unsigned int)sizeof({p.expr}) * 8u;")
        else:
            lines.append(f"const unsigned int poet_probe_{i} = (unsigned int)(uintptr_t)({p.expr});")
        lines.append("#endif")
    with tempfile.TemporaryDirectory(prefix="poet-regs-") as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text("\n".join(lines) + "\n")
        cmd = [port.compiler, "-std=c99", "-w", "-S", "-o", "-", *port.arch, *build.flags,
               "-I", str(FIRMWARE / "ports" / port.name), str(probe)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"{port.name} ({build.name}): the probe did not compile:\n{proc.stderr[-3000:]}")
    got: dict[str, int] = {}
    for label, directive, arg in re.findall(r"^(poet_probe_\w+):\s*\n\s*\.(word|4byte|long|zero|space)\s+(-?\w+)",
                                            proc.stdout, re.M):
        got[label] = 0 if directive in ("zero", "space") else int(arg, 0) & 0xFFFFFFFF
    out: dict[str, tuple[int, int | None]] = {}
    for i, p in enumerate(probes):
        if f"poet_probe_{i}" in got:
            out[p.expr] = (got[f"poet_probe_{i}"], got.get(f"poet_probe_{i}_w"))
    return out


# ---------------------------------------------------------------- the check

def check(port: Port, sources: Mapping[str, Path] | None = None) -> list[str]:
    """Every problem found in the port's sources (each file as given in `sources`, else the port's own):
    a #define of no kind, a register or value that differs from the vendor's, a call that addresses
    something the vendor's table does not have, a mapping entry the sources no longer define."""
    v = vendor(port.chip)
    by_addr = v.by_address()
    problems: list[str] = []
    files = {f: (sources or {}).get(f, FIRMWARE / "ports" / port.name / f) for f in port.files}
    seen_keys: set[str] = set()
    for fname, path in files.items():
        text = path.read_text()
        macros = defines(text)
        head = {k.split("(")[0] for k in (*port.registers, *port.values)}
        for name, (_, body) in macros.items():
            if name not in head and name not in port.other:
                problems.append(f"{fname}: {name} is neither a register, a vendor value nor listed as other "
                                f"(tests/portregs.py)")
            if name in port.other and _addresses_hardware(body, port.windows):
                problems.append(f"{fname}: {name} ({body}) addresses hardware but is listed as other")
        reg_macros = {n for n, (params, body) in macros.items() if params is not None and REGISTER_USE.search(body)}
        calls = call_sites(text, reg_macros, set(macros)) - set(port.registers)
        keyed = [k for k in (*port.registers, *port.values) if k.split("(")[0] in macros]
        for build in port.builds:
            probes = [Probe(k, _kind(v, port.registers[k], build.name)) for k in keyed if k in port.registers]
            probes += [Probe(k, "value") for k in keyed if k in port.values]
            probes += [Probe(c, "address") for c in sorted(calls)]
            got = run_probes(port, build, path, probes)
            seen_keys |= got.keys()
            for key, (val, width) in got.items():
                where = f"{fname} ({build.name}): {key}"
                if key in port.registers:
                    problems += _check_register(v, where, port.registers[key], build.name, val, width)
                elif key in port.values:
                    for expr in spec_for(port.values[key], build.name):
                        want = v.eval(expr)
                        if want != val:
                            problems.append(f"{where} = 0x{val:X}, the vendor's {expr} = 0x{want:X}")
                else:  # a call site: any vendor register at that address, of that width
                    names = by_addr.get(val)
                    if not names:
                        problems.append(f"{where} addresses 0x{val:08X}, which is no register in "
                                        f"tests/data/vendor_registers/{port.chip}.json")
                    elif all(v.registers[n][1] not in (None, width) for n in names):
                        problems.append(f"{where} is a {width}-bit access to {names[0]}, "
                                        f"a {v.registers[names[0]][1]}-bit register")
    for key in (*port.registers, *port.values):
        if key not in seen_keys:
            problems.append(f"{key}: in tests/portregs.py but defined by no build of {port.name}")
    return problems


def _addresses_hardware(body: str, windows: tuple[tuple[int, int], ...]) -> bool:
    """A register use (REG(...)), a dereferenced literal address, or a literal in a peripheral window; the
    accessors themselves (`REG(a)`: a volatile dereference of their parameter) are none of these."""
    return bool(REGISTER_USE.search(body) or re.search(r"volatile[^)]*\*\s*\)\s*\(?\s*0[xX]", body)
                or _in_windows(body, windows))


def _in_windows(body: str, windows: tuple[tuple[int, int], ...]) -> bool:
    return any(lo <= int(h, 16) < hi for h in re.findall(r"0[xX]([0-9A-Fa-f]{6,8})", body) for lo, hi in windows)


def _kind(v: Vendor, spec: Spec, build: str) -> str:
    names = spec_for(spec, build)
    return "address" if names and (names[0] in v.registers or names[0].startswith("addr:")) else "value"


def _check_register(v: Vendor, where: str, spec: Spec, build: str, val: int, width: int | None) -> list[str]:
    out = []
    for name in spec_for(spec, build):
        if name.startswith("addr:"):
            want, want_w = v.eval(name[5:]), None
        elif name in v.registers:
            want, want_w = v.registers[name]
        elif name in v.bases:
            want, want_w = v.bases[name], None
        else:
            out.append(f"{where}: the vendor table has no register or base {name}")
            continue
        if want != val:
            out.append(f"{where} = 0x{val:08X}, the vendor's {name} is at 0x{want:08X}")
        elif want_w is not None and width is not None and want_w != width:
            out.append(f"{where} is a {width}-bit access, the vendor's {name} is {want_w}-bit")
    return out


def linker_symbols(path: Path) -> dict[str, int]:
    """`PROVIDE(name = 0x...)` and `NAME = 0x...;` of a linker script."""
    text = strip_comments(path.read_text())
    out = {n: int(a, 16) for n, a in re.findall(r"PROVIDE\(\s*(\w+)\s*=\s*(0x[0-9a-fA-F]+)\s*\)", text)}
    out.update({n: int(a, 16) for n, a in re.findall(r"^\s*(\w+)\s*=\s*(0x[0-9a-fA-F]+)\s*;", text, re.M)})
    return out


# ---------------------------------------------------------------- the ports

NRF_GPIO = "GPIO_PIN_CNF_{f}_{v} << GPIO_PIN_CNF_{f}_Pos"


def _pin_cnf(**fields: str) -> str:
    return " | ".join(NRF_GPIO.format(f=f, v=v) for f, v in fields.items())


def _nrf_regs(prefix: str, instance: str, names: str) -> dict[str, Spec]:
    """`PREFIX_A_B` -> `INSTANCE.A_B`, or `INSTANCE.A.B` where nrfx groups registers (PSEL, RXD, TXD, READ ...)."""
    out: dict[str, Spec] = {}
    for n in names.split():
        port_name, _, vendor_name = n.partition("=")
        out[f"{prefix}_{port_name}"] = f"{instance}.{vendor_name or port_name}"
    return out


AIRCR_RESET = "0x5FA << SCB_AIRCR_VECTKEY_Pos | SCB_AIRCR_SYSRESETREQ_Msk"

NRF52840 = Port(
    name="nrf52840", chip="nrf52840", compiler="arm-none-eabi-gcc",
    arch=("-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"),
    builds=(Build("nrf52840", ("-DPOET_PAGER_SD",)), Build("nrf52840-qspi", ("-DPOET_PAGER_QSPI",)),
            Build("nrf52840-dongle", ("-DPOET_PAGER_SD", "-DNRF_DONGLE")),
            Build("nrf52840-1M", ("-DPOET_PAGER_SD", "-DUART_BAUD=1000000u"))),
    files=("port.c", "startup.c"),
    registers={
        "CLOCK": "CLOCK", "CLOCK_TASKS_HFCLKSTART": "CLOCK.TASKS_HFCLKSTART",
        "CLOCK_EVENTS_HFCLKSTARTED": "CLOCK.EVENTS_HFCLKSTARTED",
        "GPIO(0u)": "P0", "GPIO(32u)": "P1",
        **{f"GPIO_{r}({pin}u)": f"P{pin // 32}.{r}" for r in ("OUTSET", "OUTCLR", "DIRSET") for pin in (0, 32)},
        "GPIO_PIN_CNF(PIN(0u, 6u))": "P0.PIN_CNF[6]", "GPIO_PIN_CNF(PIN(1u, 15u))": "P1.PIN_CNF[15]",
        "UARTE": "UARTE0",
        **_nrf_regs("UARTE", "UARTE0", "TASKS_STARTRX TASKS_STARTTX TASKS_STOPTX EVENTS_ENDRX EVENTS_ENDTX "
                    "EVENTS_ERROR EVENTS_RXSTARTED SHORTS INTENSET ERRORSRC ENABLE PSEL_RTS=PSEL.RTS "
                    "PSEL_TXD=PSEL.TXD PSEL_CTS=PSEL.CTS PSEL_RXD=PSEL.RXD BAUDRATE RXD_PTR=RXD.PTR "
                    "RXD_MAXCNT=RXD.MAXCNT TXD_PTR=TXD.PTR TXD_MAXCNT=TXD.MAXCNT CONFIG"),
        "TIMER1": "TIMER1",
        **_nrf_regs("TIMER", "TIMER1", "TASKS_START TASKS_CLEAR TASKS_CAPTURE0=TASKS_CAPTURE[0] MODE BITMODE "
                    "PRESCALER CC0=CC[0]"),
        "NVIC_ISER0": "NVIC.ISER[0]", "NVIC_ICPR1": "NVIC.ICPR[1]",
        "SPIM": "SPIM2",
        **_nrf_regs("SPIM", "SPIM2", "TASKS_START EVENTS_END ENABLE PSEL_SCK=PSEL.SCK PSEL_MOSI=PSEL.MOSI "
                    "PSEL_MISO=PSEL.MISO FREQUENCY RXD_PTR=RXD.PTR RXD_MAXCNT=RXD.MAXCNT TXD_PTR=TXD.PTR "
                    "TXD_MAXCNT=TXD.MAXCNT CONFIG ORC"),
        "QSPI": "QSPI",
        **_nrf_regs("QSPI", "QSPI", "TASKS_ACTIVATE TASKS_READSTART TASKS_WRITESTART TASKS_ERASESTART EVENTS_READY "
                    "ENABLE READ_SRC=READ.SRC READ_DST=READ.DST READ_CNT=READ.CNT WRITE_DST=WRITE.DST "
                    "WRITE_SRC=WRITE.SRC WRITE_CNT=WRITE.CNT ERASE_PTR=ERASE.PTR ERASE_LEN=ERASE.LEN "
                    "PSEL_SCK=PSEL.SCK PSEL_CSN=PSEL.CSN PSEL_IO0=PSEL.IO0 PSEL_IO1=PSEL.IO1 PSEL_IO2=PSEL.IO2 "
                    "PSEL_IO3=PSEL.IO3 IFCONFIG0 IFCONFIG1 CINSTRCONF CINSTRDAT0"),
        "NVMC": "NVMC", **_nrf_regs("NVMC", "NVMC", "READY CONFIG ERASEPAGE"),
        "POWER": "POWER", "POWER_MAINREGSTATUS": "POWER.MAINREGSTATUS",
        "UICR": "UICR", "UICR_REGOUT0": "UICR.REGOUT0",
        "SCB_AIRCR": "SCB.AIRCR", "SCB_VTOR": "SCB.VTOR", "SCB_CPACR": "SCB.CPACR", "DHCSR": "DCB.DHCSR",
    },
    values={
        "PIN_CNF_INPUT_PULLUP": _pin_cnf(DIR="Input", INPUT="Connect", PULL="Pullup"),
        "PIN_CNF_OUTPUT": _pin_cnf(DIR="Output", INPUT="Connect", PULL="Disabled"),
        "PIN_CNF_QSPI": _pin_cnf(DIR="Input", INPUT="Disconnect", PULL="Disabled", DRIVE="H0H1"),
        "UARTE_IRQ": "UART0_UARTE0_IRQn", "FPU_IRQ": "FPU_IRQn",
        "UARTE_SHORT_ENDRX_STARTRX": "UARTE_SHORTS_ENDRX_STARTRX_Msk",
        "UARTE_INT_ENDRX": "UARTE_INTENSET_ENDRX_Msk", "UARTE_INT_ERROR": "UARTE_INTENSET_ERROR_Msk",
        "UARTE_INT_RXSTARTED": "UARTE_INTENSET_RXSTARTED_Msk", "UARTE_ENABLED": "UARTE_ENABLE_ENABLE_Enabled",
        # PSEL's reset value: CONNECT (bit 31) = Disconnected, the rest all ones
        "PSEL_DISCONNECTED": "UARTE_PSEL_TXD_CONNECT_Disconnected << UARTE_PSEL_TXD_CONNECT_Pos | 0x7FFFFFFF",
        "UARTE_BAUD_VALUE": {"nrf52840-1M": "UARTE_BAUDRATE_BAUDRATE_Baud1M",
                             "*": "UARTE_BAUDRATE_BAUDRATE_Baud115200"},
        "SPIM_ENABLED": "SPIM_ENABLE_ENABLE_Enabled", "SPIM_K125": "SPIM_FREQUENCY_FREQUENCY_K125",
        "QSPI_ERASE_4KB": "QSPI_ERASE_LEN_LEN_4KB",
        "QSPI_IFCONFIG0_VALUE": "QSPI_IFCONFIG0_READOC_READ4IO << QSPI_IFCONFIG0_READOC_Pos | "
                                "QSPI_IFCONFIG0_WRITEOC_PP4IO << QSPI_IFCONFIG0_WRITEOC_Pos | "
                                "QSPI_IFCONFIG0_ADDRMODE_24BIT << QSPI_IFCONFIG0_ADDRMODE_Pos | "
                                "QSPI_IFCONFIG0_PPSIZE_256Bytes << QSPI_IFCONFIG0_PPSIZE_Pos",
        "QSPI_SCKFREQ_MASK": "QSPI_IFCONFIG1_SCKFREQ_Msk", "QSPI_SCKFREQ_8MHZ": "3 << QSPI_IFCONFIG1_SCKFREQ_Pos",
        "CINSTR(0x9Fu, 4u)": "0x9F << QSPI_CINSTRCONF_OPCODE_Pos | QSPI_CINSTRCONF_LENGTH_4B << "
                             "QSPI_CINSTRCONF_LENGTH_Pos | QSPI_CINSTRCONF_LIO2_Msk | QSPI_CINSTRCONF_LIO3_Msk",
        "CINSTR_WREN": "QSPI_CINSTRCONF_WREN_Msk",
        "NVMC_REN": "NVMC_CONFIG_WEN_Ren", "NVMC_WEN": "NVMC_CONFIG_WEN_Wen", "NVMC_EEN": "NVMC_CONFIG_WEN_Een",
        "MAINREGSTATUS_HIGH": "POWER_MAINREGSTATUS_MAINREGSTATUS_High",
        "REGOUT0_VOUT_MASK": "UICR_REGOUT0_VOUT_Msk", "REGOUT0_VOUT_DEFAULT": "UICR_REGOUT0_VOUT_DEFAULT",
        "REGOUT0_VOUT_3V0": "UICR_REGOUT0_VOUT_3V0",
        "AIRCR_SYSRESETREQ": AIRCR_RESET,
    },
    other=frozenset({
        "PIN", "REG",                                            # helpers, checked through what they make
        "UART_TX_PIN", "UART_RX_PIN", "POET_MARK_PIN", "SD_SCK_PIN", "SD_MOSI_PIN", "SD_MISO_PIN", "SD_CS_PIN",
        "QSPI_SCK_PIN", "QSPI_CSN_PIN", "QSPI_IO0_PIN", "QSPI_IO1_PIN", "QSPI_IO2_PIN", "QSPI_IO3_PIN",  # board wiring
        "UART_BAUD", "TICK_HZ", "SPIM_MAX_HZ", "RING", "TX_CHUNK", "RAM_START", "RAM_END", "NV_ERASE_PAGE",
        "QSPI_SWAP_BASE", "QSPI_SWAP_BYTES", "WIP_TIMEOUT_MS", "READY_TIMEOUT_MS",
        "MX_RDSR", "MX_WRSR", "MX_RDID", "MX_SR_WIP", "MX_SR_QE", "MX_JEDEC_ID",  # the flash chip's, not the nRF's
    }),
    windows=((0x10000000, 0x10002000), (0x40000000, 0x40040000), (0x50000000, 0x50001000), (0xE000E000, 0xE000F000)),
)

SAMD_PORT = {f"PORT_{r}({g})": f"PORT.Group[{i}].{r}" for r in ("DIRSET", "OUTCLR", "OUTSET")
             for i, g in enumerate(("PA", "PB"))}
SERCOM = {r: (f"SERCOM5_USART_{r}", f"SERCOM1_SPI_{r}") for r in ("CTRLA", "CTRLB", "INTENSET", "INTFLAG", "SYNCBUSY")}

MKR1000 = Port(
    name="mkr1000", chip="samd21g18a", compiler="arm-none-eabi-gcc",
    arch=("-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"),
    builds=(Build("mkr1000", ()),),
    files=("port.c", "startup.c"),
    registers={
        "PM": "PM", "SYSCTRL": "SYSCTRL", "GCLK": "GCLK", "NVMCTRL": "NVMCTRL", "PORT": "PORT",
        "SERCOM1": "SERCOM1", "SERCOM5": "SERCOM5", "TC4": "TC4",
        **{f"NVMCTRL_{r}": f"NVMCTRL_{r}" for r in ("CTRLA", "CTRLB", "PARAM", "INTFLAG", "STATUS", "ADDR")},
        "NVM_CAL_WORD1": "addr:FUSES_DFLL48M_COARSE_CAL_ADDR",
        **{f"PM_{r}": f"PM_{r}" for r in ("CPUSEL", "APBASEL", "APBBSEL", "APBCSEL", "APBAMASK", "APBCMASK")},
        **{f"SYSCTRL_{r}": f"SYSCTRL_{r}" for r in ("PCLKSR", "XOSC32K", "DFLLCTRL", "DFLLVAL", "DFLLMUL")},
        **{f"GCLK_{r}": f"GCLK_{r}" for r in ("CTRL", "STATUS", "CLKCTRL", "GENCTRL", "GENDIV")},
        **SAMD_PORT,
        "PORT_PMUX(PA, SPI_MOSI_PIN)": "PORT.Group[0].PMUX[8]", "PORT_PMUX(PB, UART_TX_PIN)": "PORT.Group[1].PMUX[11]",
        "PORT_PINCFG(PA, SPI_MISO_PIN)": "PORT.Group[0].PINCFG[19]",
        "PORT_PINCFG(PB, UART_RX_PIN)": "PORT.Group[1].PINCFG[23]",
        **{f"SC_{r}(SERCOM5)": usart for r, (usart, _) in SERCOM.items()},
        **{f"SC_{r}(SERCOM1)": spi for r, (_, spi) in SERCOM.items()},
        "SC_BAUD16(SERCOM5)": "SERCOM5_USART_BAUD", "SC_BAUD8(SERCOM1)": "SERCOM1_SPI_BAUD",
        "SC_STATUS(SERCOM5)": "SERCOM5_USART_STATUS", "SC_DATA16(SERCOM5)": "SERCOM5_USART_DATA",
        "SC_DATA32(SERCOM1)": "SERCOM1_SPI_DATA",
        "TC_CTRLA": "TC4_CTRLA", "TC_READREQ": "TC4_READREQ", "TC_STATUS": "TC4_STATUS",
        "TC_COUNT": "TC4_COUNT32_COUNT",
        "SYST_CSR": "SysTick.CTRL", "NVIC_ISER": "NVIC.ISER[0]", "NVIC_ICER": "NVIC.ICER[0]",
        "NVIC_ICPR": "NVIC.ICPR[0]", "SCB_VTOR": "SCB.VTOR", "SCB_AIRCR": "SCB.AIRCR",
    },
    values={
        "NVM_RWS_MASK": "NVMCTRL_CTRLB_RWS_Msk", "NVM_RWS(1u)": "NVMCTRL_CTRLB_RWS_HALF_Val << NVMCTRL_CTRLB_RWS_Pos",
        "NVM_MANW": "NVMCTRL_CTRLB_MANW", "NVM_CACHEDIS": "NVMCTRL_CTRLB_CACHEDIS",
        "NVM_CMDEX_KEY": "NVMCTRL_CTRLA_CMDEX_KEY", "NVM_CMD_ER": "NVMCTRL_CTRLA_CMD_ER_Val",
        "NVM_CMD_WP": "NVMCTRL_CTRLA_CMD_WP_Val", "NVM_CMD_PBC": "NVMCTRL_CTRLA_CMD_PBC_Val",
        "NVM_INTFLAG_READY": "NVMCTRL_INTFLAG_READY",
        "NVM_STATUS_ERRORS": "NVMCTRL_STATUS_PROGE | NVMCTRL_STATUS_LOCKE | NVMCTRL_STATUS_NVME",
        "NVM_PARAM_PSZ(0xFFFFFFFFu)": "NVMCTRL_PARAM_PSZ_Msk >> NVMCTRL_PARAM_PSZ_Pos",
        "NVM_PARAM_PSZ(0x00030000u)": "(3 << NVMCTRL_PARAM_PSZ_Pos) >> 16",  # the field's position
        "NVM_DFLL_COARSE(0xFFFFFFFFu)": "FUSES_DFLL48M_COARSE_CAL_Msk >> FUSES_DFLL48M_COARSE_CAL_Pos",
        "NVM_DFLL_COARSE(0x04000000u)": "(1 << FUSES_DFLL48M_COARSE_CAL_Pos) >> 26",  # the field's position
        "PM_APBAMASK_GCLK": "PM_APBAMASK_GCLK", "PM_APBCMASK_SERCOM1": "PM_APBCMASK_SERCOM1",
        "PM_APBCMASK_SERCOM5": "PM_APBCMASK_SERCOM5", "PM_APBCMASK_TC4": "PM_APBCMASK_TC4",
        "PM_APBCMASK_TC5": "PM_APBCMASK_TC5",
        "PCLKSR_XOSC32KRDY": "SYSCTRL_PCLKSR_XOSC32KRDY", "PCLKSR_DFLLRDY": "SYSCTRL_PCLKSR_DFLLRDY",
        "PCLKSR_DFLLLCKF": "SYSCTRL_PCLKSR_DFLLLCKF", "PCLKSR_DFLLLCKC": "SYSCTRL_PCLKSR_DFLLLCKC",
        "XOSC32K_ENABLE": "SYSCTRL_XOSC32K_ENABLE", "XOSC32K_XTALEN": "SYSCTRL_XOSC32K_XTALEN",
        "XOSC32K_EN32K": "SYSCTRL_XOSC32K_EN32K", "XOSC32K_STARTUP(6u)": "6 << SYSCTRL_XOSC32K_STARTUP_Pos",
        "DFLLCTRL_ENABLE": "SYSCTRL_DFLLCTRL_ENABLE", "DFLLCTRL_MODE": "SYSCTRL_DFLLCTRL_MODE",
        "DFLLCTRL_QLDIS": "SYSCTRL_DFLLCTRL_QLDIS",
        "DFLLVAL_FINE(0x3FFu)": "SYSCTRL_DFLLVAL_FINE_Msk", "DFLLVAL_COARSE(0x3Fu)": "SYSCTRL_DFLLVAL_COARSE_Msk",
        "DFLLMUL_VALUE": "31 << SYSCTRL_DFLLMUL_CSTEP_Pos | 511 << SYSCTRL_DFLLMUL_FSTEP_Pos | "
                         "1464 << SYSCTRL_DFLLMUL_MUL_Pos",
        "GCLK_CTRL_SWRST": "GCLK_CTRL_SWRST", "GCLK_STATUS_SYNCBUSY": "GCLK_STATUS_SYNCBUSY",
        "GENCTRL(1u, GCLK_SRC_XOSC32K)": "1 << GCLK_GENCTRL_ID_Pos | GCLK_GENCTRL_SRC_XOSC32K | GCLK_GENCTRL_GENEN",
        "GENDIV(1u, 3u)": "1 << GCLK_GENDIV_ID_Pos | 3 << GCLK_GENDIV_DIV_Pos",
        "GCLK_SRC_XOSC32K": "GCLK_GENCTRL_SRC_XOSC32K_Val", "GCLK_SRC_DFLL48M": "GCLK_GENCTRL_SRC_DFLL48M_Val",
        "CLKCTRL(GCLK_ID_SERCOM5_CORE, 1u)": "GCLK_CLKCTRL_ID_SERCOM5_CORE | 1 << GCLK_CLKCTRL_GEN_Pos | "
                                             "GCLK_CLKCTRL_CLKEN",
        "GCLK_ID_DFLL48M_REF": "GCLK_CLKCTRL_ID_DFLL48_Val", "GCLK_ID_SERCOM1_CORE": "GCLK_CLKCTRL_ID_SERCOM1_CORE_Val",
        "GCLK_ID_SERCOM5_CORE": "GCLK_CLKCTRL_ID_SERCOM5_CORE_Val", "GCLK_ID_TC4_TC5": "GCLK_CLKCTRL_ID_TC4_TC5_Val",
        "PINCFG_PMUXEN": "PORT_PINCFG_PMUXEN", "PINCFG_PULLEN": "PORT_PINCFG_PULLEN",
        "PMUX_C": ["PORT_PMUX_PMUXE_C_Val", "PORT_PMUX_PMUXO_C_Val"],
        "PMUX_D": ["PORT_PMUX_PMUXE_D_Val", "PORT_PMUX_PMUXO_D_Val"],
        "SC_CTRLA_SWRST": ["SERCOM_USART_CTRLA_SWRST", "SERCOM_SPI_CTRLA_SWRST"],
        "SC_CTRLA_ENABLE": ["SERCOM_USART_CTRLA_ENABLE", "SERCOM_SPI_CTRLA_ENABLE"],
        "SC_CTRLA_MODE(1u)": "SERCOM_USART_CTRLA_MODE_USART_INT_CLK",
        "SC_CTRLA_MODE(3u)": "SERCOM_SPI_CTRLA_MODE_SPI_MASTER",
        "SC_CTRLA_DORD": ["SERCOM_USART_CTRLA_DORD", "SERCOM_SPI_CTRLA_DORD"],
        "SC_SYNC_SWRST": ["SERCOM_USART_SYNCBUSY_SWRST", "SERCOM_SPI_SYNCBUSY_SWRST"],
        "SC_SYNC_ENABLE": ["SERCOM_USART_SYNCBUSY_ENABLE", "SERCOM_SPI_SYNCBUSY_ENABLE"],
        "SC_SYNC_CTRLB": ["SERCOM_USART_SYNCBUSY_CTRLB", "SERCOM_SPI_SYNCBUSY_CTRLB"],
        "SC_INT_DRE": ["SERCOM_USART_INTFLAG_DRE", "SERCOM_SPI_INTFLAG_DRE"],
        "SC_INT_RXC": ["SERCOM_USART_INTFLAG_RXC", "SERCOM_SPI_INTFLAG_RXC"],
        "SC_CTRLB_RXEN": ["SERCOM_USART_CTRLB_RXEN", "SERCOM_SPI_CTRLB_RXEN"],
        "SC_CTRLB_TXEN": "SERCOM_USART_CTRLB_TXEN",
        "UART_STATUS_ERRORS": "SERCOM_USART_STATUS_PERR | SERCOM_USART_STATUS_FERR | SERCOM_USART_STATUS_BUFOVF",
        "UART_RXPO(3u)": "3 << SERCOM_USART_CTRLA_RXPO_Pos", "UART_TXPO(1u)": "1 << SERCOM_USART_CTRLA_TXPO_Pos",
        "SPI_DIPO(3u)": "3 << SERCOM_SPI_CTRLA_DIPO_Pos", "SPI_DOPO(1u)": "1 << SERCOM_SPI_CTRLA_DOPO_Pos",
        "TC_CTRLA_SWRST": "TC_CTRLA_SWRST", "TC_CTRLA_ENABLE": "TC_CTRLA_ENABLE",
        "TC_CTRLA_COUNT32": "TC_CTRLA_MODE_COUNT32", "TC_READREQ_RREQ": "TC_READREQ_RREQ",
        "TC_READREQ_COUNT": "TC_COUNT32_COUNT_OFFSET << TC_READREQ_ADDR_Pos",
        "TC_STATUS_SYNCBUSY": "TC_STATUS_SYNCBUSY",
        "SERCOM5_IRQ": "SERCOM5_IRQn", "N_IRQ": "PERIPH_COUNT_IRQn",
        "AIRCR_SYSRESETREQ": AIRCR_RESET,
    },
    other=frozenset({
        "REG8", "REG16", "REG32", "PORT_GROUP",                   # helpers, checked through what they make
        "XOSC32K_HZ", "DFLL_MUL", "GCLK0_HZ", "TICK_HZ", "UART_BAUD", "UART_BAUD_REG", "SPI_MAX_HZ",
        "PA", "PB", "UART_TX_PIN", "UART_RX_PIN", "SPI_MOSI_PIN", "SPI_SCK_PIN", "SPI_MISO_PIN",  # board wiring
        "SD_CS_GROUP", "SD_CS_PIN", "POET_MARK_GROUP", "POET_MARK_PIN",
        "CLOCK_POLLS", "RING", "NV_PAGE", "NV_ROW",
    }),
    windows=((0x00806000, 0x00807000), (0x40000000, 0x40002000), (0x41004000, 0x41008000),
             (0x42000000, 0x42006000), (0xE000E000, 0xE000F000)),
)

ESP_LINK = {"esp32c3": "INTERRUPT_CORE0_UART_INTR_MAP_REG", "esp32c3-usb": "INTERRUPT_CORE0_USB_INTR_MAP_REG"}

ESP32C3 = Port(
    name="esp32c3", chip="esp32c3", compiler="riscv64-unknown-elf-gcc",
    arch=("-march=rv32imc_zicsr", "-mabi=ilp32", "--specs=picolibc.specs"),
    builds=(Build("esp32c3", ("-DPOET_C3_USB=0",)), Build("esp32c3-usb", ("-DPOET_C3_USB=1",))),
    files=("port.c",),
    registers={
        "RTC_CNTL": "DR_REG_RTCCNTL_BASE",
        **{f"RTC_CNTL_{r}": f"RTC_CNTL_{r}_REG" for r in ("OPTIONS0", "WDTCONFIG0", "WDTWPROTECT", "SWD_CONF",
                                                            "SWD_WPROTECT")},
        "TIMG(0u)": "DR_REG_TIMERGROUP0_BASE", "TIMG(1u)": "DR_REG_TIMERGROUP1_BASE",
        **{f"TIMG_{r}({n}u)": f"TIMG_{r}_REG({n})" for r in ("WDTCONFIG0", "WDTWPROTECT") for n in (0, 1)},
        "SYSTIMER": "DR_REG_SYSTIMER_BASE",
        **{f"SYSTIMER_{r}": f"SYSTIMER_{r}_REG" for r in ("CONF", "UNIT0_OP", "TARGET0_CONF", "UNIT0_VALUE_LO",
                                                            "COMP0_LOAD", "INT_ENA", "INT_CLR")},
        "INTMTX": "DR_REG_INTERRUPT_BASE",
        "INTMTX_MAP(SRC_LINK)": ESP_LINK,
        "INTMTX_MAP(SRC_SYSTIMER_TARGET0)": "INTERRUPT_CORE0_SYSTIMER_TARGET0_INT_MAP_REG",
        "INTMTX_CPU_INT_ENABLE": "INTERRUPT_CORE0_CPU_INT_ENABLE_REG",
        "INTMTX_CPU_INT_TYPE": "INTERRUPT_CORE0_CPU_INT_TYPE_REG",
        "INTMTX_CPU_INT_PRI(LINE_LINK)": "INTERRUPT_CORE0_CPU_INT_PRI_9_REG",
        "INTMTX_CPU_INT_PRI(LINE_TICK)": "INTERRUPT_CORE0_CPU_INT_PRI_10_REG",
        "INTMTX_CPU_INT_THRESH": "INTERRUPT_CORE0_CPU_INT_THRESH_REG",
        "USJ": "DR_REG_USB_SERIAL_JTAG_BASE",
        **{f"USJ_{r}": f"USB_SERIAL_JTAG_{r}_REG" for r in ("EP1", "EP1_CONF", "INT_ENA", "INT_CLR")},
        "UART0": "DR_REG_UART_BASE",
        **{f"UART_{r}": f"UART_{r}_REG(0)" for r in ("FIFO", "INT_ENA", "INT_CLR", "CLKDIV", "STATUS", "CONF0",
                                                       "CONF1", "CLK_CONF")},
        "GPIO": "DR_REG_GPIO_BASE",
        **{f"GPIO_{r}": f"GPIO_{r}_REG" for r in ("OUT_W1TS", "OUT_W1TC", "ENABLE_W1TS", "ENABLE_W1TC", "IN")},
        "GPIO_FUNC_OUT_SEL_CFG(0u)": "GPIO_FUNC0_OUT_SEL_CFG_REG",
        "GPIO_FUNC_OUT_SEL_CFG(21u)": "GPIO_FUNC21_OUT_SEL_CFG_REG",
        "IO_MUX_GPIO(0u)": "IO_MUX_GPIO0_REG", "IO_MUX_GPIO(21u)": "IO_MUX_GPIO21_REG",
        "EXTMEM": "DR_REG_EXTMEM_BASE", "EXTMEM_ICACHE_CTRL1": "EXTMEM_ICACHE_CTRL1_REG",
        "MMU_TABLE": "DR_REG_MMU_TABLE",
        "SPI_MEM(0u)": "DR_REG_SPI0_BASE", "SPI_MEM(1u)": "DR_REG_SPI1_BASE",
        **{f"SPI_MEM_{r}({n}u)": f"SPI_MEM_{r}_REG({n})" for r in ("CTRL", "CTRL2", "USER") for n in (0, 1)},
    },
    values={
        "RTC_CNTL_SW_SYS_RST": "RTC_CNTL_SW_SYS_RST", "RTC_CNTL_SWD_AUTO_FEED_EN": "RTC_CNTL_SWD_AUTO_FEED_EN",
        "RTC_CNTL_SWD_DISABLE": "RTC_CNTL_SWD_DISABLE",
        "WDT_WKEY": "RTC_CNTL_WDT_WKEY_VALUE", "SWD_WKEY": "RTC_CNTL_SWD_WKEY_VALUE",
        "TIMG_WDT_CONF_UPDATE_EN": "TIMG_WDT_CONF_UPDATE_EN",
        "SYSTIMER_CLK_EN": "SYSTIMER_CLK_EN", "SYSTIMER_UNIT0_WORK_EN": "SYSTIMER_TIMER_UNIT0_WORK_EN",
        "SYSTIMER_TARGET0_WORK_EN": "SYSTIMER_TARGET0_WORK_EN", "SYSTIMER_UNIT0_UPDATE": "SYSTIMER_TIMER_UNIT0_UPDATE",
        "SYSTIMER_UNIT0_VALUE_VALID": "SYSTIMER_TIMER_UNIT0_VALUE_VALID",
        "SYSTIMER_PERIOD_MODE": "SYSTIMER_TARGET0_PERIOD_MODE",
        "SYSTIMER_TARGET0_INT": ["SYSTIMER_TARGET0_INT_ENA", "SYSTIMER_TARGET0_INT_CLR"],
        "INTMTX_SOURCES": "ETS_MAX_INTR_SOURCE", "SRC_SYSTIMER_TARGET0": "ETS_SYSTIMER_TARGET0_INTR_SOURCE",
        "SRC_LINK": {"esp32c3": "ETS_UART0_INTR_SOURCE", "esp32c3-usb": "ETS_USB_SERIAL_JTAG_INTR_SOURCE"},
        "USJ_WR_DONE": "USB_SERIAL_JTAG_WR_DONE", "USJ_IN_EP_DATA_FREE": "USB_SERIAL_JTAG_SERIAL_IN_EP_DATA_FREE",
        "USJ_OUT_EP_DATA_AVAIL": "USB_SERIAL_JTAG_SERIAL_OUT_EP_DATA_AVAIL",
        "USJ_INT_SERIAL_OUT_RECV_PKT": ["USB_SERIAL_JTAG_SERIAL_OUT_RECV_PKT_INT_ENA",
                                        "USB_SERIAL_JTAG_SERIAL_OUT_RECV_PKT_INT_CLR"],
        "UART_RXFIFO_FULL_INT": ["UART_RXFIFO_FULL_INT_ENA", "UART_RXFIFO_FULL_INT_CLR"],
        "UART_RXFIFO_CNT_MASK": "UART_RXFIFO_CNT_V << UART_RXFIFO_CNT_S",
        "UART_TXFIFO_CNT_SHIFT": "UART_TXFIFO_CNT_S",
        "UART_RXFIFO_FULL_THRHD_MASK": "UART_RXFIFO_FULL_THRHD_V << UART_RXFIFO_FULL_THRHD_S",
        "UART_CONF0_FORMAT_MASK": "UART_PARITY_EN_M | UART_BIT_NUM_M | UART_STOP_BIT_NUM_M",
        "UART_CONF0_8N1": "3 << UART_BIT_NUM_S | 1 << UART_STOP_BIT_NUM_S",
        "UART_CLK_CONF_XTAL": "3 << UART_SCLK_SEL_S | UART_SCLK_EN | UART_TX_SCLK_EN | UART_RX_SCLK_EN",
        "UART_FIFO_LEN": "SOC_UART_FIFO_LEN",
        "UART_CLKDIV_VALUE": "347 << UART_CLKDIV_S | 4 << UART_CLKDIV_FRAG_S",  # 40 MHz / 115200 in 1/16ths
        "SIG_GPIO_OUT_IDX": "SIG_GPIO_OUT_IDX",
        "IO_MUX_FUN_WPU": "FUN_PU", "IO_MUX_FUN_IE": "FUN_IE", "IO_MUX_FUN_DRV_DEFAULT": "2 << FUN_DRV_S",
        "IO_MUX_MCU_SEL_GPIO": "PIN_FUNC_GPIO << MCU_SEL_S",
        "EXTMEM_ICACHE_SHUT_IBUS": "EXTMEM_ICACHE_SHUT_IBUS", "EXTMEM_ICACHE_SHUT_DBUS": "EXTMEM_ICACHE_SHUT_DBUS",
        "MMU_ENTRIES": "SOC_MMU_ENTRY_NUM", "MMU_INVALID": "SOC_MMU_INVALID",
        "SPI_MEM_FDUMMY_OUT": "SPI_MEM_FDUMMY_OUT", "SPI_MEM_Q_POL": "SPI_MEM_Q_POL", "SPI_MEM_D_POL": "SPI_MEM_D_POL",
        "SPI_MEM_CS_HOLD": "SPI_MEM_CS_HOLD", "SPI_MEM_CS_SETUP": "SPI_MEM_CS_SETUP",
        "SPI_MEM_CS_TIMES(1u, 0u)": "1 << SPI_MEM_CS_HOLD_TIME_S",
        "SPI_MEM_CS_TIMES(0u, 1u)": "1 << SPI_MEM_CS_SETUP_TIME_S",
        "SPI_MEM_CS_TIMES_MASK": "SPI_MEM_CS_HOLD_TIME_M | SPI_MEM_CS_SETUP_TIME_M",
    },
    other=frozenset({
        "REG",                                                    # the helper, checked through what it makes
        "TICK_HZ", "BACKSTOP_TICKS", "XTAL_HZ", "UART_BAUD", "UART_DIV16", "USJ_PACKET", "MMU_PAGE",
        "LINE_LINK", "LINE_TICK",                                 # CPU interrupt lines: this port's choice
        "MCAUSE_INTERRUPT", "MSTATUS_MIE",                        # the RISC-V privileged spec's, not Espressif's
        "POET_C3_USB", "POET_C3_NV", "SD_SCK_PIN", "SD_MOSI_PIN", "SD_MISO_PIN", "SD_CS_PIN", "POET_MARK_PIN",
        "RING", "FLASH_BYTES", "NV_SECTOR", "NV_VADDR", "NV_FLASH", "NV_BYTES",
    }),
    windows=((0x60000000, 0x600D1000),),
)

PORTS = {p.name: p for p in (NRF52840, MKR1000, ESP32C3)}

# linker.ld symbols of the ESP32-C3 port and the vendor's constant for each ("rom:" the ROM's own address)
ESP32C3_LINKER = {
    "NV_VADDR": "SOC_DRAM0_CACHE_ADDRESS_LOW",
    **{f: f"rom:{f}" for f in ("esp_rom_spiflash_erase_sector", "esp_rom_spiflash_write", "esp_rom_spiflash_read",
                               "esp_rom_spiflash_config_param", "ROM_Boot_Cache_Init", "Cache_Invalidate_Addr",
                               "Cache_Disable_ICache", "Cache_Enable_ICache", "Cache_Suspend_ICache",
                               "Cache_Resume_ICache", "rom_spiflash_legacy_data")},
}
