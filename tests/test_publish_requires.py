"""Wheels that install with their torch (issue 66 item 2): the wheel declares `Requires-Dist: torch==…`, and
publish's install-back proves it in a fresh venv that takes everything from the target (and `--find-links`).

Real parts: real pip, real venvs, a real pypiserver (tests.test_publish's), local PEP 503 folders, this
environment's real torch where the build environment's torch stands in. The one stand-in: a small real wheel
*named* torch, whose module says it is the stand-in, where a test needs a torch on an index or in a
wheelhouse (the real one is ~900 MB plus GBs of CUDA wheels).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from build_kernel import static_index
from build_kernel.errors import PublishError
from build_kernel.stages import publish as pub
from build_kernel.stages.builder import provenance
from tests import test_publish
from tests.conftest import DemoBuild, run_cli
from tests.test_publish import LOCAL, PASSWORD, USER, Index, clean_env, listing, make_wheel, target_for

pypi = test_publish.pypi  # the real pypiserver (htpasswd auth) of test_publish, one per module

VERSION = f"0.3.21{LOCAL}"
REAL_TORCH = importlib.metadata.version("torch")  # what pip recorded for this environment's torch: 2.14.1
LENT = "the build environment (linked in: not on the index)"


def standin_torch(folder: Path, version: str = "2.14.1") -> Path:
    """A small real wheel named torch (a stand-in, said so by its module): what an index or wheelhouse holds."""
    return make_wheel(folder, "torch", version, verified=False,
                      extra={"torch/__init__.py": f'__version__ = "{version}"\nSTANDIN = True\n'})


def kernel(folder: Path, project: str, torch: str, *, standin: bool) -> Path:
    """A verified wheel declaring `torch`; its module imports torch (and insists on the stand-in if asked)."""
    module = project.replace("-", "_")
    body = "import torch\nTORCH = torch.__file__\n" + ("assert torch.STANDIN, 'not the stand-in torch'\n" if standin else "")
    return make_wheel(folder, project, VERSION, requires=(f"torch=={torch}",), extra={f"{module}/__init__.py": body})


def static_target(tmp_path: Path) -> tuple[pub.Target, Path]:
    folder = tmp_path / "static"
    return target_for(str(folder), tmp_path, clean_env()), folder


# ---------------------------------------------------------------------------- what the build declares


def test_the_requirement_is_the_build_environments_torch_as_pip_knows_it(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    # pip's version of this torch (2.14.1), not torch.__version__ (2.14.1+cu130): see the next test.
    assert provenance.torch_requirement(sys.executable, log) == f"torch=={REAL_TORCH}"
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    assert provenance.torch_requirement(str(bare / "bin" / "python"), log) is None


def test_declare_replaces_the_packages_own_torch_requirement_and_keeps_the_body(tmp_path: Path) -> None:
    metadata = tmp_path / "METADATA"
    metadata.write_text("Metadata-Version: 2.1\nName: sgl-kernel\nVersion: 0.3.21\nRequires-Dist: torch>=2.0\n"
                        "Requires-Dist: Torch (>=1.0)\nRequires-Dist: torch==2.9.1; extra == \"old\"\n"
                        "Requires-Dist: numpy\n\nThe README.\n\nMore of it.\n")
    provenance.declare(metadata, "torch==2.14.1")
    assert metadata.read_text() == (
        "Metadata-Version: 2.1\nName: sgl-kernel\nVersion: 0.3.21\nRequires-Dist: torch==2.9.1; extra == \"old\"\n"
        "Requires-Dist: numpy\nRequires-Dist: torch==2.14.1\n\nThe README.\n\nMore of it.\n")
    bodiless = tmp_path / "METADATA2"
    bodiless.write_text("Metadata-Version: 2.1\nName: x\nVersion: 1\n")
    provenance.declare(bodiless, "torch==2.12.0.dev20260307+cu130")
    assert bodiless.read_text() == "Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: torch==2.12.0.dev20260307+cu130\n"


def _resolves(tmp_path: Path, index: Path, requirement: str) -> str | None:
    """The torch version pip picks from `index` alone for `requirement`, or None (no match)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
                           "--quiet", "--report", "-", "--disable-pip-version-check", "--index-url",
                           (index / "simple").as_uri(), requirement], check=False, env=env, capture_output=True,
                          text=True)
    return str(json.loads(proc.stdout)["install"][0]["metadata"]["version"]) if proc.returncode == 0 else None


def test_pip_matches_the_requirement_as_docs_publishing_says(tmp_path: Path) -> None:
    """Why the requirement carries no runtime label: PyPI's torch has none (2.14.1), and a specifier with one
    (==2.14.1+cu130) matches only that very label; one without matches a labelled build too."""
    labelled, plain = tmp_path / "labelled", tmp_path / "plain"
    standin_torch(labelled, "2.14.1+cu130")
    standin_torch(plain, "2.14.1")
    for index in (labelled, plain):
        static_index.regenerate(index)
    assert _resolves(tmp_path, labelled, "torch==2.14.1") == "2.14.1+cu130"
    assert _resolves(tmp_path, plain, "torch==2.14.1") == "2.14.1"
    assert _resolves(tmp_path, plain, "torch==2.14.1+cu130") is None


# ---------------------------------------------------------------------------- the install-back proves it


def test_torch_from_a_wheelhouse_named_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, folder = static_target(tmp_path)
    house = tmp_path / "house"
    torch_wheel = standin_torch(house)
    wheel = kernel(tmp_path / "w", "bk-house", "2.14.1", standin=True)
    capsys.readouterr()
    # The tool's own interpreter (with the real torch) makes the fresh venv: its torch is not visible there.
    [done] = pub.publish([wheel], target, env=clean_env(), python=sys.executable, find_links=[str(house)]).wheels
    assert done.status == "copied" and done.imports == {"bk_house": "ok"}
    assert done.dependencies == {"torch 2.14.1": torch_wheel.as_uri()}
    assert "does not hold" not in capsys.readouterr().err
    assert not (folder / torch_wheel.name).exists()  # the wheelhouse is read, never published


def test_torch_from_the_same_index_a_real_pypiserver(pypi: Index, tmp_path: Path) -> None:
    torch_wheel = standin_torch(tmp_path / "t")
    shutil.copy2(torch_wheel, pypi.packages)  # pypiserver serves what its folder holds
    env = clean_env(TWINE_USERNAME=USER, TWINE_PASSWORD=PASSWORD)
    wheel = kernel(tmp_path / "w", "bk-sameindex", "2.14.1", standin=True)
    [done] = pub.publish([wheel], target_for(pypi.url, tmp_path, env), env=env).wheels
    assert done.status == "uploaded" and done.imports == {"bk_sameindex": "ok"}
    [(what, url)] = done.dependencies.items()
    assert what == "torch 2.14.1" and url.startswith(pypi.url) and url.endswith(torch_wheel.name)


def test_without_a_torch_source_the_build_environments_torch_stands_in(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's case: a static folder of kernels only. The fresh venv gets the build environment's real
    torch linked in (nothing copied), pip sees it satisfy the requirement, and the warning says a fleet
    installing from that folder alone could not."""
    target, folder = static_target(tmp_path)
    wheel = kernel(tmp_path / "w", "bk-lent", REAL_TORCH, standin=False)
    capsys.readouterr()
    [done] = pub.publish([wheel], target, env=clean_env(), python=sys.executable).wheels
    assert done.status == "copied" and done.imports == {"bk_lent": "ok"}
    assert done.dependencies == {f"torch {REAL_TORCH}": LENT}
    err = " ".join(capsys.readouterr().err.split())
    assert (f"bk-lent {VERSION} requires torch, which {folder} does not hold: installed back with the build "
            f"environment's torch {REAL_TORCH}; a fleet installing from this index alone cannot install it") in err


def test_a_wheelhouse_without_the_torch_is_one_line_and_nothing_stays_published(tmp_path: Path) -> None:
    folder, house = tmp_path / "static", tmp_path / "empty-house"
    house.mkdir()
    wheel = kernel(tmp_path / "w", "bk-nohouse", "2.14.1", standin=True)
    env = {**clean_env(), "HOME": str(tmp_path), "BUILD_KERNEL_INDEXES": str(tmp_path / "none.toml"),
           "BUILD_KERNEL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_cli("publish", str(wheel), "--to", str(folder), "--find-links", str(house), env=env)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: bk-nohouse {VERSION} requires torch==2.14.1, which {folder.as_uri()}/simple/ or {house} does not "
        "hold: a fleet installing from there cannot install bk-nohouse (publish torch==2.14.1 (and what it requires) "
        f"to {folder} too, or pass --find-links DIR, a folder of wheels holding it (docs/publishing.md: how a fleet "
        "installs))"]
    assert wheel.name not in listing(folder)  # published, not installable: taken out again


def test_a_torch_neither_the_index_nor_the_build_environment_has(tmp_path: Path) -> None:
    target, folder = static_target(tmp_path)
    wheel = kernel(tmp_path / "w", "bk-oldtorch", "2.9.1", standin=False)
    with pytest.raises(PublishError) as info:
        pub.publish([wheel], target, env=clean_env(), python=sys.executable)
    assert info.value.message == (f"bk-oldtorch {VERSION} requires torch==2.9.1: neither {folder.as_uri()}/simple/ "
                                  f"nor the build environment (torch {REAL_TORCH}) holds it")
    assert wheel.name not in listing(folder)


# ---------------------------------------------------------------------------- a wheel cached before


def _strip_torch(wheel: Path, work: Path) -> None:
    """The wheel as a build before issue 66 made it: no Requires-Dist torch (repacked by `wheel`, as built)."""
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(work), str(wheel)], check=True,
                   capture_output=True)
    [root] = list(work.iterdir())
    metadata = next(root.glob("*.dist-info")) / "METADATA"
    metadata.write_text("".join(line for line in metadata.read_text().splitlines(keepends=True)
                                if not line.startswith("Requires-Dist: torch")))
    wheel.unlink()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(wheel.parent), str(root)], check=True,
                   capture_output=True)


def _requires(wheel: Path) -> list[str]:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        text = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [line for line in text.partition("\n\n")[0].splitlines() if line.startswith("Requires-Dist: torch")]


@pytest.mark.slow
def test_a_wheel_cached_before_gets_its_torch_declared_on_a_hit(demo_build: DemoBuild, tmp_path: Path) -> None:
    """A cache hit on a wheel built before wheels declared their torch (this machine's cache holds such
    real builds, hours each) is repacked with the declaration, not rebuilt."""
    cache = tmp_path / "cache"
    shutil.copytree(demo_build.cache, cache, symlinks=True)
    [cached] = [p for p in (cache / "wheels").glob("*/*.whl") if p.name == demo_build.wheel.name]
    _strip_torch(cached, tmp_path / "unpacked")
    assert _requires(cached) == []
    env = {"BUILD_KERNEL_CACHE_DIR": str(cache), "BUILD_KERNEL_OUTPUT_DIR": str(tmp_path / "out")}
    first = run_cli("build", "--recipe", "demo", "--arch", "12.0a", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "cache hit" in first.stderr and "Requires-Dist added" in first.stderr
    assert _requires(tmp_path / "out" / cached.name) == _requires(cached) == [f"Requires-Dist: torch=={REAL_TORCH}"]
    second = run_cli("build", "--recipe", "demo", "--arch", "12.0a", env=env)
    assert second.returncode == 0 and "Requires-Dist added" not in second.stderr, second.stderr
