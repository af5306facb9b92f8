"""What it costs to get a recipe's source and dependency trees: full mirrors vs build-kernel.

Side by side in one run, each from an empty folder, for every repository the recipe names
(its source and `[deps]`), fetched from where the user's mirror settings point:
- baseline: what build-kernel did before (and what a hand build does): `git clone --mirror`
  (every branch, tag and pull-request ref) and a full checkout of the pin;
- ours: `build-kernel fetch` (the pin by SHA, blob-less, sparse to the paths the build reads).
Bytes are what lands on disk (mirrors + trees); times are wall seconds.

    python bench/fetch_cost.py --recipe nightly-cu130 [--out bench/results/fetch_cost.json]

Servers must allow filters and SHA wants for the blob-less path (GitHub does; a local
`git daemon`/file:// mirror needs uploadpack.allowFilter and uploadpack.allowAnySHA1InWant).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from build_kernel import recipe as recipe_mod
from build_kernel.plan import resolve


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def baseline(urls: dict[str, tuple[str, str]], scratch: Path) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    for name, (url, commit) in urls.items():
        mirror, tree = scratch / f"{name}.git", scratch / name
        start = time.monotonic()
        subprocess.run(["git", "clone", "--quiet", "--mirror", url, str(mirror)], check=True)
        subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(mirror), str(tree)], check=True)
        subprocess.run(["git", "-C", str(tree), "checkout", "--quiet", "--detach", commit], check=True)
        rows[name] = {"seconds": time.monotonic() - start, "bytes": du(mirror) + du(tree)}
    return rows


def ours(recipe_name: str, cache: Path) -> dict[str, float]:
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "build_kernel", "--cache-dir", str(cache), "fetch", "--recipe", recipe_name],
                   check=True, env={**os.environ, "NO_COLOR": "1"})
    seconds = time.monotonic() - start
    return {"seconds": seconds, "bytes": du(cache / "mirrors") + du(cache / "src") + du(cache / "deps")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fetch_cost.json")
    args = parser.parse_args()
    plan = resolve(recipe_mod.load(args.recipe))
    r = plan.recipe
    urls = {"source": (plan.mirrors.rewrite(r.source.repo).fetch_url, r.source.commit)}
    urls.update({d.name: (plan.mirrors.rewrite(d.repo).fetch_url, d.commit or d.tag) for d in r.deps if d.repo})
    with tempfile.TemporaryDirectory(prefix="bk-fetch-cost-") as tmp:
        base = baseline(urls, Path(tmp) / "baseline")
        mine = ours(args.recipe, Path(tmp) / "cache")
    total = {"seconds": sum(v["seconds"] for v in base.values()), "bytes": sum(v["bytes"] for v in base.values())}
    result = {
        "recipe": r.name, "repositories": list(urls), "baseline": {"total": total, "per_repo": base}, "ours": mine,
        "ratio_bytes": round(total["bytes"] / mine["bytes"], 1), "ratio_seconds": round(total["seconds"] / mine["seconds"], 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"full mirrors: {total['bytes'] / 1e6:.1f} MB in {total['seconds']:.1f} s; build-kernel: "
          f"{mine['bytes'] / 1e6:.1f} MB in {mine['seconds']:.1f} s -> {result['ratio_bytes']}x bytes, "
          f"{result['ratio_seconds']}x time")


if __name__ == "__main__":
    main()
