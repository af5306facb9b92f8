"""The compile timeline every build leaves (stages/builder/trace.py): a trace-event JSON that Perfetto and
chrome://tracing open, read off the session's real demo build (no compile of its own)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from build_kernel.stages.builder import ninja_order, profile
from tests.conftest import DemoBuild

pytestmark = pytest.mark.slow


def test_the_build_prints_its_timeline_with_one_complete_event_per_compile_edge(demo_build: DemoBuild) -> None:
    [said] = re.findall(r"compile timeline: (\S+\.trace\.json)", demo_build.output)
    path = Path(said)
    assert path.parent == demo_build.cache / "logs" and path.is_file()
    key = path.name.removesuffix(".trace.json").rsplit("-", 1)[1]
    trace = json.loads(path.read_text())
    assert trace["displayTimeUnit"] == "ms" and isinstance(trace["traceEvents"], list)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # One per compile edge of the build's ninja manifest (the list its orderer wrote), named as the recorder names it.
    edges = json.loads((demo_build.cache / "build" / key / "bin" / ninja_order.EDGES).read_text())["sources"]
    assert sorted(e["name"] for e in complete) == sorted(edges) and len(edges) >= 3
    recorded = {r.source: r for r in profile.rows(demo_build.cache / profile.FILE) if r.cwd.startswith(
        str(demo_build.cache / "build" / key))}
    for event in complete:
        assert set(event) >= {"name", "ph", "ts", "dur", "pid", "tid"}
        assert isinstance(event["ts"], int) and isinstance(event["dur"], int) and event["ts"] >= 0
        # Microseconds: the recorder's wall seconds x 10^6.
        assert event["dur"] == max(1, round(recorded[event["name"]].wall_s * 1_000_000))
        assert event["args"]["tree_peak_mb"] == recorded[event["name"]].tree_peak_mb > 0
    # Lanes never overlap: two compiles on one tid follow each other, as ninja's jobs do.
    by_lane: dict[int, list[tuple[int, int]]] = {}
    for event in complete:
        by_lane.setdefault(event["tid"], []).append((event["ts"], event["ts"] + event["dur"]))
    for spans in by_lane.values():
        spans.sort()
        assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))
    # The memory counter rises with the compiles and is back at zero once the last one ended.
    memory = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert len(memory) == 2 * len(complete) and memory[-1]["args"]["GB"] == 0
    assert max(e["args"]["GB"] for e in memory) >= max(e["args"]["tree_peak_mb"] for e in complete) / 1024 - 0.001
