"""How the serial link copes with a bad line: the same session (profile cnn-digits, 20 training steps,
read the weights back) on the emulated nRF52840 through a proxy that drops, duplicates and corrupts
a share of the bytes each way (a third each).

Usage: .venv/bin/python benchmarks/link_loss.py [--loss 0,0.003,0.01,0.03]

Wall time is this machine's (QEMU is much faster than a 115200-baud UART: the numbers show the
protocol's overhead, not a real board's speed); the values computed are checked equal to the clean run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from lossyproxy import LossyProxy  # noqa: E402
from poet.boards import load_board  # noqa: E402
from poet.device import (
    emulator,
    firmware,  # noqa: E402
)
from poet.device.connect import Device  # noqa: E402
from poet.device.link import Link  # noqa: E402
from test_lossy_link import _session  # noqa: E402


def run(loss: float) -> tuple[float, object, object, list]:
    board = load_board("nrf52840")
    elf = firmware.build(board.emulator_target)
    import serial

    with tempfile.TemporaryDirectory() as wd, \
            emulator.start_qemu(elf, wd, spec=emulator.QemuSpec.from_board(board.emulator)) as q:
        proxy = LossyProxy(("127.0.0.1", q.port), p_drop=loss / 3, p_dup=loss / 3, p_corrupt=loss / 3, seed=7)
        ser = serial.serial_for_url(proxy.url, timeout=0.01)
        try:
            t0 = time.monotonic()
            link = Link(ser, timeout_s=30.0)
            dev = Device(link, link.hello(), board, emulated=True)
            _, steps, weights = _session(dev)
            return time.monotonic() - t0, link.stats, proxy.faults, [steps, weights]
        finally:
            ser.close()
            proxy.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss", default="0,0.003,0.01,0.03")
    args = ap.parse_args()
    losses = [float(x) for x in args.loss.split(",")]
    print("| bytes damaged | wall s | requests | retransmissions | damaged frames | stale replies | same values |")
    print("|---|---|---|---|---|---|---|")
    clean = None
    for loss in losses:
        t, st, f, (steps, weights) = run(loss)
        if clean is None:
            clean = (steps, weights)
        same = [s.loss for s in steps] == [s.loss for s in clean[0]] and \
            all(np.array_equal(a, b) for a, b in zip(weights, clean[1], strict=True))
        damaged = f.dropped + f.duplicated + f.corrupted  # type: ignore[attr-defined]
        share = damaged / max(1, damaged + f.passed)  # type: ignore[attr-defined]
        print(f"| {share:.2%} | {t:.1f} | {st.requests} | {st.retransmissions} | {st.bad_frames} | "  # type: ignore[attr-defined]
              f"{st.stale_frames} | {'yes' if same else 'NO'} |", flush=True)  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
