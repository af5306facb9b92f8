"""Prove a publish: install the exact version back from the target alone, then import it.

pip, with every configured index and find-links switched off, installs
`name==exact.version+local` from the target's simple URL into a throw-away folder; the
bytes it fetched must be the bytes we published (the stage compares them), and the
wheel's modules must import from that folder.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from build_kernel import import_probe
from build_kernel.errors import BuildKernelError, PublishError
from build_kernel.stages.publish.backends import last_line, reachability, run
from build_kernel.stages.publish.credentials import with_userinfo
from build_kernel.stages.publish.targets import Target

INSTALL_TIMEOUT_S = 600.0
# pip settings that only shape the connection; every other PIP_* variable (extra index
# URLs, find-links, constraints) could let pip take the package from somewhere else.
_PIP_ENV_KEPT = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES")


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


def _pip_install(target: Target, requirement: str, *, site: Path, report: Path, cwd: Path, python: str,
                 env: Mapping[str, str], log_path: Path | None) -> None:
    """`pip install --no-deps requirement` into `site` from the target's simple URL only."""
    pip_env = _pip_env(env)
    cmd: list[str | Path] = [python, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--no-input",
                             "--disable-pip-version-check", "--only-binary", ":all:", "--target", site,
                             "--report", report]
    if target.username and target.password and target.kind == "index":
        # Credentials go through the environment, never the command line (ps, logs).
        pip_env["PIP_INDEX_URL"] = with_userinfo(target.simple_url, target.username, target.password)
    else:
        cmd += ["--index-url", target.simple_url]
    cmd.append(requirement)
    code, output = run(target, cmd, what=f"installing {requirement} back from {target.label}", env=pip_env,
                       cwd=cwd, log_path=log_path, timeout=INSTALL_TIMEOUT_S)
    if code != 0:
        raise _install_failure(target, requirement, python, output)


def _install_failure(target: Target, requirement: str, python: str, output: str) -> PublishError:
    flat = " ".join(output.split()).lower()
    if "no module named pip" in flat:
        return target.fail(f"{python} has no pip to install {requirement} back with", f"{python} -m ensurepip")
    if (err := reachability(target, flat)) is not None:
        return err
    if "no matching distribution" in flat or "could not find a version" in flat:
        return target.fail(f"{requirement} was published but is not installable from {target.simple_url}",
                           "check the target's simple URL (devpi: …/+simple/; set `simple` in indexes.toml "
                           "or pass --install-url)")
    return target.fail(f"installing {requirement} back from {target.simple_url} failed: {last_line(output)}")


def install_back(target: Target, project: str, version: str, *, modules: Sequence[str], python: str,
                 env: Mapping[str, str], log_path: Path | None = None) -> tuple[str | None, dict[str, str]]:
    """pip-install exactly `project==version` from the target alone, then import `modules`.

    Returns the sha256 of the file pip fetched (None when pip's report lacks it) and the
    import outcome per module; raises PublishError when the round trip does not hold.
    """
    # `===`: under PEP 440 `==1.0` also matches `1.0+local`, another build of the same release.
    requirement = f"{project}==={version}"
    with tempfile.TemporaryDirectory(prefix="bk-install-back-") as tmp_str:
        tmp = Path(tmp_str)
        site, report, cwd = tmp / "site", tmp / "report.json", tmp / "cwd"
        cwd.mkdir()
        _pip_install(target, requirement, site=site, report=report, cwd=cwd, python=python, env=env,
                     log_path=log_path)
        data = json.loads(report.read_text())
        installed: dict[str, Any] = (data.get("install") or [{}])[0]
        info = installed.get("download_info", {}).get("archive_info", {})
        fetched = (info.get("hashes") or {}).get("sha256")
        got_version = installed.get("metadata", {}).get("version")
        if got_version != version:
            raise target.fail(f"pip installed {project} {got_version} from {target.label}, not {version}")
        imports = _import_check(target, site, cwd, modules, python, env, log_path)
    return fetched, imports


def _import_check(target: Target, site: Path, cwd: Path, modules: Sequence[str], python: str,
                  env: Mapping[str, str], log_path: Path | None) -> dict[str, str]:
    """Each module must import, and from `site`: not from a copy installed elsewhere."""
    if not modules:
        return {}
    try:
        probe = import_probe.run(python, modules, path=[site], base_env=env, cwd=cwd, error=PublishError,
                                 what="importing the installed wheel", log=log_path, timeout=INSTALL_TIMEOUT_S,
                                 secrets=target.secret_forms)
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
        raise target.fail(f"installed back from {target.label}, but {'; '.join(problems)}",
                          "the wheel on the index does not work here: fix it and publish a new build")
    return outcome
