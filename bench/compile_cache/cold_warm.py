"""Cold vs warm builds of the miniature through a shared compile cache, side by side in one run.

A private redis-server on 127.0.0.1 stands for the team's cache. For each tool: an uncached
build (the baseline), a cold build (empty Redis: every compile stored), then two "other
machines" (fresh cache homes, so nothing local survives): one at another path, one at the
same path as the cold build. Each build is the CLI in a subprocess with its own cache home;
`compile s` is the build's own wall time (the provenance `seconds`), `total s` the
command's, fetch and patch of the fresh home included; `cpu s` counts the build's
children only, so sccache's compiles (run by its server, not a child) are not in it.

    python bench/compile_cache/cold_warm.py [--tools ccache,sccache] [--out bench/compile_cache/results/compile_cache.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel.compile_cache import engines, settings
from tests.conftest import copy_series, demo_recipe_text, write_recipe


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = engines.free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while settings.unreachable("127.0.0.1", port, 0.2):
        time.sleep(0.1)
    return proc, f"redis://127.0.0.1:{port}"


def build(recipe: Path, home: Path, tool: str, url: str) -> dict[str, Any]:
    env = {**os.environ, "NO_COLOR": "1", "BUILD_KERNEL_CONFIG": str(home.parent / "no-config.toml"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = [sys.executable, "-m", "build_kernel", "--cache-dir", str(home), "--output-dir", str(home / "out"),
           "--compile-cache", tool, *(["--cache-url", url] if tool != "none" else []), "--json", "build",
           "--recipe", str(recipe)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    total = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"build failed: {proc.stderr[-2000:]}")
    prov = json.loads(proc.stdout)["provenance"]
    cc = prov["compile_cache"]
    return {"total_s": round(total, 1), "compile_s": prov["seconds"], "cpu_s": prov["cpu_seconds"],
            "hits": cc.get("hits"), "misses": cc.get("misses"), "hit_fraction": cc.get("hit_fraction"),
            "errors": cc.get("errors"), "home": str(home)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", default="ccache,sccache")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "compile_cache" / "results" / "compile_cache.json")
    args = ap.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bk-cc-bench-") as tmp_name:
        tmp = Path(tmp_name)
        proj = tmp / "proj"
        (proj / "recipes").mkdir(parents=True)
        (proj / "patches").mkdir()
        copy_series(proj, sorted((ROOT / "patches/minikernel/v1/series").read_text().split()), "v1")
        recipe = write_recipe(proj, "r", demo_recipe_text())
        redis, url = start_redis(tmp)
        try:
            rows["uncached"] = build(recipe, tmp / "none" / "home", "none", "")
            for tool in args.tools.split(","):
                same = tmp / tool / "farm-path"
                rows[f"{tool} cold"] = build(recipe, same, tool, url)
                shutil.rmtree(same)  # the next machine starts with nothing local
                rows[f"{tool} warm, other path"] = build(recipe, tmp / tool / "elsewhere" / "home", tool, url)
                rows[f"{tool} warm, same path"] = build(recipe, same, tool, url)
                subprocess.run(["redis-cli", "-u", url, "flushall"], capture_output=True, check=False)
        finally:
            redis.kill()
            redis.wait()
    print(f"{'build':28} {'total s':>8} {'compile s':>10} {'cpu s':>7} {'hits':>5} {'misses':>6} {'hit %':>6}")
    for name, r in rows.items():
        frac = "-" if r["hit_fraction"] is None else f"{100 * r['hit_fraction']:.0f}"
        print(f"{name:28} {r['total_s']:8.1f} {r['compile_s']:10.1f} {r['cpu_s']:7.1f} "
              f"{'-' if r['hits'] is None else r['hits']:>5} {'-' if r['misses'] is None else r['misses']:>6} {frac:>6}")
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "tools": {t: subprocess.run([t, "--version"], capture_output=True, text=True, check=False,
                                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
                                          ).stdout.splitlines()[:1] for t in args.tools.split(",")},
              "builds": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
