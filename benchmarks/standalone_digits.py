"""A device that trains itself: cnn-digits pretrained on the host on digits 0-4 (as transfer_digits.py),
exported with `poet export`, built into the standalone example for the emulated nRF52840 (the real M4F
image under QEMU, no host and no serial protocol), which collects digits 5-9, fine-tunes on them for 3
epochs, saves, and reports its test accuracy computed on the device with predict; then the same training
driven from the host with `poet train --order device` (the device's batch order). Prints the commands and
a table: the two runs' weights compared bit for bit, and their accuracies.

Usage: .venv/bin/python benchmarks/standalone_digits.py [--epochs 3] [--ram 200k] [--train bias+last:1]
Writes its files under workspace/standalone/.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
from poet.cli import main as poet
from poet.device import firmware
from poet.device.emulator import qemu_binary
from poet.export.bundle import Bundle
from poet.graph.tracer import traced
from poet.models.datasets import digits_split, load_dataset
from poet.models.zoo import ModelChoice
from poet.paths import workspace
from poet.plan.lowering.modelblob import ModelBlob
from poet.run.folder import read_back
from transfer_digits import BATCH, LR, MODEL, SEED, _pretrain


def _records(x: np.ndarray, y: np.ndarray) -> bytes:
    """Samples as the example reads them: [i32 label][fp32 inputs] each."""
    return b"".join(struct.pack("<i", int(label)) + np.ascontiguousarray(s, "<f4").tobytes()
                    for s, label in zip(x, y, strict=True))


def _run(argv: list[str]) -> None:
    print("$ poet " + " ".join(argv), flush=True)
    if poet(argv) != 0:
        sys.exit(f"poet {argv[0]} failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pretrain-epochs", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--ram", default="200k")
    ap.add_argument("--train", default="bias+last:1")
    args = ap.parse_args()
    base = workspace() / "standalone"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    pre = base / "pretrained.pt"
    xte_new, yte_new = _pretrain(pre, args.pretrain_epochs)
    data = base / "digits-5-9"
    data.mkdir()
    xtr, ytr, _, _ = digits_split()
    new = ytr >= 5
    for name, arr in (("train_x", xtr[new]), ("train_y", ytr[new]), ("test_x", xte_new), ("test_y", yte_new)):
        np.save(data / f"{name}.npy", arr)
    common = ["--model", MODEL, "--batch", str(BATCH), "--seed", str(SEED), "--weights", str(pre), "--data", str(data),
              "--train", args.train, "--ram", args.ram, "--lr", str(LR)]

    export = base / "export"
    _run(["export", *common, "-o", str(export)])
    build = base / "build"
    make = ["make", "-C", str(firmware.FIRMWARE_DIR), "standalone-qemu-m4", f"EXPORT={export}",
            f"STANDALONE_BUILD={build}", f"APP_FLAGS=-DPOET_APP_EPOCHS={args.epochs}u -DPOET_APP_SEED={SEED}u"]
    print("$ " + " ".join(make), flush=True)
    subprocess.run(make, check=True, capture_output=True)
    elf = build / "qemu-m4" / "app.elf"
    size = subprocess.run(["arm-none-eabi-size", str(elf)], capture_output=True, text=True).stdout
    print(size.strip())

    # the board's sensor and test data: the samples poet train reads, in the same order, fitted alike
    _, g = traced(ModelChoice(MODEL, batch=BATCH, seed=SEED, train=args.train, weights=pre))
    ds = load_dataset(str(data)).fitted(tuple(g.input_shape), g.classes, g.model)
    board = base / "board"
    board.mkdir()
    (board / "sensor.bin").write_bytes(_records(ds.x_train, ds.y_train))
    (board / "test.bin").write_bytes(_records(ds.x_test, ds.y_test))
    qemu = [qemu_binary(), "-M", "mps2-an386", "-cpu", "cortex-m4", "-nographic", "-monitor", "none", "-serial",
            "none", "-icount", "shift=0", "-semihosting-config", "enable=on,target=native", "-kernel",
            str(elf)]
    print(f"$ (cd {board} && {' '.join(qemu)})", flush=True)
    boots = []
    for _ in range(2):  # the second boot: a reset, after which the board restores its last save
        proc = subprocess.run(qemu, cwd=board, capture_output=True, text=True, timeout=3600)
        print((proc.stdout + proc.stderr).strip(), flush=True)
        if proc.returncode != 0:
            sys.exit("the standalone image failed")
        boots.append(proc.stdout + proc.stderr)
    right, total = map(int, re.search(r"accuracy on the device: (\d+)/(\d+)", boots[0]).groups())
    device_w = (board / "weights.bin").read_bytes()

    run = base / "run"
    _run(["train", *common, "--epochs", str(args.epochs), "--order", "device", "--run-dir", str(run)])
    blob = ModelBlob.decode(Bundle.decode((export / "bundle.bin").read_bytes()).model)
    host_w = blob.split_weights([np.ravel(w) for w in read_back(run, g)])[0]
    host_acc = json.loads((run / "state.json").read_text())["history"][-1]["accuracy"]
    print()
    print(f"{MODEL} pretrained on digits 0-4, fine-tuned on 5-9 ({len(ds.y_train)} samples, {args.epochs} "
          f"epochs, --train {args.train}, --ram {args.ram}):")
    print("| | test accuracy on digits 5-9 |")
    print("|---|---|")
    print(f"| standalone on the emulated nRF52840 (predict on the device) | {right / total:.1%} ({right}/{total}) |")
    print(f"| host-driven poet train --order device (PyTorch on its weights) | {host_acc:.1%} |")
    same = "equal bit for bit" if device_w == host_w else "DIFFER"
    print(f"trained weights ({len(device_w) // 4} floats): standalone and host-driven {same}; "
          f"after a reset the board restored its save: {'restored the save' in boots[1]}")


if __name__ == "__main__":
    main()
