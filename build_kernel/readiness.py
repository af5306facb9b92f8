"""Can this host build this recipe? Every problem at once, each with its fix, before any work.

The one owner of what `doctor --recipe` reports and of what the pipeline (`build-kernel --recipe R`)
and the `build` command check first: the toolchain installable (the wheel pins, pinstatus), the tools
and compilers (toolchain), the CUDA toolkit (toolkit), the host compiler, the system libraries, the
sources reachable or already cached, and the disk. Nothing is installed, fetched or written; the
network is asked only what a build would ask it (a pin's index, `git ls-remote` of each remote not
in the cache), with a short timeout and all at once, so a firewalled host answers in seconds.
`--offline` asks the cache and the lock instead. A problem carries the error kind its stage would
have raised: the run stops with the first one's kind (its exit code, its name in `--json`), its
message every problem, one line each.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from build_kernel import disk_space, examples, host_compiler, log, process, stack, toolchain
from build_kernel.errors import BuildKernelError, DiskFullError, FetchError, ToolchainError
from build_kernel.mirrors import is_url
from build_kernel.plan import Plan
from build_kernel.recipe import SHA_RE

# What `git ls-remote` may take to say a remote answers: a DNS failure is instant, a firewall that drops
# packets is not, and that wait must not be a build's first minute.
PROBE_TIMEOUT_S = 10.0
@dataclass(frozen=True)
class Problem:
    kind: type[BuildKernelError]  # the error its stage would raise: its exit code is the run's
    line: str  # what is wrong, and the fix

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.__name__, "exit_code": self.kind.exit_code, "line": self.line}


@dataclass(frozen=True)
class Source:
    """One remote repository the build fetches: already in the cache, reachable, or neither."""

    key: str  # the recipe table: "source", "deps.NAME"
    url: str
    fetch_url: str  # after [mirrors] and git's insteadOf
    state: str  # "cached", "reachable", "unreachable", "not cached"
    line: str
    reason: str = ""  # unreachable: git's reason, without the URL
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.state in ("cached", "reachable")


@dataclass(frozen=True)
class Disk:
    """One folder the plan writes: its free space against what the plan needs there (disk_space.needs)."""

    role: str
    folder: str
    free_bytes: int
    need_bytes: int
    basis: str
    line: str

    @property
    def ok(self) -> bool:
        return self.free_bytes >= self.need_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "free_gb": round(self.free_bytes / 1e9, 2),
                "need_gb": round(self.need_bytes / 1e9, 2)}


@dataclass
class Readiness:
    stack: stack.Stack
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # what doctor shows beside the problems

    def require(self) -> None:
        """Raise the first problem's kind (its exit code, its name in `--json`) carrying every problem, a line each."""
        if self.problems:
            raise self.problems[0].kind("\n".join(p.line for p in self.problems))

    def to_dict(self) -> dict[str, Any]:
        return {"stack": self.stack.to_dict(), **self.details, "warnings": self.warnings,
                "problems": [p.line for p in self.problems], "problem_kinds": [p.to_dict() for p in self.problems]}


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "no answer")


def _ls_remote(url: str, plan: Plan) -> str | None:
    """None when `url` answers git; else git's own reason (or the timeout)."""
    env = {**plan.env, "GIT_TERMINAL_PROMPT": "0"}  # a remote that wants a password says so, never waits
    try:
        proc = process.run(["git", "ls-remote", url, "HEAD"], error=FetchError, what=f"asking {url}", env=env,
                           timeout=PROBE_TIMEOUT_S, check=False)
    except FetchError as exc:
        return process.redact(exc.message) if "did not finish" not in exc.message else f"no answer in {PROBE_TIMEOUT_S:g} s"
    # A mirror's URL in the user config may carry its password: never shown.
    return None if proc.returncode == 0 else process.redact(_first_line(proc.stderr or proc.stdout))


def _cached(plan: Plan, url: str, commit: str) -> bool:
    from build_kernel.stages.fetch import mirror

    path = mirror.path_for(plan.cache_dir, url)
    if not path.is_dir():
        return False
    try:
        with git.Repo(path) as repo:
            return mirror.has_commit(repo, commit)
    except (git.GitError, OSError):
        return False  # a damaged mirror: fetch remakes it


def _remotes(plan: Plan) -> list[tuple[str, str, str, str]]:
    """(recipe key, repo URL, ref, pin kind) of every remote repository; kind "" for a full SHA."""
    r = plan.recipe
    found = []
    if is_url(r.source.repo):
        floating = r.source.allow_floating and not SHA_RE.match(r.source.commit)
        found.append(("source", r.source.repo, r.source.commit, "commit" if floating else ""))
    for dep in r.deps:
        if not dep.path and is_url(dep.repo):
            found.append((f"deps.{dep.name}", dep.repo, dep.tag or dep.commit, "tag" if dep.tag else ""))
    return found


def _missing_folders(plan: Plan) -> list[str]:
    """Local sources (a repository path, a dependency's folder) that are not there, as fetch would say it."""
    r = plan.recipe
    wanted = [("source", "repo", r.source.repo)] if not (is_url(r.source.repo) or examples.is_example(r.source.repo)) else []
    wanted += [(f"deps.{d.name}", "path", d.path) for d in r.deps if d.path]
    wanted += [(f"deps.{d.name}", "repo", d.repo) for d in r.deps
               if not d.path and d.repo and not (is_url(d.repo) or examples.is_example(d.repo))]
    lines = []
    for key, field_name, value in wanted:
        path = Path(value) if Path(value).is_absolute() else r.root / value
        if not path.exists():
            lines.append(f"[{key}] {field_name} {path} does not exist (fix the path in the recipe)")
    return lines


def check_source(plan: Plan, key: str, url: str, ref: str, kind: str, *, offline: bool) -> Source:
    from build_kernel.stages.fetch import pins

    rw = plan.mirrors.rewrite(url)
    where = process.redact(f"{rw.fetch_url} (mirror of {url}, set in {rw.rule.origin})" if rw.rule else url)
    config = plan.mirrors.config_words()
    if offline:
        if kind:  # a tag or branch: the commit it was recorded as, in the lock or the cache
            try:
                commit = pins.for_fetch(plan, key, kind, url, url, ref, offline=True)
            except FetchError as exc:
                return Source(key, url, rw.fetch_url, "not cached", exc.render())
        else:
            commit = ref
        if _cached(plan, url, commit):
            return Source(key, url, rw.fetch_url, "cached", f"[{key}] {url}: {commit[:12]} in the cache")
        fix = f"run once without --offline, or map it to a local mirror in {config}"
        return Source(key, url, rw.fetch_url, "not cached",
                      f"[{key}] {url} is not in the cache and --offline forbids fetching it ({fix})",
                      reason="not in the cache", fix=fix)
    if not kind and _cached(plan, url, ref):
        return Source(key, url, rw.fetch_url, "cached", f"[{key}] {url}: {ref[:12]} in the cache")
    said = _ls_remote(rw.fetch_url, plan)
    if said is None:
        return Source(key, url, rw.fetch_url, "reachable", f"[{key}] {where} answers")
    fix = ("fix or update the mirror, or remove its entry" if rw.rule
           else f"check the network, or map it to a reachable mirror in {config}")
    # git names the URL in its reason; without it, remotes that fail alike share one line (_failing).
    reason = said.replace(f"unable to access '{rw.fetch_url.rstrip('/')}/': ", "").removeprefix("fatal: ")
    reason = re.sub(r" after \d+ ms", "", reason)  # curl's timing differs per remote; the cause does not
    return Source(key, url, rw.fetch_url, "unreachable", f"[{key}] cannot reach {where}: {said} ({fix})",
                  reason=reason, fix=fix)


def _failing(sources: list[Source]) -> list[str]:
    """One line per way of failing: ten GitHub repositories behind one unresolvable host are one problem, and
    so are nine repositories --offline finds no copy of."""
    groups: dict[tuple[str, str, str], list[Source]] = {}
    for s in sources:
        if not s.ok:  # a line of its own when its reason is its own (a tag the lock does not hold)
            groups.setdefault((s.state, s.reason or s.line, s.fix), []).append(s)
    lines = []
    for (state, reason, fix), alike in groups.items():
        if len(alike) == 1:
            lines.append(alike[0].line)
            continue
        names = ", ".join(f"[{s.key}] {s.fetch_url if state == 'unreachable' else s.url}" for s in alike)
        lines.append(f"cannot reach {len(alike)} repositories: {reason}: {names} ({fix})" if state == "unreachable"
                     else f"{len(alike)} repositories are not in the cache and --offline forbids fetching them: "
                          f"{names} ({fix.replace(' map it ', ' map them ')})")
    return [process.redact(line) for line in lines]  # a mirror URL may carry a password


def check_disks(plan: Plan, *, env_built: bool) -> tuple[list[Disk], list[str]]:
    """Each folder the plan writes against what it needs there; the problem lines (folders sharing a disk are
    asked for their needs together). Nothing is created to ask."""
    needs = disk_space.needs(plan, env_built=env_built)
    disks = [Disk(n.role, str(n.folder), n.free(), n.bytes, n.basis,
                  f"{disk_space.human(n.free())} free for the {n.label} {n.folder} (it needs about "
                  f"{disk_space.human(n.bytes)}: {n.basis})") for n in needs]
    return disks, disk_space.short(needs)


def check(plan: Plan, *, offline: bool = False) -> Readiness:
    """Every check, installing and fetching nothing; the network probes run concurrently with the local ones."""
    from build_kernel.stages.builder import pinstatus, system_deps, toolkit

    found = stack.resolve(plan)
    facts = found.facts
    ready = Readiness(found)
    env = {**plan.env, **plan.build_env()}  # what the build's CMake would read
    # Every check that waits (on the network, or on a compiler's probe) runs beside the others.
    with ThreadPoolExecutor(max_workers=8) as pool:
        pins_later = pool.submit(pinstatus.check_all, plan, offline=offline)
        sources_later = [pool.submit(check_source, plan, *remote, offline=offline) for remote in _remotes(plan)]
        linkers_later = pool.submit(host_compiler.resolve, plan.recipe.toolchain.host_compiler,
                                    {**env, **plan.recipe.build.env}, plan.recipe.build.defines, facts.nvcc)
        system_later = pool.submit(system_deps.check, plan.recipe.system, plan.env)
        tools = toolchain.preflight(facts, plan.archs, cmake_spec=plan.recipe.toolchain.cmake,
                                    want_cuda=plan.recipe.toolchain.cuda, series=plan.series,
                                    commit=plan.recipe.source.commit)
        cuda = toolkit.describe(plan, facts)
        if cuda["source"] == "none":
            tools.append(str(cuda["why"]))
        elif cuda["source"] == "wheels":  # the wheels replace the system nvcc: its problems are not the build's
            tools = [x for x in tools if not x.startswith("nvcc")]
        disks, disk_problems = check_disks(plan, env_built=found.built)
        linkers, system = linkers_later.result(), system_later.result()
        pin_statuses = pins_later.result()
        sources = [later.result() for later in sources_later]
    # The toolchain first (can it be installed at all?), then what a build would meet in its order.
    toolchain_problems = pinstatus.problems(plan, offline=offline, statuses=pin_statuses)
    for kind, lines in ((ToolchainError, toolchain_problems),
                        (ToolchainError, tools + linkers.problems + [st.problem() for st in system if not st.ok]),
                        (FetchError, _missing_folders(plan) + _failing(sources)),
                        (DiskFullError, disk_problems)):
        ready.problems += [Problem(kind, line) for line in lines]
    if warning := stack.series_warning(plan):
        ready.warnings.append(warning)
    ready.details = {"cuda_toolkit": cuda, "host_compiler": linkers.to_dict(),
                     "system": [st.to_dict() for st in system],
                     "mirrors": [rw.to_dict() for rw in plan.remotes() if rw.rewritten],
                     "pins": [s.to_dict() for s in pin_statuses], "toolchain_problems": toolchain_problems,
                     "sources": [{**asdict(s), "ok": s.ok} for s in sources],
                     "disks": [d.to_dict() for d in disks]}
    return ready


def require(plan: Plan, *, offline: bool = False) -> None:
    """The pipeline's first step: every problem at once, or nothing said beyond one step line."""
    with log.step("check the toolchain, the sources, the system and the disk") as step:
        ready = check(plan, offline=offline)
        for warning in ready.warnings:
            log.warn(warning)
        if ready.problems:
            step.fail()
    ready.require()
