"""A build whose key is new names what changed since the last build of the same recipe and archs (the
earlier folder stays in the cache), from the inputs each build folder keeps (key.json)."""

from __future__ import annotations

import os
from pathlib import Path

from build_kernel.stages.builder import key_history

INPUTS = {"recipe": "a" * 64, "series": "s1", "archs": "9.0a;12.0a", "defines": {"SGL_KERNEL_UNITY": "ON"},
          "tools": {"torch_version": "2.14.1+cu130", "nvcc_version": "13.0"}}


def _earlier(builds: Path, key: str, recipe: str, archs: str, inputs: dict[str, object], mtime: float) -> None:
    key_history.record(builds / key, recipe, archs, inputs)
    os.utime(builds / key / key_history.KEY_FILE, (mtime, mtime))


def test_a_new_key_names_the_inputs_that_changed_since_the_newest_build_of_the_same_recipe(tmp_path: Path) -> None:
    builds = tmp_path / "build"
    _earlier(builds, "old1", "nightly-cu130", "9.0a;12.0a", {**INPUTS, "series": "s0"}, 1000)
    _earlier(builds, "old2", "nightly-cu130", "9.0a;12.0a", INPUTS, 2000)
    _earlier(builds, "other-arch", "nightly-cu130", "12.0a", {**INPUTS, "series": "zz"}, 3000)
    _earlier(builds, "other-recipe", "demo", "9.0a;12.0a", {**INPUTS, "series": "zz"}, 3000)
    new = {**INPUTS, "recipe": "b" * 64, "tools": {**INPUTS["tools"], "torch_version": "2.11.0+cu130"}}
    line = key_history.changed_since(builds, builds / "new", "nightly-cu130", "9.0a;12.0a", new)
    assert line is not None and "folder old2, kept" in line
    assert "the recipe's build inputs, the toolchain" in line
    assert "recipe aaaaaaaaaaaa -> bbbbbbbbbbbb" in line and "tools.torch_version 2.14.1+cu130 -> 2.11.0+cu130" in line


def test_nothing_is_said_for_a_first_build_a_resumed_one_or_equal_inputs(tmp_path: Path) -> None:
    builds = tmp_path / "build"
    assert key_history.changed_since(builds, builds / "k", "r", "9.0a", INPUTS) is None  # nothing built before
    _earlier(builds, "k0", "r", "9.0a", INPUTS, 1000)
    assert key_history.changed_since(builds, builds / "k", "r", "9.0a", INPUTS) is None  # the same inputs
    (builds / "k" / "cmake").mkdir(parents=True)  # a folder that was built in: a resumed build
    assert key_history.changed_since(builds, builds / "k", "r", "9.0a", {**INPUTS, "series": "s2"}) is None
    key_history.record(builds / "k3", "r", "9.0a", {**INPUTS, "series": "s3"})  # any backend: its record says so
    assert key_history.changed_since(builds, builds / "k3", "r", "9.0a", {**INPUTS, "series": "s3"}) is None
    (builds / "bad").mkdir()
    (builds / "bad" / key_history.KEY_FILE).write_text("{not json")  # an unreadable record is passed over
    assert "the patch series" in (key_history.changed_since(builds, builds / "k2", "r", "9.0a",
                                                            {**INPUTS, "series": "s2"}) or "")


def test_the_record_is_written_once(tmp_path: Path) -> None:
    key_history.record(tmp_path / "k", "r", "9.0a", INPUTS)
    key_history.record(tmp_path / "k", "r", "9.0a", {**INPUTS, "series": "changed"})
    assert '"s1"' in (tmp_path / "k" / key_history.KEY_FILE).read_text()
