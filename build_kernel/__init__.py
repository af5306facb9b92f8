"""build-kernel: build GPU kernel libraries (sgl-kernel first) from pinned, patched source."""

from __future__ import annotations

__version__ = "0.1.0"
