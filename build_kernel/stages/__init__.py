"""The pipeline's stages, each behind one `Stage` protocol, sharing one `Context`.

After fromager's WorkContext and cibuildwheel's PlatformModule: the pipeline loops over
`pipeline()`; each CLI command runs the same stage objects (with its own options), so a
stage run alone behaves exactly as it does in the pipeline. A new stage (serve) or a
pluggable part plugs in here, not into the pipeline's loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from build_kernel import log

if TYPE_CHECKING:
    from build_kernel.plan import Plan
    from build_kernel.stages.builder.cache import BuildResult
    from build_kernel.stages.fetch.workspace import Tree
    from build_kernel.stages.verify.report import Report

NAMES = ("fetch", "patch", "build", "verify", "test", "publish", "serve")


@dataclass
class Context:
    """The plan, the run's flags, and what each stage hands to the next."""

    plan: Plan
    offline: bool = False
    force: bool = False
    # Dry run: stages only answer skip(); what earlier stages would hand over is assumed there.
    dry_run: bool = False
    tree: Tree | None = None
    python: str | None = None
    build: BuildResult | None = None
    wheels: list[Path] = field(default_factory=list)
    report: Report | None = None
    # stage name -> {"status", "seconds", ...}: the summary `--json` prints.
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def env(self) -> Mapping[str, str]:
        return self.plan.env

    def build_python(self) -> str:
        """The interpreter of the build environment (verify and publish use the same one). In a dry
        run only its path: a dry run never creates an environment nor installs torch into one."""
        if self.python is None:
            from build_kernel.stages.builder import buildenv

            self.python = buildenv.python_for(self.plan, dry_run=self.dry_run, offline=self.offline)
        return self.python


@dataclass
class Done:
    status: str
    info: dict[str, Any] = field(default_factory=dict)


class Stage(Protocol):
    name: str

    def skip(self, ctx: Context) -> str | None:
        """Why this stage does not run for this context, or None when it runs."""

    def title(self, ctx: Context) -> str:
        """The step line shown while it runs."""

    def run(self, ctx: Context) -> Done:
        """Do the work; put what later stages need on `ctx`; raise the stage's error on failure."""


def pipeline(*, gpu_check: str = "", recheck: bool = False) -> list[Stage]:
    """The default stages, in order (imported here, so the parent package stays light)."""
    from build_kernel.stages.builder import BuildStage
    from build_kernel.stages.fetch import FetchStage
    from build_kernel.stages.patch import PatchStage
    from build_kernel.stages.publish.stage import PublishStage
    from build_kernel.stages.serve import ServeStage
    from build_kernel.stages.upstream_tests import TestStage
    from build_kernel.stages.verify import VerifyStage

    return [FetchStage(), PatchStage(), BuildStage(), VerifyStage(gpu_check=gpu_check, recheck=recheck), TestStage(),
            PublishStage(), ServeStage()]


def run(ctx: Context, stages: Iterable[Stage], *, clock: Callable[[], float] | None = None) -> Context:
    """Run `stages` in order, recording each outcome on `ctx` (a skipped one says why)."""
    import time

    now = clock or time.monotonic
    for stage in stages:
        why = stage.skip(ctx)
        if why is not None:
            ctx.outcomes[stage.name] = {"status": why, "seconds": 0.0}
            continue
        start = now()
        with log.step(stage.title(ctx)) as step:
            try:
                done = stage.run(ctx)
            except Exception as exc:
                if (full := _disk_full(ctx, stage.name, exc)) is not None:
                    raise full from exc
                raise
            if done.status == "failed":  # a verdict, not an exception (verify shows its table first)
                step.fail()
        ctx.outcomes[stage.name] = {"status": done.status, "seconds": round(now() - start, 1), **done.info}
    return ctx


def _disk_full(ctx: Context, stage: str, exc: Exception) -> BaseException | None:
    """A stage's failure that was a full disk (ENOSPC here or in a program it ran), said as one: which folder,
    what the plan needs there, what is free (disk_space)."""
    from build_kernel import disk_space
    from build_kernel.errors import DiskFullError

    if isinstance(exc, DiskFullError) or ctx.dry_run:
        return None
    try:
        return disk_space.disk_full(exc, disk_space.needs(ctx.plan, env_built=True), f"the {stage} stage")
    except Exception:  # asking about the disk must never hide the stage's own error
        return None
