"""Patch series on disk: quilt `series` order, DEP-3 headers, and a sha256 lock.

    patches/<series>/<version>/series        patch names in order (quilt format)
    patches/<series>/<version>/series.lock   `sha256  name` per patch (sha256sum -c format): the
                                             version's manifest, each patch named by its content
    patches/<series>/<version>/info.toml     what upstream commits/versions it applies to, and
                                             `cxx_standard`: the C++ standard the patched tree
                                             compiles with (17, 20, ...; "torch": chosen from the
                                             torch found, as its headers require)
    patches/<series>/pool/                   each patch content of the series once (patchpool.py)

A patch is identified by its sha256 (after spack's Patch): an edited patch without a
relocked series, or a patch file not listed in `series`, is refused. Its bytes are read
from the version folder when a file of that name is there (a series without a pool, or a
patch being edited), else from the pool by the hash in the lock; `write_lock` moves such
files into the pool.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import atomic, patchpool
from build_kernel.errors import PatchError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCK = "series.lock"
DEP3_KEYS = ("Description", "Origin", "Forwarded", "Last-Update")
CXX_FROM_TORCH = "torch"  # info.toml `cxx_standard = "torch"`: the tree takes the standard torch requires


@dataclass(frozen=True)
class PatchFile:
    name: str
    path: Path
    sha256: str
    headers: dict[str, str]

    @property
    def description(self) -> str:
        return self.headers.get("Description", self.headers.get("Subject", "")).split("\n")[0]


@dataclass(frozen=True)
class Series:
    directory: Path
    patches: tuple[PatchFile, ...]
    applies_to_commits: tuple[str, ...] = ()
    applies_to_versions: str = ""
    info: dict[str, object] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """`<series>/<version>`, as a recipe's [patches] names it."""
        return f"{self.directory.parent.name}/{self.directory.name}"

    @property
    def cxx_standard(self) -> int | str | None:
        """The C++ standard the patched tree compiles with (info.toml `cxx_standard`):
        a number, CXX_FROM_TORCH, or None when the series does not say."""
        return cxx_standard_of(self.info, self.directory / "info.toml")

    @property
    def digest(self) -> str:
        """One sha256 over the ordered patch hashes: the series' identity."""
        h = hashlib.sha256()
        for p in self.patches:
            h.update(f"{p.name}\0{p.sha256}\n".encode())
        return h.hexdigest()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parse_headers(text: str) -> dict[str, str]:
    """DEP-3 fields before the diff starts (continuation lines start with a space)."""
    headers: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line.startswith(("---", "diff ", "Index: ")):
            break
        m = re.match(r"^([A-Za-z][\w-]*):\s?(.*)$", line)
        if m:
            last = m.group(1)
            headers[last] = m.group(2).strip()
        elif last and line.startswith(" ") and line.strip():
            headers[last] += "\n" + line.strip()
    return headers


def read_names(directory: Path) -> list[str]:
    series_file = directory / "series"
    if not series_file.is_file():
        raise PatchError(f"no series file in {directory}", hint="create it: one patch file name per line, in order")
    names = []
    for line in series_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            # quilt allows `name -p1`; we always apply with -p1.
            names.append(line.split()[0])
    return names


def patch_stem(name: str) -> str:
    """A patch's name without its suffix (`0009-x.patch` -> `0009-x`): how pools, series and recipes name it alike."""
    for suffix in patchpool.SUFFIXES:
        name = name.removesuffix(suffix)
    return name


def pool_names(directory: Path) -> set[str]:
    """The patch names (no suffix, no `@sha8`) of the pool beside a version folder, and of every sibling
    version's series: the patches this series has, whichever versions apply them."""
    pool = patchpool.pool_of(directory)
    names = {p.stem.split("@", 1)[0] for p in patchpool.patch_files(pool)} if pool else set()
    for sibling in directory.parent.iterdir():
        if (sibling / "series").is_file():
            names |= {patch_stem(n) for n in read_names(sibling)}
    return names


def read_lock(directory: Path, *, required: bool = True) -> dict[str, str]:
    """name -> sha256 from the version's lock ({} when there is none and it is not `required`)."""
    lock = directory / LOCK
    if not lock.is_file():
        if not required:
            return {}
        raise PatchError(f"{lock} is missing", hint=f"run `build-kernel patch lock {directory}` after reviewing the patches")
    entries = {}
    for line in lock.read_text().splitlines():
        if line.strip():
            digest, name = line.split(None, 1)
            entries[name.strip().lstrip("*")] = digest
    return entries


def cxx_standard_of(info: dict[str, object], where: Path) -> int | str | None:
    value = info.get("cxx_standard")
    if value is None or value == CXX_FROM_TORCH or (isinstance(value, int) and not isinstance(value, bool) and value >= 11):
        return value
    raise PatchError(f"{where}: cxx_standard = {value!r} is not a C++ standard",
                     hint=f'write a number (cxx_standard = 17) or "{CXX_FROM_TORCH}" (the patches choose it from torch)')


def read_info(directory: Path) -> dict[str, Any]:
    """info.toml of a series folder ({} without one)."""
    info_path = directory / "info.toml"
    return tomllib.loads(info_path.read_text()) if info_path.is_file() else {}


def _version(directory: Path) -> str:
    return f"{directory.parent.name}/{directory.name}"


def _not_in_pool(directory: Path, name: str, want: str, pool: Path) -> PatchError:
    plain = pool / name
    found = (f"{plain} holds sha256 {sha256_of(plain)[:12]} (edited in place?)" if plain.is_file()
             else "no file there has it")
    return PatchError(
        f"{_version(directory)}: {name} (sha256 {want[:12]} in its {LOCK}) is not in {pool}: {found}",
        hint=f"restore the pool (`git checkout -- {pool}`); to change a patch, copy it into {directory}/, "
             f"edit it there and run `build-kernel patch lock {directory}`",
    )


def _locate(directory: Path, name: str, lock: dict[str, str], pool: Path | None, pooled: dict[str, Path],
            *, strict: bool) -> Path:
    """Where patch `name`'s bytes are: the version folder's own file first (a series without a pool, or a
    patch being edited), else the pool file with the lock's sha256. Unlocked (`strict` off, as
    `write_lock` reads), a pool file of that very name stands in for a hash the pool lacks."""
    own = directory / name
    if own.is_file():
        return own
    missing = PatchError(f"{directory}/series lists {name}, but the file is missing"
                         + (f" (not in {directory} nor in {pool})" if pool else ""),
                         hint="restore it or remove the line")
    if pool is None:
        raise missing
    want = lock.get(name)
    if want is not None and want in pooled:
        return pooled[want]
    plain = pool / name
    if plain.is_file() and (not strict or want is None):
        if strict:  # a new patch put straight into the pool, never locked
            raise PatchError(f"{plain}: not in {directory}/{LOCK}",
                             hint=f"run `build-kernel patch lock {directory}` after reviewing it")
        return plain
    if want is None:
        raise missing
    raise _not_in_pool(directory, name, want, pool)


def load_series(directory: Path, *, check_lock: bool = True) -> Series:
    """Read and check a series: every patch listed, present, and matching its lock."""
    directory = directory.resolve()
    names = read_names(directory)
    # Unchecked, the lock still says which pool content a name means.
    lock = read_lock(directory, required=check_lock)
    on_disk = {p.name for p in patchpool.patch_files(directory)}
    unlisted = sorted(on_disk - set(names))
    if unlisted:
        raise PatchError(
            f"{directory}: {', '.join(unlisted)} not listed in series",
            hint="add it to the series file (and relock) or delete it",
        )
    pool = patchpool.pool_of(directory)
    pooled = patchpool.index(pool) if pool else {}
    patches = []
    for name in names:
        path = _locate(directory, name, lock, pool, pooled, strict=check_lock)
        digest = sha256_of(path)
        if check_lock:
            if name not in lock:
                raise PatchError(f"{path}: not in {LOCK}", hint=f"run `build-kernel patch lock {directory}` after reviewing it")
            if lock[name] != digest:
                raise PatchError(
                    f"{path}: sha256 {digest[:12]} does not match {LOCK} ({lock[name][:12]}): the patch was changed",
                    hint=f"if the change is intended, review it and run `build-kernel patch lock {directory}`",
                )
        patches.append(PatchFile(name, path, digest, parse_headers(path.read_text(errors="replace"))))
    info = read_info(directory)
    cxx_standard_of(info, directory / "info.toml")  # a bad value is refused with the series, not mid-build
    return Series(
        directory,
        tuple(patches),
        tuple(info.get("applies_to_commits", ())),
        str(info.get("applies_to_versions", "")),
        info,
    )


def _siblings(directory: Path) -> list[tuple[str, str, str, bool]]:
    """(version, name, sha256, from the pool) for every patch the series' other versions lock; not from the
    pool where that version has its own file of the name."""
    return [(_version(folder), name, digest, not (folder / name).is_file())
            for folder in sorted(directory.parent.iterdir()) if folder != directory and (folder / LOCK).is_file()
            for name, digest in read_lock(folder).items()]


def write_lock(directory: Path) -> Path:
    """Record the sha256 of every listed patch (after a human reviewed them).

    With a pool, the version folder's own patch files then move into it (a content already
    there is not stored twice), and pool files that no version uses any more are removed. A
    pool file another version still needs is never overwritten: locking is refused when one is
    already lost (a shared patch edited in place), before anything is written."""
    directory = directory.resolve()
    series = load_series(directory, check_lock=False)
    lock = directory / LOCK
    text = "".join(f"{p.sha256}  {p.name}\n" for p in series.patches)
    pool = patchpool.pool_of(directory)
    if pool is None:
        atomic.write_text(lock, text)
        return lock
    mine = {p.sha256 for p in series.patches}
    others = _siblings(directory)
    have = set(patchpool.index(pool)) | mine
    for version, name, digest, pooled in others:
        if pooled and digest not in have:
            raise PatchError(
                f"{version} needs {name} with sha256 {digest[:12]}, which no file in {pool} has any more: "
                f"locking {_version(directory)} would lose it",
                hint=f"restore the pool (`git checkout -- {pool}`), copy the patch into {directory}/, "
                     f"edit it there and run `build-kernel patch lock {directory}` again",
            )
    used = mine | {sibling[2] for sibling in others}
    own = [p for p in series.patches if p.path.parent == directory]
    for p in own:
        patchpool.add(pool, p.name, p.path.read_bytes(), used)
    atomic.write_text(lock, text)  # the pool has every content the lock names before it names them
    for p in own:
        p.path.unlink()
    patchpool.prune(pool, used)
    return lock
