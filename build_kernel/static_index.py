"""A static PEP 503 "simple" index of a folder of wheels, served by any web server.

Each page is written to a temporary file and renamed over the old one, so a reader (or
an interrupted regeneration) only ever sees a complete old page or a complete new one.
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from build_kernel import atomic


def _atomic_write(path: Path, text: str) -> None:
    # One name for the tests to interpose on; atomic keeps the usual mode (a web server reads the pages).
    atomic.write_text(path, text)


def _page(title: str, links: list[tuple[str, str]]) -> str:
    body = "\n".join(f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>' for href, text in links)
    return (f"<!DOCTYPE html>\n<html>\n  <head><meta name=\"pypi:repository-version\" content=\"1.0\">"
            f"<title>{html.escape(title)}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n")


def regenerate(wheel_dir: Path) -> Path:
    """(Re)write `wheel_dir/simple/` for every wheel in `wheel_dir`; return its root."""
    simple = wheel_dir / "simple"
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheel_dir.glob("*.whl")):
        name = str(canonicalize_name(parse_wheel_filename(wheel.name)[0]))
        projects.setdefault(name, []).append(wheel)
    for name, wheels in projects.items():
        links = []
        for wheel in wheels:
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            links.append((f"../../{wheel.name}#sha256={digest}", wheel.name))
        _atomic_write(simple / name / "index.html", _page(f"Links for {name}", links))
    _atomic_write(simple / "index.html", _page("Simple index", [(f"{n}/", n) for n in sorted(projects)]))
    return simple
