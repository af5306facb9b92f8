"""Serve: sglang on the wheel we built, with checked flags (and a unit, a launch, a bench).

Modes: `check` (the pipeline's: preflight, flags, guards, the command), `unit` (a systemd
unit, verified), `launch` (start, health, smoke, the user's checks; then serve in the
foreground unless `smoke_only`), `bench` (launch, checks, then sglang.bench_serving at each concurrency, then
stop).
Parts: environment (the serve interpreter), install, preflight, flags, checkpoint,
backends (known_bad.toml), command, unit, launch, checks, bench, ops (which kernels the server called).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from build_kernel import log
from build_kernel.stages import Context, Done

MODES = ("check", "unit", "launch", "bench")


def prewarm_and_verify(plan: Any, python: str, env: dict[str, str], *, dry_run: bool = False) -> dict[str, Any]:
    """`[serve] jit_prewarm` compiled into the server's tvm-ffi cache, then proven by its SASS."""
    from build_kernel.errors import ServeError
    from build_kernel.stages.serve import jit_prewarm
    from build_kernel.stages.verify import jit_cache

    result = jit_prewarm.prewarm(plan, python, env, dry_run=dry_run)
    if dry_run:
        return result
    report = jit_cache.verify(Path(result["cache"]), jit_prewarm.archs(plan), plan.recipe.serve.jit_sass,
                              {**env, **result["env"]}, only=[Path(m["so"]) for m in result["modules"]])
    for line in jit_cache.summary(report):
        log.info(line)
    result["verify"] = report.to_dict()
    if not report.passed:
        raise ServeError(f"the prewarmed JIT cache fails verification: {report.failures[0]}",
                         hint="see the [serve] jit_archs / jit_prewarm of the recipe")
    return result


class ServeStage:
    name = "serve"

    def __init__(self, mode: str = "check", *, model: str | None = None, force: bool = False,
                 unit_path: Path | None = None, install: bool = False, flags_only: bool = False,
                 smoke_only: bool = False, wheelhouse: Path | None = None, op_report: bool = True,
                 checks: tuple[str, ...] = ()) -> None:
        assert mode in MODES
        self.mode, self.model, self.force, self.unit_path = mode, model, force, unit_path
        self.install, self.flags_only, self.smoke_only = install, flags_only, smoke_only
        self.wheelhouse, self.op_report, self.checks = wheelhouse, op_report, checks
        self.result: dict[str, Any] = {}

    def skip(self, ctx: Context) -> str | None:
        if not (self.model or ctx.plan.recipe.serve.model):
            return "no [serve] model in the recipe"
        return None

    def title(self, ctx: Context) -> str:
        return f"serve {self.model or ctx.plan.recipe.serve.model} ({self.mode})"

    def run(self, ctx: Context) -> Done:
        from build_kernel.errors import ServeError
        from build_kernel.plan import recipe_arg
        from build_kernel.stages.serve import command, environment, install

        # ctx.wheels is never empty here: the CLI passes WHEEL or the newest built one (a usage error without
        # one), and in the pipeline the build stage has set it or failed.
        wheel, python = ctx.wheels[0], ctx.build_python()
        if not Path(python).exists():  # only in a dry run: otherwise build_python() made it
            raise ServeError(f"the build environment for torch {ctx.plan.recipe.toolchain.torch} is not made yet "
                             f"({python}); a dry run creates nothing",
                             hint=f"build the wheel first: build-kernel build --recipe {recipe_arg(ctx.plan.recipe)}")
        if self.install:
            served = install.install(ctx.plan, python, wheel, flags_only=self.flags_only, offline=ctx.offline,
                                     folder=self.wheelhouse)
            if ctx.plan.recipe.serve.jit_prewarm and not self.flags_only:
                self.result["jit"] = prewarm_and_verify(ctx.plan, served, environment.server_env(ctx.plan))
            if ctx.plan.recipe.serve.api_key_file and not self.flags_only:  # a parser-only install serves nothing
                from build_kernel.stages.serve import api_key

                key_file = Path(ctx.plan.recipe.serve.api_key_file)
                made = api_key.ensure(key_file)
                log.info(f"API key: {'made' if made else 'kept'} {key_file} (mode 0600, its owner's alone)")
        cmd = command.prepare(ctx.plan, python, wheel, model=self.model, force=self.force)
        self.result = {**self.result, "mode": self.mode, "wheel": str(wheel), **cmd.to_dict()}
        self.result.pop("env")
        for note in cmd.notes:
            log.info(f"note: {note}")
        if self.mode == "unit":
            self._unit(ctx, cmd)
        elif self.mode in ("launch", "bench"):
            self._launch(ctx, cmd, wheel)
        return Done("checked" if self.mode == "check" else self.mode, {"sglang": cmd.sglang})

    def _unit(self, ctx: Context, cmd: Any) -> None:
        from build_kernel.stages.serve import jit_prewarm, unit

        serve = ctx.plan.recipe.serve
        name = unit.unit_name(ctx.plan.recipe.name)
        env = {**serve.env, **jit_prewarm.jit_env(ctx.plan, cmd.python, cmd.env)}
        unit.check_user(env, serve.user, ctx.plan.recipe.name, relaxed="DynamicUser" in serve.unit_relax)
        read, write = unit.folders(cmd, ctx.build_python(), env)
        text = unit.render_for(serve, cmd.argv, env, name=name, read=read, write=write,
                               description=f"sglang {cmd.sglang} serving {cmd.model} on {Path(self.result['wheel']).name}")
        self.result["unit"] = {"name": f"{name}.service", "text": text,
                               "verified": unit.verify(text, name, ctx.plan.env) or "systemd-analyze verify passed",
                               "exposure": unit.exposure(text, name, ctx.plan.env)}
        if serve.api_key_file and not Path(serve.api_key_file).exists():
            log.warn(f"the API key file {serve.api_key_file} does not exist yet: `build-kernel serve --install` makes "
                     "it (the unit does not start without it)")
        if self.unit_path is not None:
            unit.write(text, self.unit_path)
            self.result["unit"]["path"] = str(self.unit_path)

    def _audit(self, log_path: Path, start: int, asked: dict[str, Any]) -> dict[str, Any]:
        """sglang's own account of what it resolved; a fallback from what was asked fails (warns under --force)."""
        from build_kernel.errors import ServeError
        from build_kernel.stages.serve import audit

        with log_path.open("rb") as fh:
            fh.seek(start)
            found = audit.audit(fh.read().decode(errors="replace"), asked)
        log.info(found.summary())
        if found.failures and not self.force:
            more = f" (and {len(found.failures) - 1} more)" if found.failures[1:] else ""
            raise ServeError(f"the server does not run what the recipe asked: {found.failures[0]}{more}",
                             hint=f"see {log_path}; change [serve] args, or pass --force to serve anyway")
        for failure in found.failures:
            log.warn(f"FORCED: {failure}")
        return found.to_dict()

    def _launch(self, ctx: Context, cmd: Any, wheel: Path) -> None:
        from build_kernel.stages.serve import api_key, bench, checks, launch, ops, preflight

        serve = ctx.plan.recipe.serve
        log_path = ctx.plan.cache_dir / "logs" / f"serve-{ctx.plan.recipe.name}.log"
        start = log_path.stat().st_size if log_path.is_file() else 0  # the log is appended to
        # The op-count hook goes into the server's processes only (bench_serving, a client, keeps cmd.env).
        ops_dir = ctx.plan.cache_dir / "serve" / "ops" / ctx.plan.recipe.name
        env = ops.enable(cmd.env, ops_dir) if self.op_report else cmd.env
        counted: list[ops.Counts] = []
        before_smoke = (lambda: counted.append(ops.snapshot(ops_dir))) if self.op_report else None
        key = api_key.read(Path(serve.api_key_file)) if serve.api_key_file else None  # before anything starts
        with launch.running(cmd.argv, env, host=serve.host, port=serve.port, timeout=serve.health_timeout_s,
                            log_path=log_path, before_smoke=before_smoke, api_key=key) as (server, launched):
            self.result["server"] = launched.to_dict()
            self.result["resolved"] = self._audit(log_path, start, cmd.asked)
            if self.checks:  # against this very server, before the bench loads it
                self.result["checks"] = checks.run(self.checks, launched.url, cmd.env, log_path, api_key=key)
            if self.mode == "bench":
                rows = bench.run(cmd.python, cmd.env, host=serve.host, port=serve.port, model=cmd.model, serve=serve,
                                 out_dir=ctx.plan.cache_dir / "serve" / "bench", log_path=log_path, api_key=key)
                self.result["bench"] = rows
            if counted:  # after smoke (and bench), while the server still runs
                own = ops.wheel_sha256(preflight.wheel_record(wheel)[0])  # an op counts when its library is these
                self.result["ops"] = ops.report(counted[0], ops.snapshot(ops_dir), own)
                self.result["ops"]["folder"] = str(ops_dir)
                for line in ops.summary(self.result["ops"]):
                    log.info(line)
            if self.mode == "bench":
                out = wheel.with_name(wheel.name + ".serve-bench.json")
                bench.write(out, rows, provenance=preflight.wheel_record(wheel)[1], launched=launched.to_dict(),
                            argv=cmd.argv, resolved=self.result["resolved"], ops=self.result.get("ops"))
                self.result["bench_file"] = str(out)
            elif not self.smoke_only:
                log.info(f"serving on {launched.url} (Ctrl-C stops it)")
                launch.serve_foreground(server)
