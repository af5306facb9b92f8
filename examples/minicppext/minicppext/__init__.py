"""minicppext: one CUDA op, `torch.ops.minicppext.scale(x, alpha)`, registered by the extension at import."""

import torch  # noqa: F401  (the extension links torch's libraries)

from minicppext import _C  # noqa: F401  (registers torch.ops.minicppext.*)

__version__ = "0.1.0"


def scale(x: "torch.Tensor", alpha: float) -> "torch.Tensor":
    return torch.ops.minicppext.scale(x, alpha)
