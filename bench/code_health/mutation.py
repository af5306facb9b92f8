"""Mutation testing of the safety logic (mutmut 3, configured in pyproject [tool.mutmut]).

    python bench/code_health/mutation.py run [--max-children N] [--deadline S] [--survivors] [--extended]
    python bench/code_health/mutation.py report --label before|after [--out bench/code_health/results/mutation.json]
    python bench/code_health/mutation.py survivors            # one line per mutant in scope not killed

`run` mutates only the functions in SCOPE (the all-or-nothing patch series, the patched
tree's partial folder / lock / marker, the fetch lock, publish's install-back import check
and static-folder lock + restore + sweep, recipe validation, atomic writes; since 2026-12-07 also
the static index pages, the index page's hashes, the full-disk classification and the network
timeouts) and runs the fast tests that [tool.mutmut] selects; `--modules` only some of them. `--survivors` re-runs only the mutants in scope that were not
killed last time (survived, no tests, timeout, not checked): a killed mutant stays killed
when tests are only added. `--deadline` stops mutmut (as Ctrl-C does) after S seconds.
mutmut 3 does not mutate decorated functions: `atomic.folder` and publish's `_dir_lock`
(both @contextmanager) are covered by tests/test_safety.py (and checked by hand: see
"manual" in the results), not by this score. mutmut links a test to a function only when
the test calls it in-process, so a test that reaches code only through a subprocess
(`run_cli`) is never run against that code's mutants.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from needs import need

MUTANTS = ROOT / "mutants"
RESULTS = ROOT / "bench" / "code_health" / "results" / "mutation.json"

# module -> the functions (mutmut's mangled names) whose mutants count: the safety logic.
SCOPE: dict[str, list[str]] = {
    "build_kernel.atomic": ["x_*"],
    "build_kernel.stages.patch.apply": ["x_apply_series", "x_restore"],
    "build_kernel.stages.fetch.workspace": ["x_prepare", "x__make_atomically"],
    "build_kernel.stages.fetch.remote": ["x_ensure_commit"],
    "build_kernel.stages.fetch.mirror": ["x_init", "x_has_commit", "x_checkout"],
    "build_kernel.stages.publish.install_back": ["x_install_back", "x__import_check", "x__pip_env"],
    "build_kernel.stages.publish.backends": ["x__tree", "x__restore", "x__sweep", "xǁStaticDirBackendǁput",
                                             "xǁStaticDirBackendǁ_add"],
    "build_kernel.recipe.problems": ["x*"],
    "build_kernel.recipe.rules": ["x_check_fp4"],
    # Grown 2026-12-07 (issue 68 item 7) to what crash, disk and network faults touch: the static index's pages
    # (rewritten whole, by rename), the index page's hashes (the already-there check), a full disk told apart
    # from other failures, the network timeouts and a transfer that broke.
    "build_kernel.static_index": ["x_*"],
    "build_kernel.stages.publish.index_page": ["x_*"],
    "build_kernel.disk_space": ["x__chain", "x__log_says_full", "x_full_path", "x_disk_full", "x_existing"],
    "build_kernel.network": ["x__seconds", "x_settings", "x_broken_transfer"],
}
# `--extended`: their neighbours too (about 450 mutants more; an hour on 2 cores).
EXTENDED: dict[str, list[str]] = {
    "build_kernel.stages.patch.apply": ["x_check_series"],
    "build_kernel.stages.fetch.workspace": ["x_check_applicability"],
    "build_kernel.stages.publish.install_back": ["x__pip_install"],
    "build_kernel.stages.publish": ["x_publish"],
    "build_kernel.recipe.load": ["x__find"],
}
GROUPS = {  # how the report adds modules up
    "build_kernel.recipe.problems": "build_kernel.recipe",
    "build_kernel.recipe.rules": "build_kernel.recipe",
    "build_kernel.recipe.load": "build_kernel.recipe",
}
STATUS = {0: "survived", 1: "killed", 3: "killed", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked", -9: "segfault",
          -11: "segfault"}


def scope(extended: bool = False) -> dict[str, list[str]]:
    if not extended:
        return SCOPE
    return {m: SCOPE.get(m, []) + EXTENDED.get(m, []) for m in {**SCOPE, **EXTENDED}}


def patterns(extended: bool = False) -> list[str]:
    return [f"{module}.{func}__mutmut_*" for module, funcs in scope(extended).items() for func in funcs]


def in_scope(name: str, extended: bool = False) -> bool:
    module, _, mutant = name.rpartition(".")
    funcs = scope(extended).get(module)
    return funcs is not None and any(fnmatch.fnmatchcase(mutant, f"{f}__mutmut_*") for f in funcs)


def results(extended: bool = False) -> dict[str, int | None]:
    """Every mutant in scope -> its exit code (None: not checked), from mutmut's .meta files."""
    found: dict[str, int | None] = {}
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if in_scope(name, extended):
                found[name] = code
    return found


def status(code: int | None) -> str:
    return STATUS.get(code, "suspicious")


def run(args: argparse.Namespace) -> int:
    names = [n for n in patterns(args.extended) if not args.modules or n.rsplit(".", 1)[0] in args.modules]
    if args.survivors:
        names = sorted(n for n, c in results(args.extended).items() if status(c) != "killed"
                       and (not args.modules or n.rsplit(".", 1)[0] in args.modules))
        if not names:
            print("no survivors in scope: nothing to run")
            return 0
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *names]
    print(f"mutmut run: {len(names)} {'mutants' if args.survivors else 'patterns'}, {args.max_children} children",
          flush=True)
    MUTANTS.mkdir(exist_ok=True)
    with open(MUTANTS / "run.log" if args.log is None else args.log, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=args.deadline)
        except subprocess.TimeoutExpired:
            print(f"deadline of {args.deadline:g} s: stopping mutmut (finished results are kept)", flush=True)
            os.killpg(proc.pid, signal.SIGINT)
            try:
                return proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                return proc.wait()


def summary(extended: bool) -> dict[str, dict[str, object]]:
    per: dict[str, Counter[str]] = {}
    for name, code in results(extended).items():
        module = name.rpartition(".")[0]
        per.setdefault(GROUPS.get(module, module), Counter())[status(code)] += 1
    out: dict[str, dict[str, object]] = {}
    for module, counts in sorted(per.items()):
        total = sum(counts.values())
        checked = total - counts["not checked"]
        out[module] = {"killed": counts["killed"], "total": total, "checked": checked,
                       "score": round(counts["killed"] / checked, 3) if checked else None,
                       **{k: v for k, v in sorted(counts.items()) if k != "killed"}}
    return out


def report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.is_file() else {}
    modules = summary(args.extended)
    killed = sum(int(m["killed"]) for m in modules.values())  # type: ignore[call-overload]
    total = sum(int(m["total"]) for m in modules.values())  # type: ignore[call-overload]
    data["tool"] = f"mutmut {_mutmut_version()}"
    data["scope"] = scope(args.extended)
    data[args.label] = {
        "date": datetime.date.today().isoformat(),
        "note": args.note,
        "killed": killed,
        "total": total,
        "modules": modules,
        "survivors": sorted(n for n, c in results(args.extended).items() if status(c) != "killed"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    for module, m in modules.items():
        print(f"{module:45s} {m['killed']:>4}/{m['total']:<4} killed  ({m['checked']} checked)")
    print(f"{'all':45s} {killed:>4}/{total:<4} killed -> {out}")
    return 0


def survivors(args: argparse.Namespace) -> int:
    for name, code in sorted(results(args.extended).items()):
        if status(code) != "killed":
            print(f"{status(code):12s} {name}")
    return 0


def _mutmut_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mutmut")
    except PackageNotFoundError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    r.add_argument("--deadline", type=float, default=None, help="stop after this many seconds")
    r.add_argument("--survivors", action="store_true", help="only the mutants in scope not killed last time")
    r.add_argument("--extended", action="store_true", help="SCOPE and EXTENDED")
    r.add_argument("--modules", type=lambda v: v.split(","), default=[],
                   help="only these modules of the scope (comma-separated): a subset that fits the time there is")
    r.add_argument("--log", default=None, help="mutmut's output (default: mutants/run.log)")
    r.set_defaults(func=run)
    p = sub.add_parser("report")
    p.add_argument("--label", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--extended", action="store_true")
    p.set_defaults(func=report)
    s = sub.add_parser("survivors")
    s.add_argument("--extended", action="store_true")
    s.set_defaults(func=survivors)
    args = parser.parse_args()
    if args.command == "run":
        need("mutmut", extra="mutate", why="it runs mutmut over the safety logic")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
