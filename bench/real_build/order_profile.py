"""Write a recipe's shipped compile-order profile from a measured build's raw outputs.

The profile recorder's rows (`<label>-profile.sqlite` inside a device call's `<label>-raw.tar.gz`)
become the CSV `[build] order_profile` names: one row per source of the tree (csrc/) and of each
pre-fetched dependency, longest first. A dependency's source is named as the recorder now names it,
`deps/<FetchContent name>/<path>` (runs before that recorded its absolute cache path, whose folder is
`<name>-<12-hex pin>[-<8-hex paths digest>]`).

    python bench/real_build/order_profile.py bench/pruning/raw/h200-2026-12-01/a1-raw.tar.gz recipes/nightly-cu130.profile.csv
    python bench/real_build/order_profile.py --series 'v3 (arch-pruned)' bench/pruning/raw/h200-2026-12-02/p-raw.tar.gz \
        recipes/nightly-cu130-pruned.profile.csv
    python bench/real_build/order_profile.py --series 'v6 (arch-pruned, small TUs in batches, sparse FA for 8.x/9.0 only)' \
        bench/pruning/raw/h200-2026-12-02-sparse/b6-raw.tar.gz recipes/nightly-cu130-pruned.profile.csv
    python bench/real_build/order_profile.py --package flash-attn --series-name flash-attn --series v2 --archs 9.0 \
        --commit 060c9188beec3a8b62b33a3bfa6d5d2d44975fab \
        --host '16 cores,\n# 125 GiB, 16 jobs, nvcc 13.0.88, NVCC_THREADS 2' --machine 'a 16-core H200 host (16 jobs)' \
        bench/flash_attn/raw/h200-2026-12-04-fa/fa-h-raw.tar.gz recipes/flash-attn-2.8.3.profile.csv
"""

from __future__ import annotations

import argparse
import csv
import re
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared raw-pack reader
from raw_pack import member  # the same raw tarballs, read the same way

HEADER = """\
# Compile times of {package} {short} with the {series_name} {series} series for {archs}: one full build
# (build-kernel's recorder, profile.sqlite of {raw}; {host}). build.ninja's compiles start longest first by
# `seconds`, and the governor predicts their memory by `peak_gb`, until this machine's profile knows them.
# measured-for: archs={archs}; commit={commit}; series={series_name}/{version}; host={machine}
"""


_DEP = re.compile(r"(?:^|/)deps/(?P<name>[^/]+?)-[0-9a-f]{12}(?:-[0-9a-f]{8})?/(?P<rest>.+)$")


def named(source: str) -> str | None:
    """The profile's name of a recorded source: csrc/... as is, a dependency's as deps/<name>/...; None
    for anything else (CMake's probes)."""
    if source.startswith(("csrc/", "deps/")):
        return source
    m = _DEP.search(source)
    return f"deps/{m['name']}/{m['rest']}" if m else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--series", default="v2", help="the patch series the measured build applied")
    # What the build's ETA compares with its own (build_kernel.stages.builder.scheduling.profile_note).
    parser.add_argument("--archs", default="12.0a", help="TORCH_CUDA_ARCH_LIST of the measured build")
    parser.add_argument("--commit", default="6ffc74efd7d23627c0245efb61af7f62cde4a970", help="the measured pin")
    parser.add_argument("--package", default="sgl-kernel", help="what was built (the header's words)")
    parser.add_argument("--series-name", default="sm120", help="the patch series' name (recipe [patches] series)")
    # The measured host, as the header says it (\n: a line break, so a long one still fits the comment block).
    parser.add_argument("--host", default="16 cores,\\n# 125 GiB, 15 jobs, nvcc 13.0.88, --threads 1")
    # The machine in a few words, for `plan`'s build time ("measured on ..."; build_kernel/stages/builder/forecast.py).
    parser.add_argument("--machine", default="a 16-core H200 host (15 jobs)")
    args = parser.parse_args()
    with tarfile.open(args.raw) as tar:
        db = member(tar, "profile.sqlite")
    assert db, f"{args.raw}: no profile.sqlite in it"
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(db)
        f.flush()
        conn = sqlite3.connect(f.name)
        recorded = conn.execute("SELECT source, MAX(wall_s), MAX(tree_peak_mb), compiler FROM compiles "
                                "GROUP BY source").fetchall()
        conn.close()
    rows = sorted(((name, wall, peak, compiler) for source, wall, peak, compiler in recorded
                   if (name := named(source or ""))), key=lambda r: (-r[1], r[0]))
    with args.out.open("w", newline="") as fh:
        fh.write(HEADER.format(raw=args.raw.as_posix(), series=args.series, archs=args.archs, commit=args.commit,
                               version=args.series.split()[0], package=args.package, short=args.commit[:8],
                               series_name=args.series_name, host=args.host.replace("\\n", "\n"),
                               machine=args.machine))
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["source", "seconds", "peak_gb", "compiler"])
        for source, wall, peak, compiler in rows:
            w.writerow([source, f"{wall:.1f}", f"{peak / 1024:.1f}", Path(compiler).name])


if __name__ == "__main__":
    main()
