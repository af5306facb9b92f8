"""The replay's table from its raw records: a row per night (night, commit, package version, series chosen, retired,
conflict and first bad commit, build wall, the plan's verdict, patch check and patch health beside the choice), and
what the choice drops: the recipe's own series' patches (nightly-cu130: sm120 v8) that the chosen version does not
carry, that no night so far reported retired and whose Applied-Upstream fix is not in the night's history; the
older versions the night passed over as silent downgrades (series.tried); and the patches it carries that the recipe
omits.

    python bench/nightly/replay_table.py bench/nightly/raw/local-2c-2026-12-07 --out bench/nightly/results/replay.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from build_kernel.nightly import record  # the contract's reader: only records that keep it

RECIPE_SERIES = ROOT / "patches" / "sm120" / "v8"  # nightly-cu130's own version (recipes/nightly-cu130.toml)
# Its [patches.omitted] (0011, 0012 now), read from the recipe: a version carrying one is no candidate since 4281028.
OMITTED = {f"{name}.patch" for name in
           tomllib.loads((ROOT / "recipes" / "nightly-cu130.toml").read_text())["patches"]["omitted"]}


def _names(version: str | None) -> list[str]:
    if version is None:
        return []
    return [n for n in (ROOT / "patches" / "sm120" / version / "series").read_text().split() if not n.startswith("#")]


def rows(raw: Path) -> list[dict[str, Any]]:
    records = record.read_all(raw)
    detail = {d["commit"]: d for d in json.loads((raw / "replay.json").read_text())["nights"]}
    own = _names(RECIPE_SERIES.name)
    retired: set[str] = set()
    out = []
    for r in records:
        d = detail[r["upstream"]["commit"]]
        series = r["series"]
        retired |= set(series["retired"])
        carried = _names(series["version"])
        conflict = series["conflict"]
        build = r["build"]
        health = d.get("patch_health")
        out.append({
            "night": r["night"], "commit": r["upstream"]["commit"][:12], "package_version": d["package_version"],
            "outcome": r["outcome"], "series": series["version"], "retired": series["retired"],
            "passed_over": [t["version"] for t in series.get("tried", []) if t["why_not"].startswith("older than")],
            "conflict": None if conflict is None else {"patch": conflict["patch"],
                                                       "first_bad_commit": (conflict["first_bad_commit"] or "")[:12]},
            "build_wall_s": None if build is None else build["wall_s"],
            "compiler_cpu_s": None if build is None else build["compiler_cpu_s"],
            "wheel": None if r["wheel"] is None else {k: r["wheel"][k] for k in ("name", "sha256", "published_to")},
            "plan": d["plan"], "patch_check": d["patch_check"],
            "patch_health": None if health is None else {"newest_applying": health["newest"],
                                                         "agrees": health["agrees"]},
            # Upstream has it (an earlier night's retired, or its Applied-Upstream commit in this night's history):
            # no version needs to carry it any more.
            "drops": sorted(set(own) - set(carried) - retired - set(d.get("recipe_patches_upstream", []))) if carried
            else [],
            "recipe_patches_upstream": d.get("recipe_patches_upstream", []),
            "carries_omitted": sorted(OMITTED & set(carried)),
            "lock_changes": [f"{c['pin']} {c['from']} -> {c['to']}" for c in r["lock_changes"]],
        })
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    """The README's table: night, commit, package version, series, retired, conflict, build wall, patch health."""
    lines = ["| night | commit | version | series | retired | conflict (first bad commit) | build wall s | health |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        c = r["conflict"]
        h = r["patch_health"]
        lines.append(f"| {r['night']} | `{r['commit']}` | {r['package_version']} | {r['series'] or '-'}"
                     f"{' (drops ' + str(len(r['drops'])) + ')' if r['drops'] else ''} | "
                     f"{', '.join(p.split('-')[0] for p in r['retired']) or ''} | "
                     f"{'' if c is None else c['patch'].split('-')[0] + ' (`' + c['first_bad_commit'] + '`)'}"
                     f"{'; passes over ' + str(len(r['passed_over'])) + ' older' if r['passed_over'] else ''} | "
                     f"{'' if r['build_wall_s'] is None else format(r['build_wall_s'], ',.0f')} | "
                     f"{'' if h is None else ('agrees' if h['agrees'] else 'DIFFERS: ' + str(h['newest_applying']))} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--markdown", action="store_true", help="also print the README's table")
    args = ap.parse_args()
    table = rows(args.raw)
    health = [r["patch_health"] for r in table if r["patch_health"] is not None]
    summary = {
        "nights": len(table), "raw": args.raw.name,
        "outcomes": {o: sum(r["outcome"] == o for r in table) for o in record.OUTCOMES},
        "series": {v: sum(str(r["series"]) == v for r in table) for v in sorted({str(r["series"]) for r in table})},
        "patch_check_applies": sum(r["patch_check"] is True for r in table),
        "patch_health_rows": len(health), "patch_health_agrees": sum(h["agrees"] for h in health),
        "nights_dropping_unretired_patches": sum(bool(r["drops"]) for r in table),
        "nights_passing_over_older_versions": sum(bool(r["passed_over"]) for r in table),
        "nights_reporting_retired": sum(bool(r["retired"]) for r in table),
        "retired_first_night": {p: next(r["night"] for r in table if p in r["retired"])
                                for p in sorted({p for r in table for p in r["retired"]})},
        "nights_carrying_omitted_patches": sum(bool(r["carries_omitted"]) for r in table),
        "built": sum(r["build_wall_s"] is not None for r in table),
    }
    if args.markdown:
        print(markdown(table))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "nights": table}, indent=1, sort_keys=True) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
