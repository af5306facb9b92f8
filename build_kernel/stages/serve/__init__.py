"""Serve: not in this version of build-kernel (sglang flags, systemd unit, health check).

The stage is registered so the pipeline's summary says so, and a serve stage can replace
this one without touching the pipeline.
"""

from __future__ import annotations

from build_kernel.stages import Context, Done

NOT_YET = "not in this version of build-kernel"


class ServeStage:
    name = "serve"

    def skip(self, ctx: Context) -> str | None:
        return NOT_YET

    def title(self, ctx: Context) -> str:
        return "serve"

    def run(self, ctx: Context) -> Done:  # pragma: no cover - skip() always answers
        return Done(NOT_YET)
