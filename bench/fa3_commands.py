"""The FA3 units a pruned build keeps compile exactly as in the full build (issue 42 item 3), from two build.ninja.

0010-fa3-variants.patch leaves FA3 instantiation units out and gives only flash_api.cpp upstream's
FLASHATTENTION_DISABLE_* switches; every kept unit must compile with the same command line as in the build
without the patch (same source, flags, defines, includes), so its object, and the SASS of its kernels, is the
full build's. This compares the ninja edges of the two configures, the build folder's own path normalised.

    python bench/fa3_commands.py FULL.build.ninja[.gz] PRUNED.build.ninja[.gz] [--out bench/results/fa3-variants-commands.json]
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EDGE = re.compile(r"build (\S+?(?:instantiations/(flash_fwd_\S+?\.cu)|hopper/(flash_api\.cpp|flash_fwd_combine\.cu|"
                  r"flash_prepare_scheduler\.cu))\.o):")


def _read(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


def edges(text: str) -> dict[str, str]:
    """FA3's compile edges by unit name: the edge's variables, the build folder written as BUILD/."""
    out: dict[str, str] = {}
    for block in re.split(r"\n(?=build )", text):
        m = EDGE.match(block)
        if m:
            body = "\n".join(line.strip() for line in block.splitlines()[1:] if line.startswith("  "))
            out[m.group(2) or m.group(3)] = re.sub(r"/[^\s]*/build/[0-9a-f]+/", "BUILD/", body)
    return out


def compare(full: dict[str, str], pruned: dict[str, str]) -> dict[str, Any]:
    units = sorted(k for k in full if k.startswith("flash_fwd_hdim"))
    kept = sorted(k for k in pruned if k.startswith("flash_fwd_hdim"))
    host = {}
    for name in ("flash_api.cpp", "flash_fwd_combine.cu", "flash_prepare_scheduler.cu"):
        added = [w for w in difflib.ndiff(full.get(name, "").split(), pruned.get(name, "").split()) if w[0] in "+-"]
        host[name] = added
    return {
        "full_units": len(units),
        "full_aggregates": sum(1 for k in units if k.startswith(("flash_fwd_hdimall", "flash_fwd_hdimdiff"))),
        "kept_units": kept,
        "kept_not_in_full": [k for k in kept if k not in full],
        "kept_identical": [k for k in kept if full.get(k) == pruned[k]],
        "kept_different": [k for k in kept if k in full and full[k] != pruned[k]],
        "host_units_changed_words": host,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("full", type=Path)
    ap.add_argument("pruned", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fa3-variants-commands.json")
    args = ap.parse_args(argv)
    result = {"full": str(args.full.relative_to(ROOT) if args.full.is_relative_to(ROOT) else args.full),
              "pruned": str(args.pruned.relative_to(ROOT) if args.pruned.is_relative_to(ROOT) else args.pruned),
              **compare(edges(_read(args.full)), edges(_read(args.pruned)))}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(result['kept_identical'])} of {len(result['kept_units'])} kept units compile exactly as in the full "
          f"build ({result['full_units']} units, {result['full_aggregates']} of them aggregates); flash_api.cpp "
          f"changes by {', '.join(result['host_units_changed_words']['flash_api.cpp'])}")
    return 0 if not result["kept_different"] and not result["kept_not_in_full"] else 1


if __name__ == "__main__":
    sys.exit(main())
