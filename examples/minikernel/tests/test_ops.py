"""The ops of the installed minikernel (upstream-style: tests/ beside the sources, run against a wheel)."""

import pytest
import torch

import minikernel
from minikernel.reference import scaled_fp4_quant_ref


def test_ops_are_registered():
    for name in ("silu_and_mul", "scaled_fp4_quant", "arch_tag", "nvfp4_enabled"):
        assert hasattr(torch.ops.minikernel, name), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_scaled_fp4_quant_on_gpu():
    if not minikernel.nvfp4_enabled():
        pytest.skip("built without an FP4 arch (ENABLE_NVFP4)")
    x = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    scale = torch.tensor([448.0 * 6.0 / x.abs().max().item()], device="cuda", dtype=torch.float32)
    packed, scales = minikernel.scaled_fp4_quant(x, scale)
    ref_packed, ref_scales = scaled_fp4_quant_ref(x.cpu(), scale.cpu())
    assert torch.equal(packed.cpu(), ref_packed) and torch.equal(scales.cpu(), ref_scales)
