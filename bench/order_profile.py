"""Write a recipe's shipped compile-order profile from a measured build's raw outputs.

The profile recorder's rows (`<label>-profile.sqlite` inside a device call's `<label>-raw.tar.gz`)
become the CSV `[build] order_profile` names: one row per csrc/ source, longest first.

    python bench/order_profile.py bench/raw/h200-2026-12-01/a1-raw.tar.gz recipes/nightly-cu130.profile.csv
    python bench/order_profile.py --series 'v3 (arch-pruned)' bench/raw/h200-2026-12-01/b-raw.tar.gz \
        recipes/nightly-cu130-pruned.profile.csv
"""

from __future__ import annotations

import argparse
import csv
import sqlite3
import tarfile
import tempfile
from pathlib import Path

from h200_arch_pruning import member  # the same raw tarballs, read the same way

HEADER = """\
# Compile times of sgl-kernel 6ffc74ef with the sm120 {series} series for 12.0a: one full build
# (build-kernel's recorder, profile.sqlite of {raw}; 16 cores,
# 125 GiB, 15 jobs, nvcc 13.0.88, --threads 1). Only the order matters: build.ninja's compiles
# start longest first by `seconds` until this machine's own profile knows them.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--series", default="v2", help="the patch series the measured build applied")
    args = parser.parse_args()
    with tarfile.open(args.raw) as tar:
        db = member(tar, "-profile.sqlite")
    assert db, f"{args.raw}: no profile.sqlite in it"
    with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
        f.write(db)
        f.flush()
        conn = sqlite3.connect(f.name)
        rows = conn.execute("SELECT source, MAX(wall_s), MAX(tree_peak_mb), compiler FROM compiles "
                            "WHERE source LIKE 'csrc/%' GROUP BY source ORDER BY MAX(wall_s) DESC").fetchall()
        conn.close()
    with args.out.open("w", newline="") as fh:
        fh.write(HEADER.format(raw=args.raw.as_posix(), series=args.series))
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["source", "seconds", "peak_gb", "compiler"])
        for source, wall, peak, compiler in rows:
            w.writerow([source, f"{wall:.1f}", f"{peak / 1024:.1f}", Path(compiler).name])


if __name__ == "__main__":
    main()
