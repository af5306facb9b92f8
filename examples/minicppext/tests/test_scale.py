import pytest
import torch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_scale_on_gpu():
    import minicppext

    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    assert torch.equal(minicppext.scale(x, 2.0), 2 * x)


def test_op_registered():
    import minicppext  # noqa: F401

    assert hasattr(torch.ops.minicppext, "scale")
