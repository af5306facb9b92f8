"""The history page: one static HTML page (and its `history.json`) per recipe from a state folder's night records.

    <out>/history/index.html                   the recipes, each with its newest night
    <out>/history/<recipe>/index.html          a row per night, the plots, the series timeline
    <out>/history/<recipe>/history.json        the same rows as data
    <out>/history/<recipe>/logs/<night>-<commit12>/<stage>.log   each night's logs, copied

`<out>` is the folder the static index is written in (the wheels and `simple/` there), so a wheel link is
`../../<wheel>` when the wheel lies in it. Every link is relative and every picture inline SVG (history_svg.py):
a plain folder, a file:// URL or any web server shows the page, with nothing fetched from elsewhere.
Each file is written whole and renamed into place (atomic.py), so a reader never sees half a page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

from build_kernel import atomic
from build_kernel.errors import BuildKernelError
from build_kernel.nightly import history_svg
from build_kernel.nightly import record as night_record
from build_kernel.nightly.record import OUTCOMES

_STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #CCC;padding:3px 6px;text-align:left;vertical-align:top}th{background:#F3F3F3}
td.n{text-align:right}tr.built td.o{background:#DFF0D8}tr.conflict td.o,tr.failed td.o{background:#F2DEDE}
tr.unchanged td.o{background:#EEEEEE}tr.interrupted td.o{background:#FCF8E3}code{font-size:12px}
section{margin:1em 0}"""


def load_records(state_dir: Path) -> list[dict[str, Any]]:
    """Every `<state>/nights/*.json`, oldest night first; one that breaks the contract (record.check) is an error
    naming the file and its first problem: a page that silently drops a night would lie about the history."""
    nights = state_dir / "nights"
    if not nights.is_dir():
        raise BuildKernelError(f"{state_dir} has no nights/ folder (no night has run with this state folder)",
                               hint="pass the --state-dir that `build-kernel nightly` wrote to")
    records = []
    for path in sorted(nights.glob("*.json")):
        if not night_record.NAME.match(path.name):
            continue  # a partial (`.name.json.tmp-...`) or someone's note: not a night
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BuildKernelError(f"{path}: not a night record ({exc})",
                                   hint="move it out of nights/, or rerun that night to write it again") from exc
        problems = night_record.check(record)
        if problems:
            raise BuildKernelError(f"{path}: not a night record of this tool ({problems[0]}"
                                   f"{f', and {len(problems) - 1} more' if len(problems) > 1 else ''})",
                                   hint="move it out of nights/, or rerun that night to write it again")
        records.append(record)
    return sorted(records, key=lambda r: (r["recipe"], r["night"], r["started"], r["upstream"].get("commit", "")))


def _tests(record: dict[str, Any]) -> tuple[int | None, int | None]:
    tests = record.get("tests") or {}
    if not tests.get("ran"):
        return None, None
    files = (tests.get("per_file") or {}).values()
    return sum(int(f.get("passed", 0)) for f in files), sum(int(f.get("failed", 0)) for f in files)


def _slug(record: dict[str, Any]) -> str:
    return f"{record['night'].replace('-', '')}-{record['upstream'].get('commit', '')[:12]}"


def _copy_logs(record: dict[str, Any], page_dir: Path) -> dict[str, str]:
    """The night's logs copied beside the page (so a plain folder serves them); stage -> relative link.
    A log that is gone (cleaned up, another host's path) is listed without a link."""
    links = {}
    for stage, path in sorted((record.get("logs") or {}).items()):
        source = Path(path)
        if source.is_file():
            rel = f"logs/{_slug(record)}/{re.sub(r'[^A-Za-z0-9_.-]', '_', stage)}.log"
            atomic.copy_file(source, page_dir / rel)
            links[stage] = rel
        else:
            links[stage] = ""
    return links


def _wheel_link(record: dict[str, Any], out: Path) -> str:
    wheel = record.get("wheel") or {}
    name = wheel.get("name") or ""
    if name and (out / name).is_file():
        return f"../../{name}"
    published = wheel.get("published_to") or ""
    return f"{published.rstrip('/')}/{name}" if name and published.startswith(("http://", "https://")) else ""


def _row(record: dict[str, Any], logs: dict[str, str], wheel_href: str) -> dict[str, Any]:
    series, build, upstream = record.get("series") or {}, record.get("build") or {}, record["upstream"]
    passed, failed = _tests(record)
    wheel = record.get("wheel") or {}
    return {"night": record["night"], "commit": upstream.get("commit", ""), "outcome": record["outcome"],
            "reason": record.get("reason", ""), "series": series.get("name"), "version": series.get("version"),
            "retired": list(series.get("retired") or []), "conflict": series.get("conflict"),
            "wall_s": build.get("wall_s"), "compiler_cpu_s": build.get("compiler_cpu_s"),
            "tests_passed": passed, "tests_failed": failed,
            "tests_why_not": (record.get("tests") or {}).get("why_not"),
            "wheel": wheel.get("name"), "wheel_sha256": wheel.get("sha256"), "wheel_href": wheel_href,
            "logs": logs}


def _num(v: float | int | None, fmt: str = "{:,.0f}") -> str:
    return "" if v is None else fmt.format(v)


def _cells(row: dict[str, Any]) -> str:
    conflict = row["conflict"]
    change = (f"conflict: <code>{escape(conflict['patch'])}</code> {escape(conflict.get('hunk') or '')}"
              + (f", first bad <code>{escape((conflict.get('first_bad_commit') or '')[:12])}</code>"
                 if conflict.get("first_bad_commit") else "")) if conflict else ""
    if row["retired"]:
        change += ("; " if change else "") + "retired: " + ", ".join(f"<code>{escape(p)}</code>" for p in row["retired"])
    tests = (f"{row['tests_passed']:,} / {row['tests_failed']:,}" if row["tests_passed"] is not None
             else escape(row["tests_why_not"] or ""))
    wheel = (f'<a href="{escape(row["wheel_href"])}">{escape(row["wheel"])}</a>' if row["wheel_href"]
             else escape(row["wheel"] or ""))
    logs = " ".join(f'<a href="{escape(href)}">{escape(stage)}</a>' if href else escape(stage)
                    for stage, href in row["logs"].items())
    name = row["series"] or ""
    # The nightly names a series as `sm120/v12` and its version `v12`; a hand-made record may give `sm120` + `v12`.
    version = name if row["version"] and name.endswith(f"/{row['version']}") else "/".join(
        x for x in (name, row["version"]) if x)
    return (f'<td>{escape(row["night"])}</td><td><code>{escape(row["commit"][:12])}</code></td>'
            f'<td class="o">{escape(row["outcome"])}</td><td>{escape(row["reason"])}</td><td>{escape(version)}</td>'
            f'<td>{change}</td><td class="n">{_num(row["wall_s"])}</td><td class="n">{_num(row["compiler_cpu_s"])}</td>'
            f'<td class="n">{tests}</td><td>{wheel}</td><td>{logs}</td>')


def _html(title: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            # An empty icon: without it a browser asks the server for /favicon.ico (a 404 in its console).
            "<link rel=\"icon\" href=\"data:,\">\n"
            f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n" + "\n".join(body)
            + "\n</body>\n</html>\n")


def _page(recipe: str, rows: list[dict[str, Any]]) -> str:
    dates = [r["night"] for r in rows]
    build = history_svg.line_plot("Build wall and compiler CPU", "seconds", dates, [
        ("build wall", "#0072B2", [r["wall_s"] for r in rows]),
        ("compiler CPU", "#E69F00", [r["compiler_cpu_s"] for r in rows])])
    tests = history_svg.line_plot("Upstream tests", "tests", dates, [
        ("passed", "#009E73", [r["tests_passed"] for r in rows]),
        ("failed", "#D55E00", [r["tests_failed"] for r in rows])])
    timeline = history_svg.series_timeline(
        dates, [r["version"] if r["outcome"] != "conflict" else None for r in rows],
        [(r["conflict"] or {}).get("patch") for r in rows], [r["retired"] for r in rows])
    counts = {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}
    head = ("<tr><th>night</th><th>commit</th><th>outcome</th><th>reason</th><th>series</th>"
            "<th>conflict / retired</th><th>build wall s</th><th>compiler CPU s</th><th>tests passed / failed</th>"
            "<th>wheel</th><th>logs</th></tr>")
    table = [f'<tr class="{escape(r["outcome"])}" id="night-{escape(r["night"])}-{escape(r["commit"][:12])}">'
             f"{_cells(r)}</tr>" for r in reversed(rows)]  # newest first: what a team reads in the morning
    return _html(f"{recipe}: nightly history", [
        f"<h1>{escape(recipe)}: nightly history</h1>",
        f"<p>{len(rows)} night(s), {dates[0]} to {dates[-1]}: "
        + ", ".join(f"{n} {o}" for o, n in counts.items() if n) + '. Data: <a href="history.json">history.json</a>, '
        'all recipes: <a href="../index.html">index</a>.</p>',
        f'<section id="timeline">{timeline}</section>', f'<section id="build">{build}</section>',
        f'<section id="tests">{tests}</section>',
        # What the plots rest on: one record a night, nights in order (evenly spaced, not to scale in time).
        f"<p>Plots: one point per night with a build ({sum(r['wall_s'] is not None for r in rows)} of {len(rows)}) "
        f"or tests run ({sum(r['tests_passed'] is not None for r in rows)} of {len(rows)}), one run each; nights "
        "evenly spaced in order, not to scale in time; hover a point or column for its values.</p>",
        f'<table id="nights">\n{head}\n' + "\n".join(table) + "\n</table>"])


def write(state_dir: Path, out: Path) -> list[Path]:
    """Write every recipe's page, its history.json and the recipes' index under `out/history/`; the pages."""
    records = load_records(state_dir)
    if not records:
        raise BuildKernelError(f"{state_dir / 'nights'} holds no night records",
                               hint="run `build-kernel nightly --recipe R` (or a --replay) with this --state-dir first")
    root = out / "history"
    by_recipe: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_recipe.setdefault(record["recipe"], []).append(record)
    pages, index = [], []
    for recipe, recs in sorted(by_recipe.items()):
        page_dir = root / recipe
        rows = [_row(r, _copy_logs(r, page_dir), _wheel_link(r, out)) for r in recs]
        atomic.write_text(page_dir / "history.json",
                          json.dumps({"schema": 1, "recipe": recipe, "nights": rows}, indent=1, sort_keys=True) + "\n")
        atomic.write_text(page_dir / "index.html", _page(recipe, rows))
        pages.append(page_dir / "index.html")
        newest = rows[-1]
        index.append(f'<li><a href="{escape(recipe)}/index.html">{escape(recipe)}</a>: {len(rows)} night(s), newest '
                     f'{escape(newest["night"])} {escape(newest["outcome"])} ({escape(newest["reason"])})</li>')
    atomic.write_text(root / "index.html", _html("nightly history", ["<h1>Nightly history</h1>", "<ul>", *index, "</ul>"]))
    return pages
