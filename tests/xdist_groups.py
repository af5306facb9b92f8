"""Which tests share a pytest-xdist worker (`make test` runs `pytest -n 2`, `--dist loadgroup` in pyproject.toml).

A fixture of ours wider than a test (module, class or session scope: the demo wheel, the sglang
environment, a pypiserver, a module's nvcc-compiled libraries) is made once per worker that asks for
it. So the tests that share one are one group, sent whole to one worker, in their order without xdist;
a test that shares two joins both groups into one; each such fixture is still made once per session.
A test's own `xdist_group` mark (tests that must not run beside each other: memory caps, real servers)
joins its group the same way. A test in no group runs wherever a worker is free. The groups and
tests marked `slow` (a real compile, a real environment) are handed out first, the quick tests fill in
behind them: the 2 workers end close together.

pytest-xdist's own loadgroup reads the group from a suffix it writes into each test's node id, which
pytest 9 ignores (its node ids are no longer set that way), so every test would be a group of its own.
Here each worker writes the groups it collected to a file the controller's scheduler reads instead.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
GROUPS_DIR = pytest.StashKey[Path]()
WORKERINPUT_KEY = "build_kernel_xdist_groups"
# How many quick tests a `slow` one counts for when handing out work (a real build vs a parse: ~20 s vs ~1 s).
SLOW_WEIGHT = 20


def xdist_groups(items: list[pytest.Item]) -> dict[str, str]:
    """node id: group, for every test that shares a worker with others."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys: dict[str, list[str]] = {}
    for item in items:
        own = [str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")]
        keys[item.nodeid] = own + shared_fixtures(item)
        for key in keys[item.nodeid][1:]:
            parent[find(key)] = find(keys[item.nodeid][0])
    return {nodeid: find(k[0]) for nodeid, k in keys.items() if k}


def shared_fixtures(item: pytest.Item) -> list[str]:
    """The fixtures of tests/ this test uses that outlive it, each named by the instance it gets
    (`demo_build` for the session's, `tests/test_publish.py::pypi` for a module's)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    found = []
    for name, defs in sorted(info.name2fixturedefs.items()):
        fixture = defs[-1]  # the one this test gets (the closest override)
        if fixture.scope == "function" or not Path(fixture.func.__code__.co_filename).is_relative_to(TESTS):
            continue
        owner = {"session": "", "package": "", "module": item.nodeid.split("::")[0],
                 "class": item.nodeid.rsplit("::", 1)[0]}[fixture.scope]
        found.append(f"{owner}::{name}" if owner else name)
    return found


# ---- worker side: write the groups where the controller reads them ---------------------------------------

@pytest.hookimpl(tryfirst=True)  # before pytest-xdist tells the controller the collection is done
def pytest_collection_finish(session: pytest.Session) -> None:
    folder = getattr(session.config, "workerinput", {}).get(WORKERINPUT_KEY)
    if folder:
        worker = session.config.workerinput["workerid"]  # type: ignore[attr-defined]
        partial = Path(folder) / f".{worker}.json.partial"
        weights = {item.nodeid: SLOW_WEIGHT for item in session.items if item.get_closest_marker("slow")}
        partial.write_text(json.dumps({"groups": xdist_groups(session.items), "weights": weights}))
        partial.rename(Path(folder) / f"{worker}.json")


# ---- controller side ----------------------------------------------------------------------------------

@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    config = node.config
    if GROUPS_DIR not in config.stash:
        config.stash[GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="build-kernel-xdist-groups-"))
    node.workerinput[WORKERINPUT_KEY] = str(config.stash[GROUPS_DIR])


def pytest_unconfigure(config: pytest.Config) -> None:
    if GROUPS_DIR in config.stash:
        shutil.rmtree(config.stash[GROUPS_DIR], ignore_errors=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """loadscope, with the scope of a test its group (else the test itself), the heaviest handed out first."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self.groups: dict[str, str] | None = None
            self.weights: dict[str, int] = {}
            self.ordered = False

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first asked once every worker has collected: their files are written
                written = sorted(config.stash[GROUPS_DIR].glob("*.json"))
                if not written:
                    raise pytest.UsageError(f"no worker wrote its xdist groups into {config.stash[GROUPS_DIR]}")
                self.groups, self.weights = {}, {}
                for path in written:
                    found = json.loads(path.read_text())
                    self.groups.update(found["groups"])
                    self.weights.update(found["weights"])
            return self.groups.get(nodeid, nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the queue is complete when the first unit is handed out
                self.ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: -sum(self.weights.get(n, 1) for n in unit[1]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return GroupScheduling(config, log)
