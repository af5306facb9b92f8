"""The studies' pictures: matplotlib, written as SVG whose bytes depend only on the data (no date, fixed ids), so a
picture is remade like a results file. Imported by each study's `*_figure.py` (they put bench/ on sys.path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needs import need


def pyplot() -> Any:
    """matplotlib.pyplot, headless and deterministic; one line naming the extra when matplotlib is missing."""
    need("matplotlib", extra="bench", why="it draws the study's picture")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "build-kernel-bench", "svg.fonttype": "none", "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def save(fig: Any, path: Path) -> Path:
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    print(path)
    return path
