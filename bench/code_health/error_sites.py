"""Which user-facing error sites in build_kernel/ does the test suite reach?

Sites: `raise` of a domain error (BuildKernelError and kinds, click.UsageError) or of a helper
returning one (a function annotated `-> ...Error`, or a `type[...Error]` parameter), each `return`
of one (pure relays like `Target.fail` left out), recipe `problems.add(`, `problems.append(`
(preflight, doctor, plan, install-back), verify `report.failures.append(`. Reached: coverage saw
the statement run, CLI subprocesses included (COVERAGE_PROCESS_START + a .pth, removed after);
inside a lambda: the lambda ran (its entry arc in the branch data).

    python bench/code_health/error_sites.py [--markers EXPR ("": all, ~25 min)] [--tests PATH...]
        [--data .coverage [.coverage ...]] [--save-data F] [--json]

`--tests` runs only those test files (e.g. the ones added since a saved run); `--data` with several files
counts a site reached when any of them saw it (coverage combine), e.g. the whole suite's saved data and
that of the files added since.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from needs import need

PKG = ROOT / "build_kernel"
OUT = ROOT / "bench" / "code_health" / "results" / "error_sites.json"
DEFAULT_MARKERS = "not slow and not network"
DOMAIN = {"BuildKernelError", "RecipeError", "ToolchainError", "FetchError", "PatchError", "BuildError",
          "VerifyError", "PublishError", "ServeError", "NotBuiltYet"}
CLICK = {"UsageError", "BadParameter", "BadOptionUsage", "BadArgumentUsage", "ClickException"}
FuncNode = ast.FunctionDef | ast.AsyncFunctionDef
# Runs `coverage run` with COVERAGE_PROCESS_START set only after start-up, so the .pth starts
# coverage in the children and not a second time in this process.
LAUNCH = ("import os, sys; os.environ['COVERAGE_PROCESS_START'] = sys.argv[1]; "
          "from coverage.cmdline import main; sys.exit(main(sys.argv[2:]))")
PTH = "import os; os.environ.get('COVERAGE_PROCESS_START') and __import__('coverage').process_startup()\n"


@dataclass
class Site:
    file: str
    line: int
    kind: str
    text: str
    first: int  # the statement's span, which coverage reports by its first line
    last: int
    lambda_line: int = 0
    reached: bool = False


def _names(node: ast.AST | None) -> set[str]:  # in an annotation: `PublishError | str`
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Depth first, in source order; past strings that are no message: comparisons, keys, separators."""
    if isinstance(node, ast.Compare):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        if not ((isinstance(node, ast.Subscript) and child is node.slice)
                or (isinstance(node, ast.Attribute) and isinstance(child, ast.Constant))):
            yield from _walk(child)


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # f"{what}: {program} not found" as written
        return "".join(str(v.value) if isinstance(v, ast.Constant) else
                       "{" + ast.unparse(v.value) + "}" if isinstance(v, ast.FormattedValue) else "" for v in node.values)
    return None


def _first_literal(nodes: list[ast.AST]) -> str | None:
    return next((t for n in nodes for sub in _walk(n) if (t := _literal(sub)) is not None), None)


class Finder(ast.NodeVisitor):
    def __init__(self, rel: str, helpers: set[str]) -> None:
        self.rel, self.helpers = rel, helpers
        self.sites: list[Site] = []
        self.funcs: list[FuncNode] = []
        self.stmt: ast.stmt | None = None
        self.lam = 0

    def visit(self, node: ast.AST) -> None:
        """Track the innermost statement, function and lambda around each node."""
        state = self.stmt, self.lam, len(self.funcs)
        self.stmt = node if isinstance(node, ast.stmt) else self.stmt
        self.lam = node.lineno if isinstance(node, ast.Lambda) else self.lam
        self.funcs += [node] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
        super().visit(node)
        self.stmt, self.lam, self.funcs = state[0], state[1], self.funcs[:state[2]]

    def _params(self) -> dict[str, ast.arg]:
        a = self.funcs[-1].args if self.funcs else None
        return {p.arg: p for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if p} if a else {}

    def _locals(self, before: int) -> dict[str, ast.AST]:
        """Local name -> its last value assigned before line `before`."""
        assigns = sorted((n for n in ast.walk(self.funcs[-1]) if isinstance(n, ast.Assign) and n.lineno < before),
                         key=lambda n: n.lineno) if self.funcs else []
        return {t.id: n.value for n in assigns for t in n.targets if isinstance(t, ast.Name)}

    def _kind(self, call: ast.Call) -> str | None:
        f = call.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name in CLICK and isinstance(f, ast.Attribute) and ast.unparse(f.value) == "click":
            return "usage"
        if name in DOMAIN:
            return "raise"
        typed = _names(p.annotation) if (p := self._params().get(name)) else set()
        return "raise-helper" if name in self.helpers or ("type" in typed and DOMAIN & typed) else None

    def _text(self, call: ast.Call, args: list[ast.AST]) -> str:
        if (lit := _first_literal(args)) is not None:
            return lit
        local = self._locals(call.lineno)  # `message = f"..."` then `error(redact(message, secrets))`
        for n in [*args, *(b for a in args if isinstance(a, ast.Call) for b in a.args)]:
            if isinstance(n, ast.Name) and n.id in local and (lit := _first_literal([local[n.id]])) is not None:
                return lit
        return ast.unparse(call)

    def _add(self, node: ast.AST, kind: str, text: str) -> None:
        stmt, text = self.stmt or node, " ".join(text.split())
        self.sites.append(Site(self.rel, node.lineno, kind, text if len(text) <= 100 else text[:99] + "…",  # type: ignore[attr-defined]
                               stmt.lineno, stmt.end_lineno or stmt.lineno, self.lam))  # type: ignore[attr-defined]

    def visit_Raise(self, node: ast.Raise) -> None:
        if isinstance(call := node.exc, ast.Call) and (kind := self._kind(call)):
            self._add(node, kind, self._text(call, [*call.args, *(k.value for k in call.keywords)]))
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        call = node.value
        if isinstance(call, ast.Call) and self._kind(call) in ("raise", "raise-helper"):
            args: list[ast.AST] = [*call.args, *(k.value for k in call.keywords)]
            used = {n.id for a in args for n in ast.walk(a) if isinstance(n, ast.Name)}
            relay = _first_literal(args) is None and not (used & (set(self._locals(node.lineno)) - set(self._params())))
            if not relay:  # `return credentials.redacted_error(self.secrets, message, hint)` only passes through
                self._add(node, "return", self._text(call, args))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "add" and ast.unparse(f.value) == "problems" and len(node.args) >= 3:
            key, msg = (_literal(a) or ast.unparse(a) for a in node.args[1:3])
            self._add(node, "recipe-problem", f"{key}: {msg}")
        elif isinstance(f, ast.Attribute) and f.attr == "append" and node.args:
            target = f.value
            is_list = (isinstance(target, ast.Name) and target.id == "problems") or (
                isinstance(target, ast.Subscript) and _literal(target.slice) == "problems")
            kind = ("verify-failure" if isinstance(target, ast.Attribute) and target.attr == "failures"
                    else {"toolchain.py": "preflight", "cli/info.py": "doctor"}.get(self.rel, "problem") if is_list else None)
            if kind:
                self._add(node, kind, self._text(node, list(node.args)))
        self.generic_visit(node)


def inventory() -> list[Site]:
    trees = {p: ast.parse(p.read_text(), str(p)) for p in sorted(PKG.rglob("*.py"))}
    helpers = {n.name for t in trees.values() for n in ast.walk(t)
               if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and DOMAIN & _names(n.returns)}
    finders = [Finder(path.relative_to(PKG).as_posix(), helpers) for path in trees]
    for finder, tree in zip(finders, trees.values(), strict=True):
        finder.visit(tree)
    return sorted((s for f in finders for s in f.sites), key=lambda s: (s.file, s.line))


def measure(markers: str, tests: list[str], tmp: Path) -> tuple[Path, int]:
    """Run pytest under coverage, subprocesses too; the combined data file and pytest's exit code."""
    rc = tmp / "coveragerc"
    # No `sigterm = true`: its handler deadlocks a spawned Pool worker that Pool.terminate() stops.
    rc.write_text(f"[run]\nsource = {PKG}\nbranch = true\nparallel = true\n"
                  f"data_file = {tmp / '.coverage'}\n"
                  "disable_warnings = no-data-collected, module-not-measured, module-not-imported\n")
    # Run this with .venv's python. One file per run: a run that ends removes its own, not a parallel run's.
    pth = Path(sysconfig.get_paths()["purelib"]) / f"zz_error_sites_coverage_{os.getpid()}.pth"
    cmd = [sys.executable, "-c", LAUNCH, str(rc), "run", f"--rcfile={rc}", "--parallel-mode",
           "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-m", markers] if markers else []), *tests]
    pth.write_text(PTH)
    try:
        code = subprocess.run(cmd, cwd=ROOT, stdout=sys.stderr, check=False).returncode
    finally:
        pth.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "coverage", "combine", "-q", f"--rcfile={rc}"], cwd=ROOT, check=True)
    return tmp / ".coverage", code


def combine(files: list[Path], tmp: Path) -> Path:
    """One data file of several saved ones (their copies: `coverage combine` consumes what it reads)."""
    if len(files) == 1:
        return files[0]
    copies = [tmp / f".coverage.given{i}" for i in range(len(files))]
    for given, copy in zip(files, copies, strict=True):
        shutil.copyfile(given, copy)
    rc = tmp / "combinerc"
    rc.write_text(f"[run]\nbranch = true\ndata_file = {tmp / '.coverage'}\n")
    subprocess.run([sys.executable, "-m", "coverage", "combine", "-q", f"--rcfile={rc}", *map(str, copies)],
                   cwd=ROOT, check=True)
    return tmp / ".coverage"


def mark(sites: list[Site], data_file: Path) -> bool:
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    lines: dict[str, set[int]] = defaultdict(set)
    entries: dict[str, set[int]] = defaultdict(set)  # -first line of every code object that ran
    for f in data.measured_files():
        rel = f.replace("\\", "/").rpartition("/build_kernel/")[2]
        lines[rel] |= set(data.lines(f) or ())
        entries[rel] |= {-a for a, _ in data.arcs(f) or () if a < 0}
    for s in sites:
        s.reached = (s.lambda_line in entries[s.file] if s.lambda_line and data.has_arcs()
                     else any(n in lines[s.file] for n in range(s.first, s.last + 1)))
    return data.has_arcs()


def tally(sites: list[Site], key: str) -> dict[str, dict[str, int]]:
    names = sorted({getattr(s, key) for s in sites})
    return {n: {"total": sum(getattr(s, key) == n for s in sites),
                "reached": sum(getattr(s, key) == n and s.reached for s in sites)} for n in names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markers", default=DEFAULT_MARKERS, help='pytest -m expression; "" runs every test')
    ap.add_argument("--tests", nargs="+", default=[], help="test files to run (default: the whole suite)")
    ap.add_argument("--data", type=Path, nargs="+", help="combined .coverage files to use instead of running pytest")
    ap.add_argument("--save-data", type=Path, help="keep the combined .coverage file here (for --data)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--json", action="store_true", help="print the JSON result instead of the tables")
    ap.add_argument("--note", default="", help="what the data rests on (with --data: which runs, which tests)")
    args = ap.parse_args()
    need("coverage", extra="bench", why="it counts the error sites the tests reach from coverage's data")

    sources = {p: p.read_bytes() for p in PKG.rglob("*.py")}
    sites = inventory()
    tmp = Path(tempfile.mkdtemp(prefix="error-sites-"))
    try:
        data_file, pytest_exit = (combine(args.data, tmp), None) if args.data else measure(args.markers, args.tests, tmp)
        if args.save_data and not args.data:
            shutil.copyfile(data_file, args.save_data)
        arcs = mark(sites, data_file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Lines measured in a file edited meanwhile may not be the lines inventoried: rerun then.
    changed = sorted(p.relative_to(PKG).as_posix() for p, b in sources.items() if not p.is_file() or p.read_bytes() != b)
    unreached = [s for s in sites if not s.reached]
    result: dict[str, Any] = {
        "markers": None if args.data else args.markers, "tests": args.tests or None, "note": args.note,
        "data": [str(d) for d in args.data] if args.data else None,
        "pytest_exit": pytest_exit, "branch_data": arcs, "changed_during_run": changed,
        "total": len(sites), "reached": len(sites) - len(unreached),
        "by_module": tally(sites, "file"), "by_kind": tally(sites, "kind"),
        "unreached": [{"site": f"build_kernel/{s.file}:{s.line}", "kind": s.kind, "text": s.text} for s in unreached],
        "sites": [{k: v for k, v in asdict(s).items() if k not in ("first", "last")} for s in sites],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    if changed:
        print(f"warning: edited during the run, their results may be off: {', '.join(changed)}", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(f"user-facing error sites reached: {result['reached']}/{result['total']}  "
          f"(markers: {result['markers']!r}, pytest exit {pytest_exit})")
    for title, table in (("module", result["by_module"]), ("kind", result["by_kind"])):
        print(f"\n{title:<34} reached/total", *(f"{n:<34} {r['reached']:>3}/{r['total']}" for n, r in table.items()), sep="\n")
    print(f"\nunreached ({len(unreached)}):", *(f"  build_kernel/{s.file}:{s.line}  {s.kind:<14} {s.text}" for s in unreached), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
