"""benchmarks/transfer_digits.py, the README's transfer-learning run, short: pretrained on digits 0-4 on
the host, fine-tuned on 5-9 on the emulated board with --weights and a sparse update, the board's result
that of PyTorch's same steps (as close to float64 PyTorch's as float32 PyTorch's: poet.graph.agreement)."""

import os
import re
import subprocess
import sys

import pytest
from conftest import needs_qemu
from poet.paths import REPO_ROOT


@pytest.mark.slow
@needs_qemu
def test_fine_tuning_a_pretrained_model_on_new_classes(tmp_path) -> None:
    r = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "transfer_digits.py"), "--pretrain-epochs", "3",
                        "--epochs", "1"], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                       env=dict(os.environ, POET_WORKSPACE=str(tmp_path)))
    assert r.returncode == 0, r.stderr[-2000:]
    board = re.search(r"on the emulated nRF52840 \(poet train\) \| ([0-9.]+)% \| ([0-9.]+)% \|", r.stdout)
    host = re.search(r"in PyTorch on the host \(same steps\) \| ([0-9.]+)% \| ([0-9.]+)% \|", r.stdout)
    assert board and host, r.stdout[-3000:]
    assert board.groups() == host.groups()
    before, after = float(board.group(1)), float(board.group(2))
    assert before < 5.0 < 50.0 < after  # 5-9 were never seen; one epoch on them teaches most of them
    # the board's weights as close to float64 PyTorch's as float32 PyTorch's are (poet.graph.agreement)
    assert "board weights vs host: as close to exact arithmetic as PyTorch's float32" in r.stdout, r.stdout[-3000:]
