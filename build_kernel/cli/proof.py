"""`prune-proof`: a pruned wheel against an unpruned build of the same commit and archs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from build_kernel.cli.options import WHEEL, Options, emit, shared_options
from build_kernel.log import styled

if TYPE_CHECKING:
    from build_kernel.stages.verify.prune_proof import Proof


def _table(proof: Proof, outputs: dict[str, Any] | None = None) -> Table:
    table = Table("library", "result")
    for lib in proof.libraries:
        table.add_row(lib.path, f"{' '.join(lib.archs)}: functions pruned {lib.functions_pruned}, unpruned "
                                f"{lib.functions_unpruned}; identical {lib.identical}, missing {len(lib.missing)}, "
                                f"differing {len(lib.differing)}; removed by pruning {lib.removed}")
        if lib.fp4_pruned:
            table.add_row("  FP4 SASS", ", ".join(f"{k} {v} vs {lib.fp4_unpruned.get(k, 0)}"
                                                  for k, v in lib.fp4_pruned.items()))
    for failure in proof.failures:
        table.add_row(styled("FAIL", "red"), failure)
    for same in (outputs or {}).get("same_outputs", []):
        table.add_row("  same outputs", f"{same['arch']} {same['function']}: other SASS, identical bits on "
                                        f"{same['cases']} cases run on the GPU")
    table.add_row("result", styled("passed", "green") + ": pruning removed only functions, and changed none"
                  if proof.passed else styled(outputs["verdict"] if outputs else "failed", "red"))
    return table


@click.command("prune-proof")
@click.argument("pruned", type=WHEEL)
@click.option("--against", "unpruned", required=True, type=WHEEL,
              help="The unpruned wheel: the same commit and archs, built without the arch-pruning patch.")
@click.option("--across-tus", is_flag=True,
              help="Match file-local (anonymous-namespace, static) functions across translation units: for a "
                   "wheel whose sources were compiled in batches (unity files), which nvcc names after the batch.")
@click.option("--same-outputs", "outputs_file", type=click.Path(path_type=Path), default=None,
              help="A GPU run's record of differing functions compared bit for bit (bench/pruning/"
                   "fp8_kernels_bitwise.py): the verdict then says 'different code, same outputs on N cases', "
                   "which is still no pass.")
@shared_options
@click.pass_obj
def prune_proof_cmd(opts: Options, pruned: Path, unpruned: Path, across_tus: bool, outputs_file: Path | None) -> None:
    """Prove PRUNED holds only functions of UNPRUNED, with the same SASS, and as many FP4 opcodes
    (the recipe's [verify] fp4_sass; without --recipe no FP4 counts are compared)."""
    from build_kernel import recipe
    from build_kernel.stages.verify import prune_proof, prune_proof_outputs

    compared = prune_proof_outputs.load(outputs_file) if outputs_file else []  # a bad file fails before the work
    patterns = recipe.load(opts.recipe).verify.fp4_sass if opts.recipe else ()
    proof = prune_proof.prove(pruned, unpruned, patterns, env=opts.env, across_tus=across_tus)
    outputs = prune_proof_outputs.judge(proof, compared)
    emit(opts, {**proof.to_dict(), **outputs}, _table(proof, outputs))
    if not proof.passed:
        sys.exit(7)


COMMANDS = (prune_proof_cmd,)
