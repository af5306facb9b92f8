"""Throughput with its noise (issue 70 item 4): rounds_on_gpu_host.sh's raw pack into the median ratio and its spread.

Per round and concurrency, the ratio is the pruned run's output tokens/s over the reference run's of the SAME round
(the pair served back to back, the order alternating by round). Reported per concurrency: every run (kept or not,
with why), the rounds' ratios, their median, min and max, and a bootstrap 95 % interval of the median (resampling
rounds, BOOTSTRAP resamples from a fixed seed: the same pack gives the same file). The exclusion rule is the
script's, written before any run: a run counts unless its serve exited non-zero or its bench completed fewer requests
than it sent; a round counts at a concurrency only when both of its runs count there. Nothing is dropped for its
figure. `difference_real` says whether the interval leaves out 1.0.

    python bench/throughput/rounds_report.py rounds-raw.tar.gz [--out bench/throughput/results/rounds.json]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import re
import statistics
import tarfile
from pathlib import Path
from typing import Any

BOOTSTRAP = 10000
SEED = 0
LABELS = ("pruned", "reference")
_RUN = re.compile(r"^(?:\./)?runs/r(\d+)-(pruned|reference)/(rc|serve-bench\.json)$")


def read_pack(path: Path) -> dict[tuple[int, str], dict[str, Any]]:
    """(round, label) -> {"rc": int | None, "bench": rows by concurrency} from a tarball or a folder."""
    files: dict[str, bytes] = {}
    if path.is_dir():
        files = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    else:
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.isfile() and _RUN.match(m.name):
                    files[m.name] = tar.extractfile(m).read()  # type: ignore[union-attr]
    runs: dict[tuple[int, str], dict[str, Any]] = {}
    for name, data in files.items():
        m = _RUN.match(name)
        if not m:
            continue
        run = runs.setdefault((int(m.group(1)), m.group(2)), {"rc": None, "bench": {}})
        if m.group(3) == "rc":
            run["rc"] = int(data.decode().strip() or -1)
        else:
            rows = json.load(io.BytesIO(data)).get("bench") or []
            run["bench"] = {int(r["concurrency"]): r for r in rows}
    return runs


def excluded(run: dict[str, Any] | None, concurrency: int, sent: int) -> str | None:
    """Why a run does not count at this concurrency (the script's rule), or None."""
    if run is None:
        return "no run"
    if run["rc"] != 0:
        return f"serve exited {run['rc']}"
    row = run["bench"].get(concurrency)
    if row is None or row.get("output_throughput") is None:
        return "no bench result"
    if (row.get("completed") or 0) < sent:
        return f"completed {row.get('completed')} of {sent} requests"
    return None


def bootstrap_median(ratios: list[float], n: int = BOOTSTRAP, seed: int = SEED) -> tuple[float, float]:
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return medians[int(0.025 * n)], medians[int(0.975 * n) - 1]


def report(runs: dict[tuple[int, str], dict[str, Any]], sent: int = 256) -> dict[str, Any]:
    rounds = sorted({r for r, _ in runs})
    concurrencies = sorted({c for run in runs.values() for c in run["bench"]}) or [1, 32]
    out: dict[str, Any] = {}
    for c in concurrencies:
        rows, ratios = [], []
        for r in rounds:
            pair = {label: runs.get((r, label)) for label in LABELS}
            why = {label: excluded(pair[label], c, sent) for label in LABELS}
            tps = {label: (pair[label] or {}).get("bench", {}).get(c, {}).get("output_throughput") for label in LABELS}
            ratio = tps["pruned"] / tps["reference"] if not any(why.values()) and tps["reference"] else None
            rows.append({"round": r, "first": "pruned" if r % 2 else "reference", **{f"{k}_tps": v for k, v in tps.items()},
                         "ratio": None if ratio is None else round(ratio, 4),
                         "excluded": {k: v for k, v in why.items() if v}})
            if ratio is not None:
                ratios.append(ratio)
        entry: dict[str, Any] = {"rounds": rows, "rounds_counted": len(ratios)}
        if ratios:
            low, high = bootstrap_median(ratios)
            entry.update(median_ratio=round(statistics.median(ratios), 4), min_ratio=round(min(ratios), 4),
                         max_ratio=round(max(ratios), 4), bootstrap_95=[round(low, 4), round(high, 4)],
                         difference_real=not (low <= 1.0 <= high))
        out[f"C={c}"] = entry
    return {"what": __doc__.splitlines()[0], "ratio": "pruned / reference output tokens per second, same round",
            "exclusion_rule": "a run counts unless its serve exited non-zero or its bench completed fewer requests "
                              "than it sent; a round counts only when both its runs count (written before the runs)",
            "bootstrap": {"resamples": BOOTSTRAP, "seed": SEED, "of": "the median of the rounds' ratios"},
            "concurrency": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="rounds-raw.tar.gz (or its unpacked folder)")
    parser.add_argument("--requests", type=int, default=256, help="requests each bench sent (the script's 256)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "rounds.json")
    args = parser.parse_args()
    result = {"raw": args.raw.name, **report(read_pack(args.raw), args.requests)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for c, e in result["concurrency"].items():
        print(c, e.get("median_ratio"), e.get("bootstrap_95"), f"{e['rounds_counted']} rounds")
    print(args.out)


if __name__ == "__main__":
    main()
