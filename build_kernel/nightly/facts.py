"""What a finished night's stages say, in the record's words: the build (wall, compiler CPU, peak memory), the
tests per file, the logs, the wheel (its digest and where it was published), kept in the state folder."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

from build_kernel import atomic, stages
from build_kernel.nightly import state
from build_kernel.stages.verify.report import sha256_of


def logs(ctx: stages.Context, into: dict[str, str], since: float = 0.0) -> None:
    """The stages' own log files that exist (the night's own log is put there by night.py). A build that failed
    hands over no result: its log is the recipe's build log written since `since` (a time.time())."""
    p = ctx.plan
    if ctx.build is not None:
        into["build"] = str(ctx.build.log)
    else:
        written = [f for f in (p.cache_dir / "logs").glob(f"{p.recipe.name}-*.log") if f.stat().st_mtime >= since]
        if written:
            into["build"] = str(max(written, key=lambda f: f.stat().st_mtime))
    publish_log = p.cache_dir / "logs" / f"publish-{p.recipe.name}.log"
    if "publish" in ctx.outcomes and publish_log.is_file():
        into["publish"] = str(publish_log)
    for wheel in ctx.wheels:
        for suffix, stage in ((".verify.json", "verify"), (".tests.json", "test")):
            found = wheel.with_name(wheel.name + suffix)
            if found.is_file():
                into[stage] = str(found)


def build(ctx: stages.Context) -> dict[str, Any]:
    """The compile that made tonight's wheel (from its provenance: a cached or resumed build says the same)."""
    assert ctx.build is not None
    prov = ctx.build.provenance
    # The largest single process among this night's children (a cicc, an nvcc): the kernel keeps a peak per
    # process, not per tree. Unknown when tonight compiled nothing (the wheel came from the cache).
    peak = None if ctx.build.cached else resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"archs": [str(a) for a in prov.get("archs") or [a.torch for a in ctx.plan.archs]],
            "wall_s": float(prov.get("seconds") or ctx.outcomes.get("build", {}).get("seconds") or 0.0),
            "compiler_cpu_s": float(prov["cpu_seconds"]) if prov.get("cpu_seconds") is not None else None,
            "peak_rss_mb": round(peak, 1) if peak is not None else None}


def per_file(test_record: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {r["file"]: {"passed": int(r.get("passed", 0)), "failed": len(r.get("failed", [])),
                        "skipped": len(r.get("skipped", {}))} for r in test_record.get("results", [])}


def wheel(ctx: stages.Context, state_dir: Path) -> dict[str, Any]:
    """Tonight's wheel, copied into the state folder (retention's to keep or drop), and where it was published."""
    assert ctx.build is not None
    made = ctx.build.wheel
    kept = state.wheels_dir(state_dir) / made.name
    if not kept.is_file():
        atomic.copy_file(made, kept)
    published = ctx.outcomes.get("publish", {})
    target = published.get("target") if published.get("status") == "done" else None
    where = (target.get("simple_url") or target.get("url")) if isinstance(target, dict) else None
    return {"name": made.name, "version": ctx.build.version, "sha256": sha256_of(made), "published_to": where}
