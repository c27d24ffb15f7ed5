"""The optimised dense kernels on the emulated Cortex-M4F take fewer instructions than their reference
loops (firmware/bench/, run under QEMU -icount shift=0: counts of emulated instructions, the same on every
machine, so no timing enters the verdict). The full table, with CMSIS-DSP beside, is
benchmarks/kernels_peer.py's (docs/benchmarks.md, "Kernels")."""

from __future__ import annotations

import pytest
from poet.device import kernel_bench

FP32_DENSE = {"linear_fwd", "linear_grad_input", "linear_dw_db", "matmul_fwd"}


@pytest.fixture(scope="module")
def timings() -> list[kernel_bench.KernelTiming]:
    try:
        return kernel_bench.run()
    except kernel_bench.BenchError as exc:
        if "not found" in str(exc):
            pytest.skip(str(exc))
        raise


def test_every_kernel_and_shape_is_measured(timings: list[kernel_bench.KernelTiming]) -> None:
    kernels = {t.kernel for t in timings}
    assert kernels == {"linear_fwd", "linear_grad_input", "linear_dw_db", "matmul_fwd", "linear_i8_fwd",
                       "linear_w8_fwd", "quantize_i8", "maxpool2d_fwd", "maxpool2d_bwd", "conv2d_fwd",
                       "conv2d_grad_input", "conv2d_dw_db", "conv2d_q_fwd"}
    assert all(t.macs == t.shape["B"] * t.shape["in"] * t.shape["out"] for t in timings if "in" in t.shape)
    assert all(not t.peers for t in timings)  # no peer library in this image


def test_the_tiled_kernels_do_twice_the_reference_s_work_per_instruction(
        timings: list[kernel_bench.KernelTiming]) -> None:
    """mlp-digits' first layer at batch 16, the shape of issue 21's table: the fp32 dense kernels at least
    1.8x the reference."""
    for t in timings:
        if t.shape == {"B": 16, "in": 64, "out": 32} and t.kernel in FP32_DENSE:
            assert t.poet * 1.8 < t.reference, f"{t.kernel}: {t.poet} instructions, reference {t.reference}"


def test_no_kernel_is_slower_than_its_reference_at_any_shape(timings: list[kernel_bench.KernelTiming]) -> None:
    """Batch 1 and sizes below one tile included (they run the 1x4 strips and single dot products)."""
    slower = [(t.kernel, t.shape, t.poet, t.reference) for t in timings if t.poet > t.reference]
    assert not slower


@pytest.mark.parametrize("core", sorted(kernel_bench.CORES))
def test_every_kernel_gives_its_references_bits_on_the_emulated_core(core: str) -> None:
    """The image runs each kernel and its reference on the same inputs and compares every output bit: on
    the M4F this covers what the host's tests/test_kernels_opt.py cannot run (the SMLAD int8 kernels, the
    FPU's q8 rounding), on the M0+ and RV32 the soft-float builds."""
    try:
        rows = kernel_bench.run(None, core)
    except kernel_bench.BenchError as exc:
        if "not found" in str(exc):
            pytest.skip(str(exc))
        raise
    assert len(rows) > 40
    assert [(t.kernel, t.shape) for t in rows if not t.same_bits] == []
