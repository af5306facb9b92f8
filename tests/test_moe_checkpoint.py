"""bench/serving/fp8_block.py and bench/serving/tiny_moe.py: block-FP8 quantization as SGLang's fp8 loader reads it (scale
shapes, the rounding bound the module states), which weights the FP8 copy quantizes, and the MoE shape."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[ModuleType, ModuleType]]:
    sys.path.insert(0, str(REPO_ROOT / "bench" / "serving"))
    try:
        import fp8_block
        import tiny_moe

        yield fp8_block, tiny_moe
    finally:
        sys.path.remove(str(REPO_ROOT / "bench" / "serving"))


def test_block_fp8_round_trip_stays_within_the_stated_bound(bench: tuple[ModuleType, ModuleType]) -> None:
    fp8, _ = bench
    gen = torch.Generator().manual_seed(0)
    # Partial edge blocks (300 x 200 is 3 x 2 blocks of 128), rows of very different magnitude, one zero block.
    w = torch.randn(300, 200, generator=gen) * torch.logspace(-4, 1, 300)[:, None]
    w[128:256, 128:] = 0
    q, scale_inv = fp8.quantize(w.to(torch.bfloat16))
    assert (q.dtype, tuple(q.shape)) == (torch.float8_e4m3fn, (300, 200))
    assert (scale_inv.dtype, tuple(scale_inv.shape)) == (torch.float32, (3, 2))
    back = fp8.dequantize(q, scale_inv)
    ref = w.to(torch.bfloat16).float()
    per_element_scale = scale_inv.repeat_interleave(128, 0).repeat_interleave(128, 1)[:300, :200]
    bound = ref.abs() / 16 + per_element_scale / 1024
    assert bool((ref - back).abs().le(bound * (1 + 1e-6)).all())
    assert bool(back[128:256, 128:].eq(0).all())  # a zero block stays zero (and its scale is finite)
    assert bool(torch.isfinite(scale_inv).all()) and bool(scale_inv.gt(0).all())
    # Each block's largest |w| is e4m3's largest value: scale_inv = amax / 448.
    assert torch.allclose(scale_inv[0, 0], ref[:128, :128].abs().max() / 448)
    assert float(q[:128, :128].float().abs().max()) == 448.0


def test_the_fp8_copy_quantizes_attention_and_experts_and_keeps_the_router(
        bench: tuple[ModuleType, ModuleType]) -> None:
    _, moe = bench
    layer = "model.layers.0"
    bf16 = {f"{layer}.self_attn.q_proj.weight": torch.randn(256, 256, dtype=torch.bfloat16),
            f"{layer}.self_attn.k_proj.weight": torch.randn(128, 256, dtype=torch.bfloat16),
            f"{layer}.block_sparse_moe.experts.7.w2.weight": torch.randn(256, 256, dtype=torch.bfloat16),
            f"{layer}.block_sparse_moe.gate.weight": torch.randn(8, 256, dtype=torch.bfloat16),
            f"{layer}.input_layernorm.weight": torch.ones(256, dtype=torch.bfloat16),
            "lm_head.weight": torch.randn(1000, 256, dtype=torch.bfloat16)}
    out = moe.fp8_tensors(bf16)
    quantized = {n for n, t in out.items() if t.dtype == torch.float8_e4m3fn}
    assert quantized == {f"{layer}.self_attn.q_proj.weight", f"{layer}.self_attn.k_proj.weight",
                         f"{layer}.block_sparse_moe.experts.7.w2.weight"}
    assert tuple(out[f"{layer}.self_attn.k_proj.weight_scale_inv"].shape) == (1, 2)
    assert tuple(out[f"{layer}.block_sparse_moe.experts.7.w2.weight_scale_inv"].shape) == (2, 2)
    for kept in ("block_sparse_moe.gate.weight", "input_layernorm.weight"):
        assert out[f"{layer}.{kept}"] is bf16[f"{layer}.{kept}"]
    assert out["lm_head.weight"].dtype == torch.bfloat16
    assert len(out) == len(bf16) + 3  # one weight_scale_inv per quantized weight


def test_the_moe_shape_is_what_sglang_serves_in_block_fp8(bench: tuple[ModuleType, ModuleType]) -> None:
    fp8, moe = bench
    cfg = moe.config(moe.Shape())
    assert cfg["architectures"] == ["MixtralForCausalLM"]
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"]) == (8, 2)
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]  # GQA
    for size in (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_key_value_heads"] * cfg["head_dim"]):
        assert size % 128 == 0
    assert fp8.QUANTIZATION_CONFIG == {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                       "weight_block_size": [128, 128]}
    with pytest.raises(SystemExit, match="hidden 192 is not a multiple of 128"):
        moe.Shape(hidden=192, heads=3, kv_heads=1).check()
    # sglang (at the pin) warms its piecewise CUDA graph up with one request per captured shape, up to the chunked
    # prefill size (16,384 on the largest GPUs): a shorter context died in cuBLAS on the H200 (issue 54).
    assert cfg["max_position_embeddings"] >= 16384


def test_transformers_5_fused_experts_are_saved_under_the_names_sglang_loads(bench: tuple[ModuleType, ModuleType]) -> None:
    """transformers 5 keeps Mixtral's experts fused in memory (seen on the H200's 5.17); the saved folder has the
    4.x per-expert names, gate rows first, as transformers' own save_pretrained writes them."""
    _, moe = bench
    experts, inter, hidden = 3, 4, 5
    gate_up = torch.arange(experts * 2 * inter * hidden, dtype=torch.float32).reshape(experts, 2 * inter, hidden)
    down = -torch.arange(experts * hidden * inter, dtype=torch.float32).reshape(experts, hidden, inter)
    router = torch.ones(experts, hidden)
    out = moe._v4_names({"model.layers.0.mlp.experts.gate_up_proj": gate_up, "model.layers.0.mlp.experts.down_proj": down,
                         "model.layers.0.mlp.gate.weight": router, "model.norm.weight": torch.ones(hidden)})
    assert torch.equal(out["model.layers.0.block_sparse_moe.experts.2.w1.weight"], gate_up[2, :inter])
    assert torch.equal(out["model.layers.0.block_sparse_moe.experts.2.w3.weight"], gate_up[2, inter:])
    assert torch.equal(out["model.layers.0.block_sparse_moe.experts.1.w2.weight"], down[1])
    assert torch.equal(out["model.layers.0.block_sparse_moe.gate.weight"], router)
    assert "model.norm.weight" in out and not any(".mlp." in k for k in out)
    assert len(out) == 3 * experts + 2
