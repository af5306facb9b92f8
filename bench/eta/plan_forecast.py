"""`plan`'s build time checked against real builds (issue 66 item 7): for each raw pack, the forecast the plan
would have printed (build_kernel/stages/builder/forecast.py: the ETA's model, the shipped profile's times, the
build's own job count, HOST_FACTOR for times of another host) over that build's own compiles, beside the build's
real compile span (its .ninja_log, first start to last end).

    python bench/eta/plan_forecast.py --out bench/eta/results/plan-forecast.json

The compiles are the build's own (its .ninja_log's compile edges), as `plan` counts them once a build of the same recipe and
archs has listed them; what the shipped profile does not know is counted as the forecast counts it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from raw_pack import member, ninja_edges

from build_kernel.stages.builder import forecast, ninja_order

sys.path.insert(0, str(ROOT / "bench" / "eta"))
from eta_replay import source_of

PROFILE = ROOT / "recipes/nightly-cu130.profile.csv"  # measured on the 16-core H200 host: 12.0a, series v6
# (pack, what it was, whether the box was quiet): the 2-core box's builds of the shipped recipe's tree, and the
# H200 build the profile was taken from.
PACKS = [
    ("bench/split_tus/raw/local-2c-2026-12-06-split-pair/v8-sm120a-2c-raw.tar.gz", "12.0a, series v8, 2 cores", True),
    ("bench/split_tus/raw/local-2c-2026-12-06-split-pair/v11-sm120a-2c-raw.tar.gz", "12.0a, series v11, 2 cores", True),
    ("bench/arch_builds/raw/local-2c-2026-12-05-arch/sm100a-2c-raw.tar.gz", "10.0a, series v8, 2 cores", True),
    ("bench/arch_builds/raw/local-2c-2026-12-05-arch/sm90a-sm120a-2c-raw.tar.gz", "9.0a;12.0a, series v8, 2 cores",
     True),
    ("bench/arch_builds/raw/local-2c-2026-12-05-arch/sm121a-2c-raw.tar.gz", "12.1a, series v8, 2 cores", False),
    ("bench/arch_builds/raw/local-2c-2026-12-05-arch/sm89-2c-raw.tar.gz", "8.9, series v8, 2 cores", False),
    ("bench/pruning/raw/h200-2026-12-02-sparse/b6-raw.tar.gz", "12.0a, series v6, H200 16 cores (the profile's own)",
     True),
]


def one(pack: Path, what: str, quiet: bool, shipped: dict[str, float]) -> dict[str, Any]:
    with tarfile.open(pack) as tar:
        log, built = member(tar, "ninja_log.txt"), member(tar, "build.json")
    assert log, f"{pack}: no .ninja_log"
    edges = ninja_edges(log.decode())
    span = max(e[1] for e in edges) - min(e[0] for e in edges)
    # This build's compiles, from its own ninja log (a pack's profile may hold another build's rows too).
    sources = list(dict.fromkeys(s for _, _, out in edges if (s := source_of(out)) is not None))
    jobs = int(json.loads(built)["jobs"][0]) if built else 15
    low, high, unknown, _, _ = forecast.estimate(shipped, sources, jobs, forecast.HOST_FACTOR)
    assert low is not None and high is not None
    return {"pack": pack.relative_to(ROOT).as_posix(), "build": what, "quiet_box": quiet, "jobs": jobs,
            "compiles": len(sources), "unknown_to_profile": unknown, "forecast_s": [round(low), round(high)],
            "ninja_span_s": round(span, 1), "inside": low <= span <= high,
            "span_over_low": round(span / low, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    shipped = ninja_order.read_shipped(PROFILE)
    rows = [one(ROOT / pack, what, quiet, shipped) for pack, what, quiet in PACKS if (ROOT / pack).is_file()]
    result = {"what": "plan's build-time forecast (shipped nightly-cu130 profile, x1-x"
                      f"{forecast.HOST_FACTOR:g}) against each build's real compile span",
              "profile": PROFILE.relative_to(ROOT).as_posix(), "builds": rows,
              "inside": sum(r["inside"] for r in rows), "of": len(rows)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in rows:
        print(f"{r['build']:<52} {r['compiles']:>4} compiles ({r['unknown_to_profile']:>3} unknown) "
              f"forecast {r['forecast_s'][0]:>5}-{r['forecast_s'][1]:<6} s  real {r['ninja_span_s']:>7} s  "
              f"{'inside' if r['inside'] else 'OUTSIDE'}")


if __name__ == "__main__":
    main()
