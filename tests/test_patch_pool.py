"""One pool of patches per series: each content stored once, a version's lock names it by sha256.

The repository's own patches/ first (no two identical files; every version yields exactly the names,
bytes and digest recorded before the pool, tests/data/series_before_pool.json), then the loader and
`patch lock` on small pooled series in a test project.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from build_kernel import patchpool
from build_kernel.errors import PatchError
from build_kernel.series import LOCK, load_series, read_lock, write_lock
from tests.conftest import REPO_ROOT, write_series

PATCHES = REPO_ROOT / "patches"
BEFORE = json.loads((Path(__file__).parent / "data" / "series_before_pool.json").read_text())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_patches_folder_holds_no_two_identical_patch_files() -> None:
    by_content: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PATCHES.rglob("*")):
        if path.suffix in patchpool.SUFFIXES:
            by_content[_sha(path)].append(str(path.relative_to(PATCHES)))
    assert {h[:12]: paths for h, paths in by_content.items() if len(paths) > 1} == {}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_version_yields_the_names_bytes_and_digest_recorded_before_the_pool(name: str) -> None:
    series = load_series(PATCHES / name)
    assert [[p.name, p.sha256] for p in series.patches] == BEFORE[name]["patches"]
    assert [_sha(p.path) for p in series.patches] == [h for _n, h in BEFORE[name]["patches"]]  # the bytes read
    assert series.digest == BEFORE[name]["digest"]  # so every tree key, wheel label and build cache key stands


def test_every_series_keeps_its_patches_in_its_pool_only() -> None:
    versions = sorted(str(p.parent.relative_to(PATCHES)) for p in PATCHES.glob("*/*/series"))
    assert set(BEFORE) <= set(versions)  # no version lost by the migration (later ones, e.g. sm120/v7, added)
    for series in sorted({v.split("/")[0] for v in versions}):
        pool = PATCHES / series / patchpool.POOL
        assert pool.is_dir(), f"{series} has no pool"
        used = {h for v in versions if v.startswith(f"{series}/") for h in read_lock(PATCHES / v).values()}
        assert set(patchpool.index(pool)) == used  # nothing missing, nothing no version uses
        for version in sorted(PATCHES.joinpath(series).glob("*/series")):
            assert patchpool.patch_files(version.parent) == []


# A pooled series in a test project: v1 and v2 share 0001, differ in 0002.
P1 = """\
    Description: one
    ---
    --- a/f.txt
    +++ b/f.txt
    @@ -1 +1 @@
    -a
    +b
"""
P2 = P1.replace("one", "two")
P2_NEW = P1.replace("one", "two, refreshed")


def _pooled(project: Path) -> tuple[Path, Path, Path]:
    """patches/s/{v1,v2} with their patches moved into patches/s/pool by `patch lock`."""
    v1 = write_series(project, "s", "v1", {"0001-a.patch": P1, "0002-b.patch": P2})
    v2 = write_series(project, "s", "v2", {"0001-a.patch": P1, "0002-b.patch": P1.replace("one", "b in v2")})
    pool = project / "patches" / "s" / patchpool.POOL
    pool.mkdir()
    write_lock(v1)
    write_lock(v2)
    return v1, v2, pool


def test_lock_moves_a_versions_patches_into_the_pool_each_content_once(project: Path) -> None:
    v1, v2, pool = _pooled(project)
    flat = load_series(write_series(project, "flat", "v1", {"0001-a.patch": P1, "0002-b.patch": P2}))
    names = [p.name for p in patchpool.patch_files(pool)]
    assert names[:2] == ["0001-a.patch", "0002-b.patch"] and len(names) == 3
    assert patchpool.patch_files(v1) == [] and patchpool.patch_files(v2) == []
    one, two = load_series(v1), load_series(v2)
    assert one.digest == flat.digest and [p.path.parent for p in one.patches] == [pool, pool]
    assert two.patches[0].path == one.patches[0].path  # the shared patch is one file
    assert two.patches[1].path == pool / f"0002-b@{two.patches[1].sha256[:8]}.patch"  # v1 has the plain name


def test_a_changed_pool_file_is_refused_naming_the_patch_the_version_and_the_fix(project: Path) -> None:
    v1, _v2, pool = _pooled(project)
    locked = read_lock(v1)["0001-a.patch"]
    (pool / "0001-a.patch").write_text(textwrap.dedent(P1).replace("+b", "+c"))
    with pytest.raises(PatchError) as info:
        load_series(v1)
    text = info.value.render()
    assert "\n" not in text
    assert text.startswith(f"s/v1: 0001-a.patch (sha256 {locked[:12]} in its series.lock) is not in {pool}: ")
    assert f"is not in {pool}: {pool}/0001-a.patch holds sha256 {_sha(pool / '0001-a.patch')[:12]} (edited in place?)" in text
    assert f"copy it into {v1}/, edit it there and run `build-kernel patch lock {v1}`" in text


def test_an_edited_copy_in_the_version_folder_is_refused_until_locked_then_pooled(project: Path) -> None:
    v1, v2, pool = _pooled(project)
    shared = pool / "0001-a.patch"
    before = shared.read_bytes()
    (v2 / "0001-a.patch").write_text(textwrap.dedent(P1).replace("+b", "+c"))
    with pytest.raises(PatchError, match=r"v2/0001-a.patch: sha256 \w+ does not match series.lock"):
        load_series(v2)
    write_lock(v2)
    assert shared.read_bytes() == before and load_series(v1).patches[0].path == shared  # v1 keeps its content
    new = load_series(v2).patches[0]
    assert new.path.parent == pool and new.path.name == f"0001-a@{new.sha256[:8]}.patch"
    assert patchpool.patch_files(v2) == []


def test_a_content_no_version_uses_any_more_is_replaced_in_place_and_pruned(project: Path) -> None:
    v1, v2, pool = _pooled(project)
    only_v2 = load_series(v2).patches[1].path
    (v2 / "0002-b.patch").write_text(textwrap.dedent(P2_NEW))
    write_lock(v2)
    assert not only_v2.exists()  # no version locks it now
    assert load_series(v2).patches[1].path.read_text() == textwrap.dedent(P2_NEW)
    assert len(patchpool.patch_files(pool)) == 3 and load_series(v1).digest


def test_lock_refuses_to_lose_a_content_another_version_needs(project: Path) -> None:
    _v1, v2, pool = _pooled(project)
    (pool / "0001-a.patch").write_text(textwrap.dedent(P1).replace("+b", "+c"))  # shared, edited in place
    locked = (v2 / LOCK).read_text()
    with pytest.raises(PatchError) as info:
        write_lock(v2)
    text = info.value.render()
    assert text.startswith("s/v1 needs 0001-a.patch with sha256 ") and "locking s/v2 would lose it" in text
    assert f"restore the pool (`git checkout -- {pool}`)" in text
    assert (v2 / LOCK).read_text() == locked


def test_a_new_patch_put_straight_into_the_pool_needs_a_lock(project: Path) -> None:
    v1, _v2, pool = _pooled(project)
    (pool / "0003-c.patch").write_text(textwrap.dedent(P1).replace("one", "three"))
    (v1 / "series").write_text("0001-a.patch\n0002-b.patch\n0003-c.patch\n")
    with pytest.raises(PatchError, match=rf"{pool}/0003-c.patch: not in {v1}/series.lock"):
        load_series(v1)
    write_lock(v1)
    assert [p.name for p in load_series(v1).patches] == ["0001-a.patch", "0002-b.patch", "0003-c.patch"]


def test_a_version_without_a_pool_keeps_its_own_files(project: Path) -> None:
    v1 = write_series(project, "flat", "v1", {"0001-a.patch": P1})
    assert load_series(v1).patches[0].path == v1 / "0001-a.patch"
    assert not (project / "patches" / "flat" / patchpool.POOL).exists()
