"""The replay's history page, made by the tool's own page writer (build_kernel/nightly/history_page.py) from the
raw records: `page/history/nightly-cu130/index.html` (open it in a browser, or serve bench/nightly/page/), its
history.json and the recipes' index.

    python bench/nightly/replay_page.py                  # writes bench/nightly/page/
    python bench/nightly/replay_page.py --out FILE.html   # the recipe's page alone (FILE.json: its history.json)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from build_kernel.nightly import history_page

# The replay with the real nights merged (--built raw/local-2c-builds-2026-12-07): their logs are paths from the root.
RAW = ROOT / "bench" / "nightly" / "raw" / "local-2c-2026-12-07-built-3-nights"
PAGE = ROOT / "bench" / "nightly" / "page"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=RAW)
    ap.add_argument("--out", type=Path, help="one file: the page (.html) or its history.json (.json)")
    args = ap.parse_args()
    args.raw, args.out = args.raw.resolve(), args.out.resolve() if args.out else None
    os.chdir(ROOT)  # the built nights' logs are named from the repository's root (bench/nightly/pack_builds.py)
    if args.out is None:
        shutil.rmtree(PAGE / "history", ignore_errors=True)
        for page in history_page.write(args.raw, PAGE):
            print(page)
        return
    with tempfile.TemporaryDirectory() as tmp:
        page = history_page.write(args.raw, Path(tmp))[0]
        args.out.write_bytes((page if args.out.suffix == ".html" else page.parent / "history.json").read_bytes())
    print(args.out)


if __name__ == "__main__":
    main()
