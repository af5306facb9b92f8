"""What a wheel says about itself: a PEP 440 local label in its version, a provenance JSON inside it that
identifies its inputs (recipe, commit, series + digests, toolchain versions, archs, its torch), and beside it
(`WHEEL.build.json`) what the run saw (times, CPU seconds, memory, folders, host): two builds of the same inputs
give the same wheel bytes (reproducible.py)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
import shutil
import sys
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from build_kernel import process, toolchain
from build_kernel.compile_cache import Stats
from build_kernel.errors import BuildError
from build_kernel.plan import Plan
from build_kernel.stages.fetch.workspace import Tree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE = "build_kernel_provenance.json"


def local_label(plan: Plan, facts: toolchain.Facts, tree: Tree) -> str:
    """PEP 440 local label: CUDA, torch, archs, commit, patch-series digest."""
    cuda = (facts.torch_cuda or plan.recipe.toolchain.cuda or "0").replace(".", "")
    torch_mm = ".".join((facts.torch_version or "0.0").split("+")[0].split(".")[:2])
    archs = ".".join(a.sm.replace("_", "") for a in plan.archs)
    return f"cu{cuda}.torch{torch_mm}.{archs}.g{tree.commit[:7]}.p{tree.series_digest[:6]}"


def read_version(pyproject: Path) -> str:
    data = tomllib.loads(pyproject.read_text())
    version = data.get("project", {}).get("version")
    if not version:
        raise BuildError(f"{pyproject} has no static [project] version",
                         hint="the recipe needs a project with a static version to stamp")
    return str(version)


def stamp_version(pyproject: Path, version: str) -> None:
    """Rewrite [project] version in place so METADATA, file name and pip agree."""
    text = pyproject.read_text()
    section = re.search(r"(?ms)^\[project\]\s*$(.*?)(?=^\[|\Z)", text)
    if not section:
        raise BuildError(f"{pyproject}: no [project] table to stamp",
                         hint="write [project] as a table with its own `version = \"...\"` line")
    body = re.sub(r'(?m)^(version\s*=\s*)["\'][^"\']*["\']', lambda m: f'{m.group(1)}"{version}"', section.group(1),
                  count=1)
    pyproject.write_text(text[: section.start(1)] + body + text[section.end(1):])


def toolchain_record(facts: toolchain.Facts, source: str, why: str, packages: Iterable[tuple[str, str]] | None
                     ) -> dict[str, Any]:
    return {"nvcc": facts.nvcc, "cuda_home": facts.cuda_home, "nvcc_version": facts.nvcc_version,
            "torch": facts.torch_version, "torch_cuda": facts.torch_cuda, "cmake": facts.cmake_version,
            "ninja": facts.ninja_version, "gcc": facts.gcc_version, "python": facts.python_version,
            "cuda_source": source, "cuda_source_why": why, "cuda_packages": dict(packages) if packages else None}


def compile_cache_record(tool: str, stats: Stats | None) -> dict[str, Any]:
    """The compile cache's part of the record: which tool, and its hits and misses in this build."""
    return {"tool": tool, **(stats.to_dict() if stats else {})}


# What varies from one build of the same inputs to the next: kept beside the wheel (`WHEEL.build.json`) and in the
# cache's record, never in the wheel, so that two builds of the same recipe, commit, series and archs give the same
# bytes. `defines` and `key` hold the build's own folders (launchers, the driver stub, a toolkit from wheels).
RUN_KEYS = ("defines", "jobs", "oom_kills", "job_derivation", "scheduler", "key", "host_compiler", "compile_cache",
            "start", "end", "seconds", "cpu_seconds", "host", "folders")
TOOLCHAIN_RUN_KEYS = ("nvcc", "cuda_home", "cuda_source_why")  # paths, and a sentence naming them
BESIDE_SUFFIX = ".build.json"


def split(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(what identifies the inputs: inside the wheel, what this run saw: beside it)."""
    inside = {k: v for k, v in record.items() if k not in RUN_KEYS}
    run = {k: v for k, v in record.items() if k in RUN_KEYS}
    chain = dict(record.get("toolchain") or {})
    if chain:
        inside["toolchain"] = {k: v for k, v in chain.items() if k not in TOOLCHAIN_RUN_KEYS}
        run["toolchain"] = {k: v for k, v in chain.items() if k in TOOLCHAIN_RUN_KEYS}
    return inside, run


def merged(inside: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The whole record again (the cache keeps it so; `split` undone)."""
    out = {**inside, **{k: v for k, v in run.items() if k != "toolchain"}}
    if "toolchain" in inside or "toolchain" in run:
        out["toolchain"] = {**(inside.get("toolchain") or {}), **(run.get("toolchain") or {})}
    return out


def beside(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + BESIDE_SUFFIX)


def write_beside(wheel: Path, record: dict[str, Any]) -> Path:
    """`WHEEL.build.json`: this run's part of `record` (times, CPU, memory, folders, host), and the wheel's sha256."""
    from build_kernel import atomic
    from build_kernel.stages.verify.report import sha256_of

    _, run = split(record)
    path = beside(wheel)
    atomic.write_text(path, json.dumps({"wheel": wheel.name, "sha256": sha256_of(wheel), **run}, indent=2,
                                       sort_keys=True))
    return path


def read(wheel: Path) -> dict[str, Any] | None:
    """The wheel's provenance with the run record beside it merged in, when there is one (None: not ours)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(f".dist-info/{FILE}")), None)
            inside = json.loads(zf.read(name)) if name else None
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError):
        return None
    if not isinstance(inside, dict):
        return None
    try:
        run = json.loads(beside(wheel).read_text())
    except (OSError, json.JSONDecodeError):
        return inside
    return merged(inside, run) if isinstance(run, dict) and run.get("wheel") == wheel.name else inside


def inject(wheel: Path, python: str, provenance: dict[str, Any], workdir: Path, log_path: Path, *,
           epoch: int) -> Path:
    """Add the provenance JSON (its input part: `split`) inside the wheel, and to its METADATA the torch it was built
    against. After the build, so every backend's wheel gets it the same way, and repacked reproducibly (`_repack`)."""
    requirement = torch_requirement(python, log_path)
    inside, _ = split(provenance)

    def edit(dist_info: Path) -> None:
        (dist_info / FILE).write_text(json.dumps(inside, indent=2, sort_keys=True))
        if requirement:
            declare(dist_info / "METADATA", requirement)

    return _repack(wheel, workdir, edit, epoch=epoch)


def redeclared(wheel: Path, python: str, workdir: Path, log_path: Path, *, epoch: int) -> Path | None:
    """A cached wheel from before wheels declared their torch, repacked with the declaration (seconds; its
    objects are not rebuilt); None when it declares one already, or the build environment has no torch."""
    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None)
        metadata = zf.read(name).decode("utf-8", "replace") if name else ""
    head = metadata.partition("\n\n")[0].splitlines()
    if any((m := _REQUIRES.match(line)) and canonicalize_name(m.group(1)) == "torch" for line in head):
        return None
    if not (requirement := torch_requirement(python, log_path)):
        return None
    return _repack(wheel, workdir, lambda dist_info: declare(dist_info / "METADATA", requirement), epoch=epoch)


ZIP_EPOCH_MIN = 315532800  # 1980-01-01: the earliest time a zip member can carry


def _repack(wheel: Path, workdir: Path, edit: Callable[[Path], None], *, epoch: int) -> Path:
    """The wheel with its dist-info folder edited by `edit`, written reproducibly: members sorted (the package's
    files, then dist-info's, RECORD last, as `wheel pack` orders them), every member dated `epoch`, modes 0644
    or 0755 only, RECORD written again. Whatever times, order or umask the backend's zip had, the same
    member bytes give the same wheel bytes."""
    unpacked, out = workdir / "unpacked", workdir / "packed"
    for folder in (unpacked, out):
        shutil.rmtree(folder, ignore_errors=True)
    out.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        dist_info = next((i.filename.split("/")[0] for i in infos
                          if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")), None)
        if dist_info is None:
            raise BuildError(f"{wheel.name} has no .dist-info/METADATA",
                             hint="the build backend wrote a broken wheel: see the build log")
        executable = {i.filename for i in infos if (i.external_attr >> 16) & 0o111}
        zf.extractall(unpacked, members=[i for i in infos if i.filename.startswith(dist_info + "/")])
        edit(unpacked / dist_info)
        record_name = f"{dist_info}/RECORD"
        edited = sorted(p.relative_to(unpacked).as_posix() for p in (unpacked / dist_info).rglob("*")
                        if p.is_file() and p.relative_to(unpacked).as_posix() != record_name)
        package = sorted(i.filename for i in infos if not i.filename.startswith(dist_info + "/"))
        packed = out / wheel.name
        date = time.gmtime(max(epoch, ZIP_EPOCH_MIN))[:6]
        rows: list[list[str]] = []
        with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as new:
            for name in [*package, *edited]:
                data = zf.read(name) if name in package else (unpacked / name).read_bytes()
                info = zipfile.ZipInfo(name, date_time=date)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (0o100755 if name in executable else 0o100644) << 16
                new.writestr(info, data)
                b64 = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append([name, f"sha256={b64}", str(len(data))])
            rows.append([record_name, "", ""])
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerows(rows)
            info = zipfile.ZipInfo(record_name, date_time=date)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            new.writestr(info, text.getvalue())
    return packed


# The version pip recorded for the build environment's torch (its dist-info), not torch.__version__: PyPI's
# CUDA 13.0 torch is `2.14.1` to pip but says `2.14.1+cu130` at run time, and a requirement with a local
# label (`==2.14.1+cu130`) matches only candidates with that very label. So the requirement is exactly
# what the index that gave us torch calls it: `torch==2.14.1` from PyPI (which `2.14.1+cu130` elsewhere
# would satisfy too: PEP 440 ignores a candidate's label under a specifier without one), and
# `torch==2.12.0.dev20260307+cu130` from PyTorch's index, whose builds only differ by it.
_DIST_VERSION = """
import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
"""


def torch_requirement(python: str, log_path: Path) -> str | None:
    """`torch==<version>` of the build environment's torch; None when it has none (nothing to declare)."""
    proc = process.run([python, "-c", _DIST_VERSION, "torch"], error=BuildError, log=log_path,
                       what="reading the build environment's torch version (for the wheel's Requires-Dist)")
    version = proc.stdout.strip()
    return f"torch=={version}" if version else None


_REQUIRES = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)(.*)$", re.IGNORECASE)


def declare(metadata: Path, requirement: str) -> None:
    """Make `requirement` the wheel's only unconditional requirement on its project: a looser one the
    package declares itself (`torch>=2.0`) is replaced, one under an extra (`; extra == "x"`) is kept."""
    name = canonicalize_name(re.split(r"[<>=!~ ;\[(]", requirement, maxsplit=1)[0])
    text = metadata.read_text()
    head, sep, body = text.partition("\n\n")
    kept = []
    for line in head.splitlines():
        m = _REQUIRES.match(line)
        if m and canonicalize_name(m.group(1)) == name and "extra" not in m.group(2):
            continue
        kept.append(line)
    metadata.write_text("\n".join([*kept, f"Requires-Dist: {requirement}"]) + (sep + body if sep else "\n"))
