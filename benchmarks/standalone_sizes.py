"""Flash and RAM of the standalone image (the device API, a `poet export` bundle and the example application:
firmware/examples/standalone) against the protocol image (the serial server `poet train` drives), per
stand-in board, from the linked ELF files (arm-none-eabi-size, riscv64-unknown-elf-size;
sizes are the images', not emulated).

Usage: .venv/bin/python benchmarks/standalone_sizes.py   (prints a Markdown table; writes under workspace/sizes/)
"""

from __future__ import annotations

import shutil
import subprocess

from poet.cli import main as poet
from poet.device import firmware
from poet.export.bundle import Bundle
from poet.paths import workspace

# board, stand-in port, export options, the example's flags
CASES = [("nrf52840", "qemu-m4", ["--model", "cnn-digits", "--train", "bias+last:1", "--ram", "200k"], ""),
         ("mkr1000", "qemu-m0", ["--model", "mlp-digits", "--batch", "4", "--ram", "32k"],
          " -DPOET_APP_X_FLOATS=256u"),
         ("esp32c3", "qemu-rv32", ["--model", "cnn-digits", "--train", "bias+last:1", "--ram", "200k"], "")]


def _size(elf: str) -> tuple[int, int, int]:
    """text, data, bss of an ELF (Berkeley format)."""
    tool = "riscv64-unknown-elf-size" if "rv32" in elf else "arm-none-eabi-size"
    out = subprocess.run([tool, elf], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(v) for v in out.splitlines()[1].split()[:3])
    return text, data, bss


def main() -> None:
    base = workspace() / "sizes"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    rows = []
    for board, port, options, flags in CASES:
        export = base / f"{board}-export"
        if poet(["export", "--board", board, *options, "-o", str(export)]) != 0:
            raise SystemExit(f"poet export for {board} failed")
        bundle = Bundle.decode((export / "bundle.bin").read_bytes())
        build = base / f"{board}-build"
        subprocess.run(["make", "-C", str(firmware.FIRMWARE_DIR), f"standalone-{port}", f"EXPORT={export}",
                        f"STANDALONE_BUILD={build}", f"APP_FLAGS=-DPOET_APP_EPOCHS=3u{flags}"],
                       check=True, capture_output=True)
        s_text, s_data, s_bss = _size(str(build / port / "app.elf"))
        p_text, p_data, p_bss = _size(str(firmware.build(port)))
        code = s_text + s_data - len((export / "bundle.bin").read_bytes())
        rows.append((board, port, " ".join(options), p_text + p_data, p_data + p_bss, code, s_text + s_data,
                     s_data + s_bss, bundle.pool_bytes, bundle.snapshot))
    print("| board (stand-in) | model | protocol image: flash / RAM | standalone: code flash / with bundle / RAM "
          "| of its RAM, poet_init's pool |")
    print("|---|---|---|---|---|")
    for board, port, options, pf, pr, code, sf, sr, pool, snap in rows:
        print(f"| {board} ({port}) | {options} | {pf:,} B / {pr:,} B | {code:,} B / {sf:,} B / {sr:,} B "
              f"| {pool:,} B ({'with' if snap else 'no'} snapshot) |")
    print("\nflash: text + data; RAM: data + bss (the pool is a static array; the stack is the RAM left). The "
          "protocol image's RAM is its pool and buffers at the port's fixed POOL_BYTES; its model goes into the "
          "NV region at run time, so its flash is code only. The standalone image carries the bundle in flash.")


if __name__ == "__main__":
    main()
