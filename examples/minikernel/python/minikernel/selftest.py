"""Self-test of an installed minikernel: ``python -m minikernel.selftest``.

Prints one JSON object and exits 0 when every check that this machine can run
passed. Without a GPU it checks the import, the op registrations and the
reference; with one it also runs the kernels against minikernel.reference
(scaled_fp4_quant must match bit for bit) and, when flash_ops is built and the
GPU is sm_90, the FA3 stand-in.
"""

from __future__ import annotations

import json
import sys


def _fp4_inputs(torch, dtype, device):
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(64, 256, generator=gen) * 3.0
    x[0, :16] = 0.0  # an all-zero block: scale 0, codes 0
    x[1, :16] = torch.tensor([6.0, -6.0, 0.25, -0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, 0.1, 1e-3, -1e-3, 4.0, 3.0])
    x[2, :16] = 1000.0  # large values
    x = x.to(dtype)
    return x.to(device)


def main() -> int:
    import torch

    import minikernel
    from minikernel import reference as ref

    try:  # upstream-shaped flash_attn raises here when flash_ops is missing
        import minikernel.flash_attn as fa

        flash_attn_import = True
    except ImportError as e:
        fa, flash_attn_import = None, f"ImportError: {e}"

    report = {
        "torch": torch.__version__,
        "library": minikernel.common_ops_path,
        "variant": minikernel.variant,
        "ops": sorted(n for n in ("silu_and_mul", "scaled_fp4_quant", "nvfp4_enabled", "fa3_fwd")
                      if hasattr(torch.ops.minikernel, n)),
        "nvfp4_enabled": minikernel.nvfp4_enabled(),
        "flash_attn_import": flash_attn_import,
        "fa3_available": fa is not None and getattr(fa, "is_fa3_available", lambda: True)(),
        "gpu": None,
        "checks": {},
    }
    ok = flash_attn_import is True

    # The reference against hand-computed e2m1 codes (no GPU needed).
    vals = torch.tensor([0.0, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, -0.0, -0.5, -6.0, -100.0])
    want = [0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 8, 9, 15, 15]
    got = ref.e2m1_encode(vals).tolist()
    report["checks"]["reference_e2m1"] = got == want
    ok &= got == want

    if torch.cuda.is_available():
        dev = torch.device("cuda")
        report["gpu"] = {"name": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability())}

        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = torch.randn(8, 2 * 96, device=dev).to(dtype)
            out = minikernel.silu_and_mul(x)
            exp = ref.silu_and_mul_ref(x)
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            good = torch.allclose(out.float(), exp.float(), rtol=tol, atol=tol)
            report["checks"][f"silu_and_mul_{dtype}".replace("torch.", "")] = bool(good)
            ok &= bool(good)

        if minikernel.nvfp4_enabled():
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                x = _fp4_inputs(torch, dtype, dev)
                gs = (ref.E4M3_MAX * ref.E2M1_MAX / x.float().abs().amax()).reshape(1).to(torch.float32)
                packed, scales = minikernel.scaled_fp4_quant(x, gs)
                rp, rs = ref.scaled_fp4_quant_ref(x.cpu(), gs.cpu())
                same_p = torch.equal(packed.cpu(), rp)
                same_s = torch.equal(scales.cpu().view(torch.uint8), rs.view(torch.uint8))
                deq = ref.dequantize_fp4(packed.cpu(), scales.cpu(), gs.cpu())
                rel = ((deq - x.float().cpu()).norm() / x.float().cpu().norm()).item()
                name = f"scaled_fp4_quant_{dtype}".replace("torch.", "")
                report["checks"][name] = {
                    "packed_equal": bool(same_p),
                    "scales_equal": bool(same_s),
                    "packed_mismatches": int((packed.cpu() != rp).sum()),
                    "dequant_rel_err": round(rel, 4),
                }
                ok &= bool(same_p and same_s and rel < 0.2)
        else:
            try:
                minikernel.scaled_fp4_quant(torch.zeros(1, 16, device=dev), torch.ones(1, device=dev))
                report["checks"]["fp4_without_nvfp4_raises"] = False
                ok = False
            except RuntimeError as e:
                report["checks"]["fp4_without_nvfp4_raises"] = "without ENABLE_NVFP4" in str(e)

        if fa is not None and fa.is_fa3_supported():
            q = torch.randn(1000, device=dev)
            good = torch.allclose(fa.flash_attn_fwd(q, 0.5), q * 0.5)
            report["checks"]["fa3_fwd"] = bool(good)
            ok &= bool(good)

    report["ok"] = bool(ok)
    print(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
