"""Which distribution installed the package, where it came from, and whether its files are still
the ones its RECORD lists (hashed on disk: a library overwritten after install is caught)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel.stages.verify.report import record_hash


@dataclass
class Origin:
    distribution: str
    version: str
    root: str
    # "build-kernel" (our provenance inside), "url" (pip's direct_url.json: a file or VCS), "index" (PyPI or a mirror).
    source: str
    detail: str
    provenance: dict[str, Any] = field(default_factory=dict)
    requires: list[str] = field(default_factory=list)
    # Files whose bytes on disk are not their RECORD hash, and files RECORD lists that are gone.
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def label(self) -> str:
        """`<distribution> 0.3.21 (PyPI)`: what the verdict calls it."""
        short = {"index": "PyPI", "build-kernel": "built by build-kernel", "url": "a local install"}[self.source]
        return f"{self.distribution} {self.version} ({short})"

    def reinstall(self) -> str:
        """The command that puts the distribution's own files back."""
        if self.source == "url":
            return f"pip install --force-reinstall --no-deps {self.detail}"
        if self.source == "build-kernel":
            return f"pip install --force-reinstall --no-deps <the {self.distribution} {self.version} wheel you built>"
        return f"pip install --force-reinstall --no-deps {self.distribution}=={self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "label": self.label}


def _source(dist: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    provenance = json.loads(dist["provenance"]) if dist.get("provenance") else {}
    if provenance:
        name = provenance.get("recipe")
        return "build-kernel", f"recipe {name}" if name else "a build-kernel wheel", provenance
    if dist.get("direct_url"):
        url = json.loads(dist["direct_url"]).get("url", "")
        return "url", str(url), provenance
    return "index", f"an index (installed by {dist.get('installer') or 'an unknown installer'})", provenance


def of(name: str, dist: dict[str, Any], module: str) -> Origin:
    """The distribution `name` as the inventory lists it, its files checked against its RECORD."""
    source, detail, provenance = _source(dist)
    origin = Origin(name, dist["version"], dist["root"], source, detail, provenance, list(dist.get("requires", [])))
    root = Path(dist["root"])
    for rel, want in sorted(dist["files"].items()):
        if not want:  # RECORD lists itself and .pyc files without a hash
            continue
        path = root / rel
        origin.checked += 1
        if not path.is_file():
            origin.missing.append(rel)
        elif record_hash(path) != want:
            origin.changed.append(rel)
    return origin
