"""The patch pool: each patch content of a series stored once, found by its sha256.

    patches/<series>/pool/<name>                 one file per content, under its patch name
    patches/<series>/pool/<stem>@<sha8><suffix>  a second content of a name another version still uses

Versions of a series share most patches (sm120 v2, v3, v5 and v6 carry the same 0001-0004);
a pool keeps each content once, as Spack keys a patch by its sha256. A version's `series.lock`
names the content by hash, so file names in the pool are for people only; the plain name
holds the content first stored under it (the migration stored the newest version first).

This module knows files and hashes only; which version uses what is series.py's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from build_kernel import atomic

POOL = "pool"
SUFFIXES = (".patch", ".diff")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pool_of(directory: Path) -> Path | None:
    """The pool beside a version folder (`<series>/pool/`), None where the series has none (a
    series without one keeps its patches in each version folder, as before pools)."""
    pool = directory.parent / POOL
    return pool if pool.is_dir() else None


def patch_files(folder: Path) -> list[Path]:
    """The patch files directly in `folder`, sorted (so an index is the same on every machine)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES)


def index(pool: Path) -> dict[str, Path]:
    """sha256 -> the pool file with that content (the first by name where two are identical)."""
    found: dict[str, Path] = {}
    for path in patch_files(pool):
        found.setdefault(sha256_bytes(path.read_bytes()), path)
    return found


def variant_name(name: str, digest: str) -> str:
    """`0003-fa3-fallback@5155f89e.patch`: a name's second content, told apart by its hash."""
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}@{digest[:8]}.{suffix}" if dot else f"{name}@{digest[:8]}"


def add(pool: Path, name: str, data: bytes, used: set[str]) -> Path:
    """Store `data` (the content of patch `name`) once; `used`: every sha256 some version needs.

    An existing copy is returned as is. Otherwise the content takes the plain name when that is
    free or holds a content no version uses any more, else `variant_name`: a file other versions
    read is never overwritten."""
    digest = sha256_bytes(data)
    have = index(pool)
    if digest in have:
        return have[digest]
    plain = pool / name
    free = not plain.exists() or sha256_bytes(plain.read_bytes()) not in used
    target = plain if free else pool / variant_name(name, digest)
    atomic.write_bytes(target, data)
    return target


def prune(pool: Path, used: Iterable[str]) -> list[Path]:
    """Remove the pool files whose content no version uses; the removed paths."""
    keep = set(used)
    removed = []
    for path in patch_files(pool):
        if sha256_bytes(path.read_bytes()) not in keep:
            path.unlink()
            removed.append(path)
    return removed
