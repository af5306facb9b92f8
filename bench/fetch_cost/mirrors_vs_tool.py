"""What it costs to get a recipe's source and dependency trees: full mirrors vs build-kernel.

Side by side in one run, each from an empty folder, for every repository the recipe names
(its source and `[deps]`), fetched from where the user's mirror settings point:
- baseline: what build-kernel did before (and what a hand build does): `git clone --mirror`
  (every branch, tag and pull-request ref) and a full checkout of the pin;
- ours: the tool's fetch (the pin by SHA, blob-less, sparse to the paths the build reads).
Bytes are what lands on disk (mirrors + trees); times are wall seconds.

    python bench/fetch_cost/mirrors_vs_tool.py --recipe nightly-cu130 [--out bench/fetch_cost/results/fetch_cost.json]

Servers must allow filters and SHA wants for the blob-less path (GitHub does; a local
`git daemon`/file:// mirror needs uploadpack.allowFilter and uploadpack.allowAnySHA1InWant).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel import recipe as recipe_mod
from build_kernel.plan import Plan, resolve
from build_kernel.stages.fetch import remote as fetch


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def baseline(url: str, commit: str, scratch: Path) -> dict[str, float]:
    """`git clone --mirror` + a full checkout of the pin (what a hand build, and build-kernel
    before, did)."""
    mirror, tree = scratch / "mirror.git", scratch / "tree"
    start = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", "--mirror", url, str(mirror)], check=True, capture_output=True)
    subprocess.run(["git", "clone", "--quiet", "--shared", "--no-checkout", str(mirror), str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "checkout", "--quiet", "--detach", commit], check=True)
    return {"seconds": time.monotonic() - start, "bytes": du(mirror) + du(tree)}


def ours(url: str, commit: str, paths: tuple[str, ...], scratch: Path, plan: Plan) -> dict[str, float]:
    """The tool's own fetch: the pin by SHA, blob-less, the files under `paths` only."""
    start = time.monotonic()
    mirror, sha = fetch.ensure_commit(url, commit, scratch, offline=False, allow_floating=not fetch.SHA_RE.match(commit),
                                      paths=paths, mirrors=plan.mirrors, history=False)
    fetch.checkout(mirror, sha, scratch / "tree", paths=paths)
    return {"seconds": time.monotonic() - start, "bytes": du(scratch)}


def measure(name: str, url: str, commit: str, paths: tuple[str, ...], plan: Plan, tmp: Path) -> dict[str, object]:
    row: dict[str, object] = {"repo": url, "commit": commit, "paths": list(paths)}
    try:
        row["baseline"] = baseline(plan.mirrors.rewrite(url).fetch_url, commit, tmp / name / "baseline")
    except subprocess.CalledProcessError as exc:  # e.g. a snapshot that lacks an object the full clone needs
        row["baseline_error"] = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
    row["ours"] = ours(url, commit, paths, tmp / name / "ours", plan)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "fetch_cost" / "results" / "fetch_cost.json")
    args = parser.parse_args()
    plan = resolve(recipe_mod.load(args.recipe))
    r = plan.recipe
    repos = [("source", r.source.repo, r.source.commit, r.source.paths)]
    repos += [(d.name, d.repo, d.commit or d.tag, d.paths) for d in r.deps if d.repo]
    with tempfile.TemporaryDirectory(prefix="bk-fetch-cost-") as tmp:
        rows = {name: measure(name, url, commit, paths, plan, Path(tmp)) for name, url, commit, paths in repos}
    both = [row for row in rows.values() if "baseline" in row]

    def total(side: str, key: str) -> float:
        return sum(float(row[side][key]) for row in both)  # type: ignore[index]

    result = {
        "recipe": r.name, "compared": [n for n, row in rows.items() if "baseline" in row], "per_repo": rows,
        "baseline_bytes": total("baseline", "bytes"), "ours_bytes": total("ours", "bytes"),
        "baseline_seconds": round(total("baseline", "seconds"), 2), "ours_seconds": round(total("ours", "seconds"), 2),
    }
    result["ratio_bytes"] = round(result["baseline_bytes"] / result["ours_bytes"], 1)
    result["ratio_seconds"] = round(result["baseline_seconds"] / result["ours_seconds"], 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in rows.items():
        base = row.get("baseline")
        mine = row["ours"]
        left = f"{base['bytes'] / 1e6:9.1f} MB {base['seconds']:6.1f} s" if isinstance(base, dict) else f"{'failed':>21}"
        print(f"{name:22} full mirror {left}   build-kernel {mine['bytes'] / 1e6:7.1f} MB {mine['seconds']:5.1f} s")  # type: ignore[index]
    print(f"over {len(both)} repositories: {result['ratio_bytes']}x fewer bytes, {result['ratio_seconds']}x less time")


if __name__ == "__main__":
    main()
