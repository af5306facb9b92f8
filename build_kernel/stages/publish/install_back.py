"""Prove a publish: install the exact version back from the target alone, then import it.

pip, with every configured index and find-links switched off, installs `name===exact.version+local`
and what it requires (its torch) from the target's simple URL (and the wheelhouses named with
`--find-links`) into a fresh venv (fresh_env); the bytes it fetched must be the bytes we published
(the stage compares them), and the wheel's modules must import, from that venv, with its interpreter.
Where the wheel's own libraries link the CUDA driver and the host has none, the import loads them with
a stand-in libcuda, as verify's does (cuda_driver.for_load); `Installed.driver` says which.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from build_kernel import cuda_driver, import_probe
from build_kernel.errors import BuildKernelError, PublishError
from build_kernel.stages.publish import fresh_env
from build_kernel.stages.publish.backends import last_line, reachability, run
from build_kernel.stages.publish.credentials import with_userinfo
from build_kernel.stages.publish.targets import Target

INSTALL_TIMEOUT_S = 600.0
# pip settings that only shape the connection; every other PIP_* variable (extra index
# URLs, find-links, constraints) could let pip take the package from somewhere else.
_PIP_ENV_KEPT = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES")
_LIBRARY = re.compile(r"\.so(\.\d+)*$")  # verify's: libfoo.so, libfoo.so.1.2
_NO_DRIVER_NEEDED = "no library links libcuda"


def _pip_env(base: Mapping[str, str]) -> dict[str, str]:
    """No pip config file and no PIP_* source settings: only the target's index counts."""
    env = {k: v for k, v in base.items() if not k.startswith("PIP_") or k in _PIP_ENV_KEPT}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def wheel_modules(wheel: Path) -> list[str]:
    """Top-level importable names: `top_level.txt`, else the package dirs and modules."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top_level = next((n for n in names if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                          and n.endswith("/top_level.txt")), None)
        if top_level:
            listed = [line.strip() for line in zf.read(top_level).decode().splitlines() if line.strip()]
            if listed:
                return sorted({m.replace("/", ".") for m in listed})
    found: set[str] = set()
    for name in names:
        head, _, rest = name.partition("/")
        if head.endswith((".dist-info", ".data")):
            continue
        if (rest and rest.endswith((".py", ".so"))) or (not rest and name.endswith(".py")):
            found.add(head if rest else head[:-3])
        elif not rest and name.endswith(".so"):
            found.add(head.split(".")[0])
    return sorted(m for m in found if m.isidentifier())


class _Missing(Exception):
    """pip found no distribution for a requirement of the wheel (not the wheel itself)."""

    def __init__(self, requirement: str, failure: PublishError) -> None:
        super().__init__(requirement)
        self.requirement, self.failure = requirement, failure


@dataclass
class Installed:
    """What the install-back proved: the bytes pip fetched, each module's import, where each dependency came
    from (`name version` -> URL, or the build environment when it stood in), and how the import found the CUDA
    driver its libraries link (cuda_driver.for_load's words; None when no module was imported)."""

    fetched: str | None
    imports: dict[str, str]
    dependencies: dict[str, str] = field(default_factory=dict)
    lent: list[str] = field(default_factory=list)
    driver: str | None = None


def _sources(target: Target, find_links: Sequence[str]) -> str:
    return " or ".join([target.simple_url, *find_links])


def _pip_install(target: Target, requirement: str, *, fresh: fresh_env.Fresh, report: Path, cwd: Path, python: str,
                 find_links: Sequence[str], env: Mapping[str, str], log_path: Path | None,
                 no_deps: bool = False) -> None:
    """`pip install requirement`, with its dependencies (unless `no_deps`), into the fresh venv from the
    target's simple URL (and the wheelhouses named) only. pip is the build environment's (`pip --python`)."""
    pip_env = _pip_env(env)
    cmd: list[str | Path] = [python, "-m", "pip", "--python", fresh.python, "install", "--no-cache-dir", "--no-input",
                             "--no-compile", "--disable-pip-version-check", "--only-binary", ":all:",
                             "--report", report, *(["--no-deps"] if no_deps else [])]
    if target.username and target.password and target.kind == "index":
        # Credentials go through the environment, never the command line (ps, logs).
        pip_env["PIP_INDEX_URL"] = with_userinfo(target.simple_url, target.username, target.password)
    else:
        cmd += ["--index-url", target.simple_url]
    for folder in find_links:
        cmd += ["--find-links", folder]
    cmd.append(requirement)
    code, output = run(target, cmd, what=f"installing {requirement} back from {target.label}", env=pip_env,
                       cwd=cwd, log_path=log_path, timeout=INSTALL_TIMEOUT_S)
    if code != 0:
        raise _install_failure(target, requirement, python, output, find_links)


_NOT_FOUND = re.compile(r"no matching distribution found for (\S+)", re.IGNORECASE)


def _install_failure(target: Target, requirement: str, python: str, output: str,
                     find_links: Sequence[str]) -> PublishError | _Missing:
    flat = " ".join(output.split())
    low = flat.lower()
    if "no module named pip" in low:
        return target.fail(f"{python} has no pip to install {requirement} back with", f"{python} -m ensurepip")
    if (err := reachability(target, low)) is not None:
        return err
    missing = _NOT_FOUND.search(flat)
    project = requirement.partition("===")[0]
    if missing and canonicalize_name(re.split(r"[<>=!~;\[(]", missing.group(1))[0]) != canonicalize_name(project):
        needed = missing.group(1)
        return _Missing(needed, target.fail(
            f"{requirement.replace('===', ' ')} requires {needed}, which {_sources(target, find_links)} does not hold: "
            f"a fleet installing from there cannot install {project}",
            f"publish {needed} (and what it requires) to {target.label} too, or pass --find-links DIR, a folder "
            "of wheels holding it (docs/publishing.md: how a fleet installs)"))
    if missing or "could not find a version" in low:
        return target.fail(f"{requirement} was published but is not installable from {target.simple_url}",
                           "check the target's simple URL (devpi: …/+simple/; set `simple` in indexes.toml "
                           "or pass --install-url)")
    return target.fail(f"installing {requirement} back from {target.simple_url} failed: {last_line(output)}",
                       "pip's whole output is in the publish log; fix what it names, then run the same command again")


def _name(requirement: str) -> str:
    return str(canonicalize_name(re.split(r"[<>=!~;\[( ]", requirement.strip(), maxsplit=1)[0]))


def _check_lent(target: Target, requirement: str, requires: Sequence[str], have: Mapping[str, str], sources: str,
                hint: str | None) -> None:
    """Every requirement of the wheel (installed --no-deps beside a lent torch) is met by what was lent."""
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        got = have.get(_name(req.name))
        if got is None or not req.specifier.contains(got, prereleases=True):
            lent = ", ".join(f"{n} {v}" for n, v in have.items())
            raise target.fail(f"{requirement.replace('===', ' ')} requires {req}: neither {sources} nor the build "
                              f"environment ({lent}) holds it", hint)


def install_back(target: Target, project: str, version: str, *, modules: Sequence[str], python: str,
                 env: Mapping[str, str], log_path: Path | None = None, find_links: Sequence[str] = ()) -> Installed:
    """pip-install exactly `project==version`, with what it requires, into a fresh venv from the target (and
    the wheelhouses `find_links`) alone, then import `modules` with that venv's interpreter.

    A requirement neither holds (the wheel's torch, on an index of kernels only) is an error when
    wheelhouses were named; otherwise the build environment's own distribution stands in (fresh_env.lend)
    and `lent` names it: the caller warns that the index alone does not install the wheel.
    Raises PublishError when the round trip does not hold.
    """
    # `===`: under PEP 440 `==1.0` also matches `1.0+local`, another build of the same release.
    requirement = f"{project}==={version}"
    with tempfile.TemporaryDirectory(prefix="bk-install-back-") as tmp_str:
        tmp = Path(tmp_str)
        report, cwd = tmp / "report.json", tmp / "cwd"
        cwd.mkdir()
        fresh = fresh_env.create(target, python, tmp / "venv", env=env, log_path=log_path)
        lent: list[str] = []
        have: dict[str, str] = {}
        fix: str | None = None
        try:
            _pip_install(target, requirement, fresh=fresh, report=report, cwd=cwd, python=python,
                         find_links=find_links, env=env, log_path=log_path)
        except _Missing as missing:
            name = _name(missing.requirement)
            have = {} if find_links else fresh_env.lend(target, python, [name], fresh, env=env, log_path=log_path)
            if name not in have:
                raise missing.failure from None
            lent.append(f"{name} {have[name]}")
            fix = missing.failure.hint
            # The build environment's torch as it is: pip would resolve its whole tree again (and a torch
            # installed from PyPI may lack a CUDA wheel one of its extras names); the wheel's own requirements
            # are checked against what was lent instead (_check_lent).
            _pip_install(target, requirement, fresh=fresh, report=report, cwd=cwd, python=python,
                         find_links=find_links, env=env, log_path=log_path, no_deps=True)
        data = json.loads(report.read_text())
        entries: list[dict[str, Any]] = data.get("install") or []
        ours = next((e for e in entries if canonicalize_name(e.get("metadata", {}).get("name", "")) == project), {})
        info = ours.get("download_info", {}).get("archive_info", {})
        fetched = (info.get("hashes") or {}).get("sha256")
        got_version = ours.get("metadata", {}).get("version")
        if got_version != version:
            raise target.fail(f"pip installed {project} {got_version} from {target.label}, not {version}",
                              "the wheel's METADATA Version must be its file name's version, as written: rebuild it")
        if lent:
            _check_lent(target, requirement, ours.get("metadata", {}).get("requires_dist") or [], have,
                        _sources(target, find_links), fix)
        dependencies = {f"{e['metadata']['name']} {e['metadata']['version']}": target.redact(
            e.get("download_info", {}).get("url", "?")) for e in entries if e is not ours}
        dependencies.update({what: "the build environment (linked in: not on the index)" for what in lent})
        stub_dir, driver = (cuda_driver.for_load(own_libraries(fresh.site, project, version), tmp / "driver",
                                                 env.get("CUDA_HOME") or None, env=env) if modules else (None, None))
        imports = _import_check(target, fresh.site, cwd, modules, fresh.python, env, log_path, stub_dir, driver)
    return Installed(fetched, imports, dependencies, lent, driver)


def own_libraries(site: Path, project: str, version: str) -> list[Path]:
    """The shared libraries (ELF) the wheel `project version` installed, from its RECORD in `site`: not the
    venv's others (a lent torch's, whose driver needs are not the wheel's)."""
    found: set[Path] = set()
    for dist in importlib.metadata.distributions(path=[str(site)]):
        if canonicalize_name(dist.metadata["Name"] or "") != project or dist.version != version:
            continue
        for file in dist.files or ():
            path = Path(str(dist.locate_file(file)))
            if _LIBRARY.search(file.name) and path.is_file() and not path.is_symlink():
                with path.open("rb") as fh:
                    if fh.read(4) == b"\x7fELF":
                        found.add(path.resolve())
    return sorted(found)


def _import_check(target: Target, site: Path, cwd: Path, modules: Sequence[str], python: str,
                  env: Mapping[str, str], log_path: Path | None, stub_dir: Path | None = None,
                  driver: str | None = None) -> dict[str, str]:
    """Each module must import, and from `site`: not from a copy installed elsewhere. `stub_dir`: a folder
    with a stand-in libcuda.so.1 (cuda_driver.for_load), put on LD_LIBRARY_PATH."""
    if not modules:
        return {}
    try:
        probe = import_probe.run(python, modules, path=[], base_env=env, cwd=cwd, error=PublishError,
                                 what="importing the installed wheel", log=log_path, timeout=INSTALL_TIMEOUT_S,
                                 secrets=target.secret_forms, ld_library_path=[stub_dir] if stub_dir else [])
    except BuildKernelError as exc:
        raise target.fail(exc.message, exc.hint) from None
    if probe.crashed is not None:
        raise target.fail(f"import check of the installed wheel crashed: {probe.crashed}")
    outcome: dict[str, str] = {}
    problems = []
    for name in modules:
        if probe.outcome(name) != "ok":
            problems.append(f"import {name}: {probe.outcome(name)}")
        elif (where := probe.outside(name, site)) is not None:
            problems.append(f"import {name} came from {where}, not from the installed wheel")
        else:
            outcome[name] = "ok"
    if problems:
        if driver and driver != _NO_DRIVER_NEEDED:
            problems.append(f"libcuda: {driver}")
        raise target.fail(f"installed back from {target.label}, but {'; '.join(problems)}",
                          "the wheel on the index does not work here: fix it and publish a new build")
    return outcome
