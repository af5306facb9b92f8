"""Which sglang serves the wheel, and where it comes from (`[serve] sglang`).

`release`: `sglang==[toolchain] sglang` from the package index (or a wheelhouse).
`source`: the kernel snapshot's own sglang. A kernel at a SGLang *main* commit drifts from
every release (at 6ffc74ef, sglang 0.5.9 imports four names that kernel lacks), so
`python/` of the recipe's [source] repo is fetched at its [source] commit, sparse, through
the fetch stage's mirror (the same partial mirror and `[mirrors]` rewrites as the kernel),
and built into a wheel with the version `0.0.0.dev0+g<commit12>`: upstream's own
setuptools-scm fallback for a build without git metadata, labelled with the commit (PEP 440
local label), so the serve check can tell that build from any other. The wheel is cached
by repository and commit.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from build_kernel import atomic, log, process
from build_kernel.errors import FetchError, ServeError
from build_kernel.plan import Plan
from build_kernel.stages.serve import rust_extensions
from build_kernel.stages.serve import wheelhouse as wheelhouse_mod

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

SUBDIR = "python"
# Not in python/ at 6ffc74ef, but its pyproject names them: upstream's release workflows
# (release-pypi.yml) `cp ../README.md ../LICENSE .` before building; so do we.
ROOT_FILES = ("README.md", "LICENSE")
BASE_VERSION = "0.0.0.dev0"


@dataclass(frozen=True)
class Choice:
    """The sglang the serve interpreter must have."""

    origin: str  # "release" or "source"
    version: str  # the release pin, or the exact version of the source build
    repo: str = ""
    commit: str = ""

    def describe(self) -> str:
        if self.origin == "source":
            return f"sglang {self.version}, built from {SUBDIR}/ of {self.repo} @ {self.commit[:12]} ([serve] sglang)"
        if not self.version:
            return "sglang: none named (set [toolchain] sglang, or [serve] sglang = \"source\")"
        return f"sglang {self.version} (release, from the package index or --wheelhouse: [toolchain] sglang)"

    def admits(self, installed: str | None) -> bool:
        """Whether the installed version is this one: `==pin` as pip reads it for a release
        (a local build 0.5.9+g6ffc74e is that release), the exact build (label included) from source."""
        if not installed:
            return False
        try:
            if self.origin == "source":
                return Version(installed) == Version(self.version)
            return SpecifierSet(f"=={self.version}").contains(installed, prereleases=True)
        except InvalidVersion:
            return False

    def to_dict(self) -> dict[str, str]:
        return {"from": self.origin, "version": self.version, "repo": self.repo, "commit": self.commit,
                "describe": self.describe()}


def choose(plan: Plan) -> Choice:
    r = plan.recipe
    if r.serve.sglang != "source":
        return Choice("release", r.toolchain.sglang)
    return Choice("source", f"{BASE_VERSION}+g{r.source.commit[:12]}", r.source.repo, r.source.commit)


def _project_name(pyproject: Path, where: str) -> str:
    try:
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise ServeError(f"{where}: {SUBDIR}/pyproject.toml has no readable [project] name ({type(exc).__name__})",
                         hint="[serve] sglang = \"source\" needs an SGLang tree; use \"release\" otherwise") from None
    return str(name)


def _build_requires(pyproject: Path) -> list[str]:
    data = tomllib.loads(pyproject.read_text()).get("build-system", {})
    # PEP 517's default when [build-system] is absent.
    return [str(r) for r in data.get("requires", ["setuptools>=40.8.0"])]


def _fetch(plan: Plan, choice: Choice, offline: bool) -> tuple[Path, str]:
    from build_kernel.stages.fetch import remote

    url = remote.resolve_url(choice.repo, plan.cache_dir, base=plan.recipe.root)
    try:
        return remote.ensure_commit(url, choice.commit, plan.cache_dir, offline=offline,
                                    paths=[SUBDIR, *ROOT_FILES], mirrors=plan.mirrors)
    except FetchError as exc:  # the serve stage's failure (exit 9), git's reason kept
        raise ServeError(f"fetching sglang's {SUBDIR}/: {exc.message}", hint=exc.hint) from None


def _from_wheelhouse(folder: Path, choice: Choice) -> Path | None:
    """A wheel of exactly this source build in the wheelhouse: its version carries the commit
    (`+g<commit12>`), so no other build can pass for it."""
    for dist in wheelhouse_mod.scan(folder).get("sglang", []):
        if dist.tags is not None and dist.version == Version(choice.version):
            return dist.path
    return None


def build(plan: Plan, python: str, env: Mapping[str, str], *, log_path: Path, offline: bool = False,
          wheelhouse: Path | None = None) -> Path:
    """The source build's wheel (cached by repository and commit): the wheelhouse's own build of
    this commit where it has one, else built here, its build requirements from the wheelhouse
    alone when one is given."""
    choice = choose(plan)
    assert choice.origin == "source"
    final = plan.cache_dir / "serve" / "sglang" / (
        f"{choice.commit[:12]}-{hashlib.sha256(choice.repo.encode()).hexdigest()[:8]}")
    with FileLock(str(final) + ".lock"):
        found = sorted(final.glob("*.whl"))
        if found:
            return found[0]
        atomic.sweep(final)
        built = _from_wheelhouse(wheelhouse, choice) if wheelhouse is not None else None
        if built is not None:  # this commit's build, made where python/ could be fetched (e.g. before going offline)
            with atomic.folder(final) as tmp:
                shutil.copy2(built, tmp / built.name)
            return final / built.name
        mirror_path, sha = _fetch(plan, choice, offline)
        where = f"{choice.repo} @ {sha[:12]}"
        with atomic.folder(final) as tmp:
            from build_kernel.stages.fetch import mirror

            tree = tmp / "src"
            mirror.checkout(mirror_path, sha, tree, paths=[SUBDIR, *ROOT_FILES])
            project = tree / SUBDIR
            if not (project / "pyproject.toml").is_file():
                raise ServeError(f"{where} has no {SUBDIR}/pyproject.toml: not an SGLang tree",
                                 hint="set [serve] sglang = \"release\" and [toolchain] sglang to a release")
            for name in ROOT_FILES:
                if (tree / name).is_file() and not (project / name).exists():
                    shutil.copy2(tree / name, project / name)
            dist = _project_name(project / "pyproject.toml", where)
            if left := rust_extensions.leave_out(project, where):
                log.info(f"{dist} from {where}: Rust extension(s) {', '.join(left)} left out (nothing in {SUBDIR}/ "
                         "imports them; their crate is outside it): a pure-Python wheel")
            if wheelhouse is not None:  # pip's isolated build environment starts empty
                wheelhouse_mod.require(wheelhouse, _build_requires(project / "pyproject.toml"),
                                       wheelhouse_mod.target(python, env), what=f"building {dist} from {where}",
                                       installed_count=False)
            scm = "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_" + canonicalize_name(dist).replace("-", "_").upper()
            process.run([python, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                         *wheelhouse_mod.index_args(wheelhouse), "--wheel-dir", tmp, project], error=ServeError, env={**env, scm: choice.version},
                        what=f"building the {dist} wheel of {where}", log=log_path, timeout=3600,
                        fix=f"see {log_path}; its build requirements (setuptools, setuptools-scm) must be on the "
                            "index or in the wheelhouse")
            shutil.rmtree(tree)
            wheels = sorted(tmp.glob("*.whl"))
            version = parse_wheel_filename(wheels[0].name)[1] if wheels else None
            if version != Version(choice.version):
                raise ServeError(f"building {where} gave {wheels[0].name if wheels else 'no wheel'}, not {dist} "
                                 f"{choice.version}", hint=f"its {SUBDIR}/pyproject.toml must take its version from "
                                 f"setuptools-scm (which honours {scm})")
        return sorted(final.glob("*.whl"))[0]

