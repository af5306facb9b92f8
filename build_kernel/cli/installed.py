"""`doctor --installed`: the kernel package an interpreter would import, judged from its files."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from build_kernel.archs import parse_arch_list
from build_kernel.cli.options import Options, emit
from build_kernel.log import styled
from build_kernel.plan import default_cache_dir
from build_kernel.stages.verify.installed import Diagnosis, examine

UNHEALTHY = 7  # verify's exit code


def _table(d: Diagnosis) -> Table:
    table = Table("what", "found", show_header=False)
    table.add_row("python", d.python)
    o = d.origin
    if o is not None:
        table.add_row("distribution", f"{o.distribution} {o.version} from {o.detail} ({o.root})")
        table.add_row("RECORD", f"{o.checked} files hashed: " + (
            "all match" if not (o.changed or o.missing) else f"{len(o.changed)} differ, {len(o.missing)} missing"))
    table.add_row("torch", f"{d.torch.version} (CUDA {d.torch.cuda or 'none'})" if d.torch.version else "MISSING")
    table.add_row("CUDA linked", ", ".join(f"{n} (CUDA {m})" for n, m in sorted(d.cuda_linked.items())) or "-")
    b = d.built_for
    table.add_row("built for torch", f"pin {b.pin or '-'}; provenance {b.provenance or '-'}; "
                                     f"{len(b.lacking)} of {b.looked_up} torch symbols missing here")
    table.add_row("archs", f"{', '.join(d.archs) or '-'} ({d.archs_from})")
    for lib in d.libraries:
        cover = ("" if not lib.applies else f"; missing {', '.join(lib.missing)}" if lib.missing else
                 f"; JIT from PTX {', '.join(lib.jit)}" if lib.jit else "")
        table.add_row("library", f"{lib.path}: SASS {' '.join(lib.archs) or '-'}; PTX {' '.join(lib.ptx) or '-'}{cover}")
    for f in d.fp4:
        table.add_row("FP4", f"{f.arch}: {f.how}: {f.detail}")
    if d.sglang:
        table.add_row("sglang", f"{d.sglang}: " + (f"imports {', '.join(sorted(d.api_missing))} it lacks"
                                                 if d.api_missing else "every name it imports is there")
                      + (f"; kernels: {d.sglang_kernels}" if d.sglang_kernels else ""))
    for p in d.problems:
        table.add_row(styled("problem", "red"), f"{d.label} {p.text}: {p.fix or d.fix}")  # each text continues the name
    for st in d.stale:
        table.add_row(styled("stale", "red"), f"{st.text}: {st.command}")
    for note in d.notes:
        table.add_row("note", note)
    table.add_row("recipe", f"{d.recipe} ({d.recipe_why})")
    return table


def doctor_installed(opts: Options, python: str | None) -> None:
    """Print the diagnosis (JSON or a table ending in the verdict); exit 7 unless healthy."""
    archs = parse_arch_list(opts.arch) if opts.arch else None
    cache = opts.cache_dir or Path(opts.env.get("BUILD_KERNEL_CACHE_DIR") or default_cache_dir(opts.env))
    d = examine(python or sys.executable, archs=archs, env=opts.env, recipe_name=opts.recipe,
                counts_dir=cache / "sass-counts")
    emit(opts, d.to_dict(), _table(d))
    if not opts.json:
        click.echo(d.verdict())
    if not d.healthy:
        sys.exit(UNHEALTHY)
