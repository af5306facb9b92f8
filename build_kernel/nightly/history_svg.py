"""The history page's pictures: inline SVG written here, no plotting library, no script, no external resource.

The bytes depend only on the data (fixed sizes, numbers rounded to one decimal, colours given in order of first
appearance), so a page made twice from the same records is the same file. Each picture is one `<svg class="plot">`
with a `<title>` per point or column, which a browser shows on hover.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 760, 230
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 26, 46
# Colour-blind-safe (Okabe-Ito), then greys; a series version gets the next one in order of first appearance.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
           "#999999", "#666666", "#BBBBBB", "#333333")
CONFLICT, NONE = "#D62728", "#DDDDDD"


def _n(x: float) -> str:
    """A coordinate: one decimal, no trailing zero (the same number always the same text)."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _nice_top(top: float) -> float:
    """The y axis' end: 1, 2, 2.5 or 5 times a power of ten at or above the largest value."""
    if top <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(top))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= top))


def _x(i: int, count: int) -> float:
    inner = WIDTH - LEFT - RIGHT
    return LEFT + (inner / 2 if count == 1 else inner * i / (count - 1))


def _open(title: str, label: str) -> list[str]:
    return [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">',
            f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>']


def _x_labels(dates: Sequence[str], xs: Sequence[float]) -> list[str]:
    """A date under every k-th night (at xs), k chosen so at most 12 labels fit."""
    step = max(1, math.ceil(len(dates) / 12))
    y = HEIGHT - BOTTOM + 14
    return [f'<text x="{_n(xs[i])}" y="{y}" font-size="10" text-anchor="end" '
            f'transform="rotate(-35 {_n(xs[i])} {y})">{escape(d)}</text>'
            for i, d in enumerate(dates) if i % step == 0 or i == len(dates) - 1]


def line_plot(title: str, unit: str, dates: Sequence[str], lines: Sequence[tuple[str, str, Sequence[float | None]]]) -> str:
    """One line per (name, colour, values) over the nights; a missing value (no build, no tests) breaks the line."""
    values = [v for _, _, vs in lines for v in vs if v is not None]
    top = _nice_top(max(values, default=0.0))
    base = HEIGHT - BOTTOM
    scale = (base - TOP) / top
    out = _open(title, f"{title}: {len(dates)} nights")
    for k in range(5):  # the y axis: 0 .. top in four steps
        v = top * k / 4
        y = base - v * scale
        out.append(f'<line x1="{LEFT}" y1="{_n(y)}" x2="{WIDTH - RIGHT}" y2="{_n(y)}" stroke="#EEEEEE"/>')
        out.append(f'<text x="{LEFT - 4}" y="{_n(y + 3)}" font-size="10" text-anchor="end">{v:g}</text>')
    out.append(f'<text x="12" y="{_n((TOP + base) / 2)}" font-size="10" transform="rotate(-90 12 '
               f'{_n((TOP + base) / 2)})" text-anchor="middle">{escape(unit)}</text>')
    out.append(f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#444444"/>')
    for li, (name, colour, vs) in enumerate(lines):
        runs: list[list[str]] = [[]]
        for i, value in enumerate(vs):
            if value is None:
                runs.append([])
                continue
            v = value
            x, y = _x(i, len(dates)), base - v * scale
            runs[-1].append(f"{_n(x)},{_n(y)}")
            out.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="3" fill="{colour}"><title>{escape(dates[i])} '
                       f'{escape(name)}: {v:,.1f} {escape(unit)}</title></circle>')
        for run in runs:
            if len(run) > 1:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{" ".join(run)}"/>')
        lx = WIDTH - RIGHT - 130 * (len(lines) - li)  # legends at the right: the title holds the left
        out.append(f'<rect x="{lx}" y="8" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="17" font-size="11">{escape(name)}</text>')
    out.extend(_x_labels(dates, [_x(i, len(dates)) for i in range(len(dates))]))
    out.append("</svg>")
    return "\n".join(out)


def series_timeline(dates: Sequence[str], versions: Sequence[str | None], conflicts: Sequence[str | None],
                    retired: Sequence[Sequence[str]]) -> str:
    """A column per night coloured by the series version it applied (red: a conflict, grey: none chosen), a
    triangle above a night where patches were retired, and the versions' legend."""
    colours: dict[str, str] = {}
    for v in versions:
        if v is not None and v not in colours:
            colours[v] = PALETTE[len(colours) % len(PALETTE)]
    base, bar_top = HEIGHT - BOTTOM, TOP + 36
    inner = WIDTH - LEFT - RIGHT
    width = inner / max(len(dates), 1)
    out = _open("Series version per night", f"series timeline: {len(dates)} nights")
    for i, date in enumerate(dates):
        x = LEFT + width * i
        version, conflict = versions[i], conflicts[i]
        fill = CONFLICT if conflict else colours.get(version or "", NONE)
        what = f"conflict: {conflict}" if conflict else (f"series {version}" if version else "no series")
        out.append(f'<rect x="{_n(x)}" y="{bar_top}" width="{_n(max(width - 1, 1))}" height="{base - bar_top}" '
                   f'fill="{fill}"><title>{escape(date)}: {escape(what)}</title></rect>')
        if retired[i]:
            cx = x + width / 2
            out.append(f'<path d="M{_n(cx - 5)},{bar_top - 10} L{_n(cx + 5)},{bar_top - 10} L{_n(cx)},{bar_top - 2} Z" '
                       f'fill="#000000"><title>{escape(date)}: retired {escape(", ".join(retired[i]))}</title></path>')
    legend = [*colours.items(), *((("conflict", CONFLICT),) if any(conflicts) else ()),
              *((("none", NONE),) if any(v is None and not c for v, c in zip(versions, conflicts, strict=True)) else ())]
    for k, (name, colour) in enumerate(legend):
        lx = LEFT + 70 * k
        out.append(f'<rect x="{lx}" y="{TOP}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 14}" y="{TOP + 9}" font-size="11">{escape(name)}</text>')
    out.append(f'<text x="{WIDTH - RIGHT}" y="{TOP + 9}" font-size="11" text-anchor="end">▼ patches retired</text>')
    out.extend(_x_labels(dates, [LEFT + width * (i + 0.5) for i in range(len(dates))]))
    out.append("</svg>")
    return "\n".join(out)
