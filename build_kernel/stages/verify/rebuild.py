"""`verify --rebuild WHEEL`: build the wheel again from its own provenance, in a fresh folder, and compare bytes.

As Debian and Nix check a package: the recipe, commit, patch series and archs the wheel names inside it are built
again with a new cache and output folder (a new build folder, new paths, another time), and the two wheels are
compared byte for byte. Where they differ it says which members, and for an ELF library which sections
(`.note.gnu.build-id`, `.nv_fatbin`, `.rodata`...): what to look at to find the cause.
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel.errors import VerifyError
from build_kernel.plan import Plan
from build_kernel.stages.builder import provenance

ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class Difference:
    member: str
    what: str  # "only in the wheel", "only in the rebuild", "N of M bytes differ", "archive metadata"
    sections: tuple[str, ...] = ()  # an ELF member's differing sections, `name (N bytes)`


@dataclass
class Rebuilt:
    wheel: Path
    rebuilt: Path
    folder: Path
    kept: bool  # the rebuild's folder is left for a look (asked for, or the wheels differ)
    differences: list[Difference] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {"wheel": str(self.wheel), "rebuilt": str(self.rebuilt), "folder": str(self.folder), "kept": self.kept,
                "identical": self.identical,
                "differences": [{"member": d.member, "what": d.what, "sections": list(d.sections)}
                                for d in self.differences]}


def of(wheel: Path) -> dict[str, Any]:
    """The wheel's provenance, with what a rebuild needs; a VerifyError naming what is missing."""
    found = provenance.read(wheel)
    if found is None:
        raise VerifyError(f"{wheel.name} carries no build-kernel provenance ({provenance.FILE})",
                          hint="only a wheel build-kernel built can be rebuilt from what it says about itself")
    missing = [k for k in ("recipe", "commit", "series_digest", "archs") if not found.get(k)]
    if missing:
        raise VerifyError(f"{wheel.name}'s provenance lacks {', '.join(missing)}",
                          hint="the wheel is older than the provenance a rebuild needs: build it again with this "
                               "build-kernel, then rebuild that")
    return found


def check_plan(wheel: Path, said: dict[str, Any], plan: Plan) -> None:
    """The recipe found is the one that built the wheel (same digest, same pinned commit)."""
    recipe = plan.recipe
    if said.get("recipe_digest") and said["recipe_digest"] != recipe.digest:
        raise VerifyError(f"{wheel.name} was built by recipe {said['recipe']} with digest {said['recipe_digest']}; "
                          f"{recipe.path} now has digest {recipe.digest}",
                          hint="pass the recipe file that built the wheel (--recipe PATH), e.g. from the git history")
    if recipe.source.commit != said["commit"]:
        raise VerifyError(f"{wheel.name} was built from commit {said['commit'][:12]}; recipe {recipe.name} pins "
                          f"{recipe.source.commit[:12]}",
                          hint="pass the recipe file that built the wheel (--recipe PATH)")


def rebuild(wheel: Path, plan: Plan, said: dict[str, Any], *, keep: bool, offline: bool = False) -> Rebuilt:
    """Fetch, patch and build `plan` (whose cache and output folders are the fresh folder's), then compare."""
    from build_kernel import readiness, stages
    from build_kernel.stages.builder import BuildStage
    from build_kernel.stages.fetch import FetchStage
    from build_kernel.stages.patch import PatchStage

    check_plan(wheel, said, plan)
    readiness.require(plan, offline=offline)
    ctx = stages.run(stages.Context(plan, offline=offline, force=True), [FetchStage(), PatchStage(), BuildStage()])
    assert ctx.build is not None and ctx.tree is not None
    if ctx.tree.series_digest != said["series_digest"]:
        raise VerifyError(f"{wheel.name} was built with patch series digest {said['series_digest'][:12]}; recipe "
                          f"{plan.recipe.name}'s series {said.get('patch_series', '')} now gives "
                          f"{ctx.tree.series_digest[:12]}",
                          hint="pass the recipe file that built the wheel (--recipe PATH) with its series")
    differences = compare(wheel, ctx.build.wheel)
    folder = plan.cache_dir.parent
    return Rebuilt(wheel, ctx.build.wheel, folder, keep or bool(differences), differences)


def compare(wheel: Path, other: Path) -> list[Difference]:
    """[] when the two files are the same bytes; else each member that differs (an ELF one with its sections)."""
    if wheel.read_bytes() == other.read_bytes():
        return []
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(other) as b:
        mine, theirs = {i.filename: i for i in a.infolist()}, {i.filename: i for i in b.infolist()}
        out = [Difference(n, "only in the wheel") for n in sorted(set(mine) - set(theirs))]
        out += [Difference(n, "only in the rebuild") for n in sorted(set(theirs) - set(mine))]
        for name in sorted(set(mine) & set(theirs)):
            x, y = a.read(name), b.read(name)
            if x == y:
                continue
            what = f"{bytes_differ(x, y)} of {max(len(x), len(y))} bytes differ"
            sections = elf_sections(x, y) if x.startswith(ELF_MAGIC) and y.startswith(ELF_MAGIC) else ()
            out.append(Difference(name, what, sections))
        if not out:  # every member the same: the archive around them differs (order, times, modes, compression)
            order = [i.filename for i in a.infolist()] != [i.filename for i in b.infolist()]
            times = any(mine[n].date_time != theirs[n].date_time for n in mine)
            modes = any(mine[n].external_attr != theirs[n].external_attr for n in mine)
            said = [w for w, on in (("member order", order), ("member times", times), ("member modes", modes)) if on]
            out.append(Difference("(archive)", f"the same members, other archive bytes: {', '.join(said) or 'compression'}"))
    return out


def bytes_differ(x: bytes, y: bytes) -> int:
    """Positions whose bytes differ, the longer one's tail counted whole."""
    return sum(p != q for p, q in zip(x, y, strict=False)) + abs(len(x) - len(y))


def elf_sections(x: bytes, y: bytes) -> tuple[str, ...]:
    """The sections of two builds of one library whose bytes differ, `name (N bytes differ)`."""
    import io

    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    def sections(data: bytes) -> dict[str, bytes]:
        elf = ELFFile(io.BytesIO(data))
        return {s.name: b"" if s.header.sh_type == "SHT_NOBITS" else s.data() for s in elf.iter_sections()}

    try:
        sx, sy = sections(x), sections(y)
    except ELFError:
        return ("(not readable as ELF)",)
    out = []
    for name in sorted(set(sx) | set(sy)):
        p, q = sx.get(name), sy.get(name)
        if p == q:
            continue
        if p is None or q is None:
            out.append(f"{name} (only in {'the rebuild' if p is None else 'the wheel'})")
            continue
        out.append(f"{name} ({bytes_differ(p, q)} bytes differ)")
    return tuple(out)


def clean(result: Rebuilt) -> None:
    """Remove the rebuild's folder unless it is kept (asked for, or the wheels differ: it is the evidence)."""
    if not result.kept:
        shutil.rmtree(result.folder, ignore_errors=True)
