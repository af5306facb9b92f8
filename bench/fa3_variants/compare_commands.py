"""The FA3 units a pruned build keeps compile exactly as in the full build (issue 42 item 3), from two configures.

0010-fa3-variants.patch leaves FA3 instantiation units out and gives only flash_api.cpp upstream's
FLASHATTENTION_DISABLE_* switches; every kept unit must compile with the same command line as in the build
without the patch (same source, flags, defines, includes), so its object, and the SASS of its kernels, is the
full build's. `digest` reduces a configure's build.ninja to what this compares, and nothing that builds
upstream's tree: per FA3 unit the sha256 of its ninja edge (the build folder's own path normalised) and its
-D defines. `compare` reads two digests.

    python bench/fa3_variants/compare_commands.py digest BUILD/cmake/build.ninja --out full.json
    python bench/fa3_variants/compare_commands.py compare full.json pruned.json [--out bench/fa3_variants/results/fa3-variants-commands.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EDGE = re.compile(r"build (\S+?(?:instantiations/(flash_fwd_\S+?\.cu)|hopper/(flash_api\.cpp|flash_fwd_combine\.cu|"
                  r"flash_prepare_scheduler\.cu))\.o):")
HOST = ("flash_api.cpp", "flash_fwd_combine.cu", "flash_prepare_scheduler.cu")


def digest(text: str) -> dict[str, dict[str, Any]]:
    """FA3's compile edges by unit name: the sha256 of the edge's variables (the build folder written as
    BUILD/) and its -D defines."""
    out: dict[str, dict[str, Any]] = {}
    for block in re.split(r"\n(?=build )", text):
        m = EDGE.match(block)
        if m:
            body = "\n".join(line.strip() for line in block.splitlines()[1:] if line.startswith("  "))
            body = re.sub(r"/[^\s]*/build/[0-9a-f]+/", "BUILD/", body)
            out[m.group(2) or m.group(3)] = {"sha256": hashlib.sha256(body.encode()).hexdigest(),
                                             "defines": sorted(set(re.findall(r"(?<!\S)-D\S+", body)))}
    return out


def compare(full: dict[str, dict[str, Any]], pruned: dict[str, dict[str, Any]]) -> dict[str, Any]:
    units = sorted(k for k in full if k.startswith("flash_fwd_hdim"))
    kept = sorted(k for k in pruned if k.startswith("flash_fwd_hdim"))
    host = {}
    for name in HOST:
        before, after = set(full.get(name, {}).get("defines", ())), set(pruned.get(name, {}).get("defines", ()))
        host[name] = [f"+ {d}" for d in sorted(after - before)] + [f"- {d}" for d in sorted(before - after)]
    return {
        "full_units": len(units),
        "full_aggregates": sum(1 for k in units if k.startswith(("flash_fwd_hdimall", "flash_fwd_hdimdiff"))),
        "kept_units": kept,
        "kept_not_in_full": [k for k in kept if k not in full],
        "kept_identical": [k for k in kept if k in full and full[k]["sha256"] == pruned[k]["sha256"]],
        "kept_different": [k for k in kept if k in full and full[k]["sha256"] != pruned[k]["sha256"]],
        "host_units_changed_defines": host,
    }


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("digest", help="a build.ninja's FA3 edges, as digests")
    d.add_argument("ninja", type=Path)
    d.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare", help="two digests: the kept units against the full build's")
    c.add_argument("full", type=Path)
    c.add_argument("pruned", type=Path)
    c.add_argument("--out", type=Path, default=ROOT / "bench" / "fa3_variants" / "results" / "fa3-variants-commands.json")
    args = ap.parse_args(argv)
    if args.command == "digest":
        args.out.write_text(json.dumps(digest(args.ninja.read_text()), indent=1, sort_keys=True) + "\n")
        return 0
    result = {"full": _rel(args.full), "pruned": _rel(args.pruned),
              **compare(json.loads(args.full.read_text()), json.loads(args.pruned.read_text()))}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(result['kept_identical'])} of {len(result['kept_units'])} kept units compile exactly as in the full "
          f"build ({result['full_units']} units, {result['full_aggregates']} of them aggregates); flash_api.cpp "
          f"changes by {', '.join(result['host_units_changed_defines']['flash_api.cpp'])}")
    return 0 if not result["kept_different"] and not result["kept_not_in_full"] else 1


if __name__ == "__main__":
    sys.exit(main())
