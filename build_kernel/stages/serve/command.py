"""The server's command line, checked: preflight, sglang's parser, the checkpoint, per-arch refusals."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import log
from build_kernel.errors import ServeError
from build_kernel.plan import Plan, recipe_arg
from build_kernel.stages.serve import (
    api,
    api_key,
    audit,
    backends,
    checkpoint,
    environment,
    flags,
    jit_prewarm,
    preflight,
    sglang_dist,
)


@dataclass
class ServeCommand:
    argv: list[str]
    env: dict[str, str]
    model: str
    python: str
    notes: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)
    preflight: dict[str, Any] = field(default_factory=dict)
    sglang: str = ""
    sglang_from: dict[str, str] = field(default_factory=dict)
    asked: dict[str, Any] = field(default_factory=dict)  # what the startup-log audit holds sglang to

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _model(plan: Plan, override: str | None) -> str:
    model = override or plan.recipe.serve.model  # never empty: ServeStage.skip() stops a serve without a model
    looks_local = model.startswith(("/", ".", "~")) or Path(model).exists()
    if looks_local and not Path(model).expanduser().is_dir():
        raise ServeError(f"model folder {model} does not exist", hint="pass --model with a checkpoint folder or a hub id")
    return str(Path(model).expanduser().resolve()) if looks_local else model


def _list_archs(so: Path, env: dict[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from build_kernel.stages.verify import cubins

    found = cubins.listing(so, cubins.cuobjdump(env), env)
    return found.cubins, found.ptx


def _refuse_or_force(problems: list[str], force: bool, forced: list[str]) -> None:
    if not problems:
        return
    if not force:
        more = f" (and {len(problems) - 1} more)" if problems[1:] else ""
        raise ServeError(f"refusing {problems[0]}{more}",
                         hint="change [serve] args, or pass --force to serve anyway, at your own risk")
    for p in problems:
        log.warn(f"FORCED: {p}")
        forced.append(p)


def prepare(plan: Plan, build_python: str, wheel: Path, *, model: str | None = None, force: bool = False) -> ServeCommand:
    serve = plan.recipe.serve
    python = environment.python_for(plan, build_python)
    env = environment.server_env(plan)
    env.update(jit_prewarm.jit_env(plan, python, env))  # the cache `serve --install` prewarmed
    module = environment.kernel_module(plan)
    installed = environment.inspect(python, module, env)
    choice = sglang_dist.choose(plan)
    pre = preflight.check(wheel, module, installed, sglang=choice, env=env, force=force,
                          recipe=recipe_arg(plan.recipe))
    cmd = ServeCommand([], env, _model(plan, model), python, notes=[choice.describe(), *(n for n in pre.notes if n)],
                       preflight=pre.to_dict(), sglang_from=choice.to_dict())
    root = Path(installed.sglang_root) if installed.sglang_root else None
    if root and (gaps := api.missing(wheel, module, root, cache_dir=plan.cache_dir / "serve" / "api")):
        shown = ", ".join(f"{name} ({files[0]})" for name, files in sorted(gaps.items())[:4])
        _refuse_or_force([f"sglang {installed.sglang} with {wheel.name}: sglang imports {len(gaps)} name(s) on CUDA "
                          f"that this {module} does not define, so the server would die with an ImportError: {shown}"
                          f"{', ...' if len(gaps) > 4 else ''}; pair the kernel with the sglang of its own commit"],
                         force, cmd.forced)
    args = ["--model-path", cmd.model, "--host", serve.host, "--port", str(serve.port), *serve.args]
    with flags.Parser(python, env, cache_dir=plan.cache_dir / "serve" / "flags", sglang_root=root) as parser:
        if serve.api_key_file:  # this sglang must take --api-key (the key itself is added by the wrapper)
            parser.parse([*args, "--api-key", "read-from-api_key_file"])
        parsed = parser.parse(args)
        cmd.sglang = parsed.sglang
        if Path(cmd.model).is_dir():
            advice = checkpoint.advise(checkpoint.read(Path(cmd.model)), parsed.given("quantization"),
                                       parsed.given("kv_cache_dtype"), parsed.namespace)
            _refuse_or_force(advice.conflicts, force, cmd.forced)
            if advice.add:
                args += advice.add
                cmd.added, cmd.notes = advice.add, [*cmd.notes, *advice.reasons]
                parsed = parser.parse(args)
        else:
            cmd.notes.append(f"{cmd.model} is not a local folder: its quantization and KV-cache scales were not checked")
    wheel_based = backends.wheel_refusals(parsed, plan.archs, wheel, module, lambda so: _list_archs(so, env))
    _refuse_or_force([r.line() for r in [*backends.refusals(parsed, plan.archs), *wheel_based]], force, cmd.forced)
    if parsed.given("speculative_algorithm") == "NEXTN":
        cmd.notes.append("--speculative-algorithm NEXTN is accepted: sglang runs it as EAGLE with the checkpoint's "
                         "MTP layers as the draft model")
    cmd.notes += [f"{short} is taken as {full} (argparse accepts unique prefixes)"
                  for short, full in parsed.abbreviations.items()]
    cmd.asked = audit.asked(args, parsed.namespace, parsed.abbreviations)
    cmd.argv = [python, "-m", serve.module, *args]
    if serve.api_key_file:
        # The key goes in through the wrapper, inside the server's process: never a word of its command line.
        cmd.argv = [python, str(api_key.WRAPPER), serve.module, *args]
        cmd.env[api_key.FILE_VAR] = serve.api_key_file
    return cmd
