"""The wheel cache: one folder per key of every input that changes the wheel.

An entry is the wheel plus its provenance JSON, filled as a partial folder and renamed
into place. A hit is copied into the output folder, whose PEP 503 index is refreshed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from build_kernel import atomic, static_index, toolchain
from build_kernel.plan import Plan
from build_kernel.stages.builder import cudawheels
from build_kernel.stages.fetch.workspace import Tree

PROVENANCE_FILE = "provenance.json"


@dataclass
class BuildResult:
    wheel: Path
    version: str
    cached: bool
    key: str
    log: Path
    jobs: list[int] = field(default_factory=list)
    oom_kills: int = 0
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda_home(self) -> str | None:
        home = self.provenance.get("toolchain", {}).get("cuda_home")
        return str(home) if home else None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["wheel"], data["log"] = str(self.wheel), str(self.log)
        return data


def key(plan: Plan, facts: toolchain.Facts, tree: Tree, defines: dict[str, str],
        toolkit: cudawheels.Toolkit | None = None) -> str:
    """Every input that changes the wheel; the same key returns the cached wheel."""
    return digest(inputs(plan, facts, tree, defines, toolkit))


def digest(key_inputs: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key_inputs, sort_keys=True).encode()).hexdigest()[:20]


def inputs(plan: Plan, facts: toolchain.Facts, tree: Tree, defines: dict[str, str],
           toolkit: cudawheels.Toolkit | None = None) -> dict[str, Any]:
    """What the key hashes: kept beside each build (key_history) to say what changed when a key is new."""
    return {
        "recipe": plan.recipe.build_digest, "commit": tree.commit, "series": tree.series_digest,
        "archs": plan.arch_list, "defines": {k: v for k, v in defines.items() if "FETCHCONTENT_SOURCE_DIR" not in k},
        "deps": {n: git.Repo(p).head.commit.hexsha if (p / ".git").exists() else str(p) for n, p in tree.dep_dirs.items()},
        "tools": {k: getattr(facts, k) for k in ("nvcc_version", "torch_version", "torch_cuda", "cmake_version",
                                                  "ninja_version", "gcc_version", "python_version")},
        "env": plan.recipe.build.env,
        "toolkit": dict(toolkit.packages) if toolkit else None,
        # A nightly's date is in its version: another night's wheel of the same inputs is another wheel.
        **({"version_dev": plan.version_dev} if plan.version_dev else {}),
    }


def entry(plan: Plan, cache_key: str) -> Path:
    return plan.cache_dir / "wheels" / cache_key


def work_dir(plan: Plan, cache_key: str) -> Path:
    """The build folder of a key: sources, CMake's tree, its record (key_history)."""
    return plan.cache_dir / "build" / cache_key


def lookup(plan: Plan, cache_key: str, log_path: Path) -> BuildResult | None:
    """The cached build for this key, delivered to the output folder; None on a miss."""
    folder = entry(plan, cache_key)
    if not (folder / PROVENANCE_FILE).is_file():
        return None
    wheels = list(folder.glob("*.whl"))
    if len(wheels) != 1:
        return None
    provenance = json.loads((folder / PROVENANCE_FILE).read_text())
    out = deliver(plan, wheels[0])
    return BuildResult(out, str(provenance["version"]), True, cache_key, log_path, list(provenance["jobs"]),
                       int(provenance["oom_kills"]), provenance)


def store(plan: Plan, cache_key: str, wheel: Path, provenance: dict[str, Any]) -> Path:
    """Put a finished wheel and its provenance in the cache (all or nothing); the cached wheel."""
    final = entry(plan, cache_key)
    with atomic.folder(final, replace=True) as tmp:
        atomic.copy_file(wheel, tmp / wheel.name)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2, sort_keys=True))
    return final / wheel.name


def deliver(plan: Plan, wheel: Path) -> Path:
    """Copy into the output folder and refresh its PEP 503 index."""
    out = plan.output_dir / wheel.name
    atomic.copy_file(wheel, out)
    static_index.regenerate(plan.output_dir)
    return out
