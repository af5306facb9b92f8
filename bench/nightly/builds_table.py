"""The real nights' table (bench/nightly/build_nights.sh's raw folder): per night the series built, the outcome, the
build's wall and compiler CPU (the record's), the whole night's wall (the command's, fetch to install-back), the load
average before and after, the compile cache's hits, misses and uncacheable compiles of that night's build (the tool's
own line; `ccache -s` deltas where a night's log has none), the wheel, its sha256, and what publish said (uploaded to
the pypiserver, installed back from it and imported). A night tried more than once keeps each try: the earlier ones
are the folders `<night>-<commit>.before-HHMMSS` (build_nights.sh renames them), listed before the last, with
`try` counting from 1.

    python bench/nightly/builds_table.py bench/nightly/raw/local-2c-builds-2026-12-07 --out bench/nightly/results/builds.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

_COUNTS = {"hits": re.compile(r"^\s*Hits:\s+(\d+)", re.M), "misses": re.compile(r"^\s*Misses:\s+(\d+)", re.M)}
# build-kernel's own summary of a build's compile cache, e.g. "compile cache ccache (...): 0 hits, 0 misses (- hits),
# 29 uncacheable, 0 storage errors".
_TOOL = re.compile(r"^compile cache .*?: (\d+) hits, (\d+) misses .*?, (\d+) uncacheable", re.M)
# The build stage's own last line, e.g. "✓ build 12.0a with 2 job(s) (2779.5 s)": the wall of a night whose record
# keeps no build (a night that built and then failed verify, before c1a83a0 kept it).
_BUILT = re.compile(r"^✓ build (\S+) with \d+ job\(s\) \(([\d.]+) s\)", re.M)
_FOLDER = re.compile(r"^(\d{4}-\d{2}-\d{2})-([0-9a-f]{12})(?:\.before-(\d{6}))?$")


def _ccache(text: str) -> dict[str, int]:
    found = {k: int(m.group(1)) for k, p in _COUNTS.items() if (m := p.search(text))}
    return found


def _load(text: str) -> list[float]:
    """The 1-minute load average of each uptime line (before, after)."""
    return [float(m.group(1)) for m in re.finditer(r"load average: ([\d.]+)", text)]


def rows(raw: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    before = {"hits": 0, "misses": 0}
    folders = [p for p in raw.iterdir() if p.is_dir() and _FOLDER.match(p.name)
               and (p / "rc.txt").is_file()]  # a night still running has no rc.txt yet
    # A night's earlier tries (renamed .before-HHMMSS) before its last; tries in the order they ran.
    def order(p: Path) -> tuple[str, int, str]:
        m = _FOLDER.match(p.name)
        assert m is not None
        return (m.group(1), 0 if m.group(3) else 1, m.group(3) or "")
    tries: dict[str, int] = {}
    for folder in sorted(folders, key=order):
        key = folder.name[:23]
        tries[key] = tries.get(key, 0) + 1
        rc_text = (folder / "rc.txt").read_text()
        rec = json.loads((folder / "record.json").read_text()) if (folder / "record.json").is_file() else None
        err = (folder / "night.err").read_text(errors="replace")
        cc = _ccache((folder / "ccache.txt").read_text()) if (folder / "ccache.txt").is_file() else {}
        build = (rec or {}).get("build") or {}
        wheel = (rec or {}).get("wheel") or {}
        tool = _TOOL.findall(err)
        logged = _BUILT.findall(err)
        out.append({
            "night": folder.name[:10], "commit": folder.name[11:23], "try": tries[key],
            "compile_cache": ({"hits": int(tool[-1][0]), "misses": int(tool[-1][1]), "uncacheable": int(tool[-1][2])}
                              if tool else None),
            "rc": int(re.search(r"rc=(\d+)", rc_text).group(1)),  # type: ignore[union-attr]
            "night_wall_s": int(re.search(r"wall_s=(\d+)", rc_text).group(1)),  # type: ignore[union-attr]
            "outcome": (rec or {}).get("outcome"), "series": ((rec or {}).get("series") or {}).get("version"),
            "retired": ((rec or {}).get("series") or {}).get("retired"),
            "archs": build.get("archs"),
            "build_wall_s": build.get("wall_s") or (float(logged[-1][1]) if logged else None),
            "build_wall_from": "record" if build.get("wall_s") else ("log" if logged else None),
            "compiler_cpu_s": build.get("compiler_cpu_s"), "peak_rss_mb": build.get("peak_rss_mb"),
            "load_1min": _load((folder / "load.txt").read_text()),
            "ccache": {k: cc[k] - before[k] for k in cc},
            "wheel": wheel.get("name"), "sha256": wheel.get("sha256"), "published_to": wheel.get("published_to"),
            "publish": [line.strip() for line in err.splitlines()
                        if re.search(r" -> .*\((uploaded|unchanged|skipped)\)|installed .* back from|does not hold",
                                     line)],
            "on_index": (folder / "index.txt").read_text().split()[-1:] if (folder / "index.txt").is_file() else [],
            "reason": (rec or {}).get("reason"),
        })
        before = {k: cc.get(k, before[k]) for k in before}
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    lines = ["| night | try | commit | series | outcome | build wall s | compiler CPU s | night wall s | load 1 min "
             "| compile cache hits/misses/uncacheable | installed back |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        back = any("installed" in p for p in r["publish"])
        cache = r["compile_cache"] or r["ccache"]
        lines.append(f"| {r['night']} | {r['try']} | `{r['commit']}` | {r['series'] or '-'} | {r['outcome']} | "
                     f"{'' if r['build_wall_s'] is None else format(r['build_wall_s'], ',.0f')} | "
                     f"{'' if r['compiler_cpu_s'] is None else format(r['compiler_cpu_s'], ',.0f')} | "
                     f"{r['night_wall_s']:,} | {' → '.join(format(x, '.1f') for x in r['load_1min'])} | "
                     f"{'/'.join(str(cache.get(k, '-')) for k in ('hits', 'misses', 'uncacheable'))} | "
                     f"{'yes' if back else 'no'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--markdown", action="store_true", help="also print the README's table")
    args = ap.parse_args()
    table = rows(args.raw)
    if args.markdown:
        print(markdown(table))
    host = (args.raw / "host.txt").read_text().splitlines()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"raw": args.raw.name, "host": host[:3], "nights": table}, indent=1,
                                   sort_keys=True) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
