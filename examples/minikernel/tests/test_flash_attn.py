"""FA3's fallback: importable everywhere, usable only where flash_ops runs (sm_90)."""

import pytest
import torch

from minikernel.flash_attn import flash_attn_fwd, is_fa3_supported


def test_fa3_is_refused_off_hopper():
    if is_fa3_supported():
        pytest.skip("this GPU runs FA3")
    with pytest.raises((NotImplementedError, RuntimeError)):
        flash_attn_fwd(torch.ones(4))


@pytest.mark.skipif(not is_fa3_supported(), reason="needs an sm_90 GPU")
def test_fa3_fwd_on_gpu():
    q = torch.randn(8, 16, device="cuda", dtype=torch.float32)
    assert torch.allclose(flash_attn_fwd(q, 0.5), q * 0.5)
