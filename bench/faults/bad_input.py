"""Generated bad input (issue 68 item 5): recipes and command lines made by Hypothesis, fed to the real CLI.

    python bench/faults/bad_input.py [--cases 10000] [--seed 68] [--out bench/faults/results/bad_input.json]

Each case is a recipe (an overlay of the shipped demo recipe with keys set to generated values, a chain of
`extends`, broken TOML, a whole recipe with sections replaced) run through `build-kernel plan --offline`, or a
command line drawn from the real click commands' options (only commands that change nothing: plan, the
pipeline with --dry-run, recipes, verify/prune-proof of a wheel that is no wheel, cache stats). Every case runs
through click's CliRunner, i.e. the CLI's one exit (cli/output.py), in a scratch folder with its own cache.

A case is *accepted* (exit 0), *rejected* (a documented exit code, every line of the message `error: ...`), or a
*traceback* (exit 1 with "unexpected error", or a Python traceback in the output): a bug. The rules written
before any case ran: a rejection line must name a key or option (`[table] key`, `table.key`, `--option`, a file
or a recipe) and say what to do (a parenthesised fix, `did you mean`, `e.g.`); the count of lines that do not is
reported, not dropped. The distinct messages are counted after replacing what was generated in them (quoted
values, numbers, the scratch path) by placeholders.

The suite runs a few hundred of the same cases (tests/test_bad_input_generated.py, fixed seed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from build_kernel.recipe.model import SECTIONS, Dep, Expectation, LibraryRule, SystemDep

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEMO = tomllib.loads((ROOT / "recipes" / "demo.toml").read_text())
EXIT_CODES = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}  # errors.py's kinds, and click's usage error (2)

# ---- values ------------------------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_SCALARS = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
                     _TEXT, st.dates().map(lambda d: d), st.sampled_from(["", " ", "auto", "true", "1", "-1"]))
GENERIC = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "x-y", "NAME"]), inner, max_size=2)),
    max_leaves=5)

ARCH_WORDS = ["12.0a", "12.0", "12.0f", "12.1a", "9.0a", "9.0", "8.0", "8.9", "10.0a", "10.3a", "sm_120a",
              "sm120a", "120a", "120", "compute_90a", "9.0a+PTX", "12.0a;9.0a", "12.0a 9.0a", "7.5", "3.0", "99.9a",
              "", " ", "a", "12.0b", "-12.0a", "1e2", "12.0a,", "all", "native", "12.0+PTX", "9.0 a", "nan"]
ARCHS = st.one_of(st.lists(st.sampled_from(ARCH_WORDS), max_size=4), st.sampled_from(ARCH_WORDS),
                  st.lists(GENERIC, max_size=2))
SERIES_WORDS = ["minikernel", "sm120", "nope", "", ".", "..", "../minikernel", "/etc", "a/b", "mini kernel",
                "minikernel/", "MINIKERNEL", "\u00e9", "-x"]
VERSION_WORDS = ["v1", "v2", "v99", "", "..", "v1/..", "V1", "1", "v1 ", "latest"]
COMMIT_WORDS = ["e2c14057ca95ef5a39d01951e74bd3b2946b1812", "e2c14057", "main", "HEAD", "", "g" * 40,
                "E2C14057CA95EF5A39D01951E74BD3B2946B1812", "0" * 40, "0" * 41, "v1.0"]
REPO_WORDS = ["example:minikernel", "example:nope", "example:", "", "relative/path", "/nonexistent/repo",
              "https://example.invalid/x.git", "git@host:x.git", "file:///nonexistent", "example:minidep", "~"]

# Pools for keys whose values have a shape of their own (the rest take GENERIC or the field's type).
POOLS: dict[str, st.SearchStrategy[Any]] = {
    "arch": ARCHS, "when_asked": ARCHS, "not_loaded_on": ARCHS,
    "series": st.sampled_from(SERIES_WORDS) | _TEXT, "version": st.sampled_from(VERSION_WORDS) | _TEXT,
    "commit": st.sampled_from(COMMIT_WORDS), "tag": st.sampled_from(COMMIT_WORDS), "repo": st.sampled_from(REPO_WORDS),
    "jobs": st.sampled_from(["auto", "AUTO", "0", "-1", "", "4"]) | st.integers(-5, 10**6),
    "fp4": st.sampled_from(["required", "yes", "", "false"]) | st.booleans(),
    "cuda": st.sampled_from(["13.0", "12.8", "13", "cu130", "", "99.0", "13.0.1"]),
    "torch": st.sampled_from(["existing", "nightly", "2.9.0", "latest", "", "2.9.0+cu130", ">=2.9"]),
    "cmake": st.sampled_from([">=3.26", "3.26", ">=", "~=3", "", ">=99"]),
    "python": st.sampled_from(["3.11", "3", "", "python3"]),
}


def _type_values(annotation: str) -> st.SearchStrategy[Any]:
    """Values near a field's own type: right type, wrong type, empty."""
    if "bool" in annotation:
        return st.booleans() | GENERIC
    if "int" in annotation or "float" in annotation:
        return st.integers(-10, 10**9) | st.floats(allow_nan=True) | GENERIC
    if "tuple" in annotation:
        return st.lists(_TEXT, max_size=3) | GENERIC
    if "dict" in annotation:
        return st.dictionaries(_TEXT, GENERIC, max_size=2) | GENERIC
    return _TEXT | GENERIC


def _keys(cls: type) -> list[tuple[str, str]]:
    return [(f.name, str(f.type)) for f in fields(cls)]


def _near_miss(name: str) -> st.SearchStrategy[str]:
    """A key as a user mistypes it: a hyphen, a letter dropped or doubled, plural."""
    return st.sampled_from([name + "s", name[:-1] or "x", name.replace("_", "-"), name.upper(), name + name[-1],
                            "_" + name])


@st.composite
def _setting(draw: st.DrawFn, cls: type) -> tuple[str, Any]:
    """One key = value of a section: a known key (most), a mistyped one, or a made-up one."""
    name, annotation = draw(st.sampled_from(_keys(cls)))
    kind = draw(st.integers(0, 9))
    if kind == 0:
        name = draw(_near_miss(name))
    elif kind == 1:
        name = draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8))
    value = draw(POOLS[name] | GENERIC if name in POOLS else _type_values(annotation))
    return name, value


SECTION_OF_TABLE = {"deps": Dep, "system": SystemDep}


@st.composite
def recipe_tables(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """`base` with 1-4 changes: keys set, sections replaced by a non-table, tables added or mistyped."""
    data = json.loads(json.dumps(base, default=str))  # a deep copy
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.integers(0, 9))
        if what <= 5:
            section = draw(st.sampled_from(sorted(SECTIONS)))
            key, value = draw(_setting(SECTIONS[section]))
            table = data.setdefault(section, {})
            if isinstance(table, dict):
                table[key] = value
        elif what == 6:  # a [deps.NAME] or [system.NAME] table
            top = draw(st.sampled_from(["deps", "system"]))
            name = draw(st.sampled_from(["minidep", "other", "x y", "", "Dep"]))
            entries = dict(draw(st.lists(_setting(SECTION_OF_TABLE[top]), max_size=3)))
            holder = data.setdefault(top, {})
            if isinstance(holder, dict):
                holder[name] = entries if draw(st.booleans()) else draw(GENERIC)
        elif what == 7:  # [verify.libraries."GLOB"] / [test.expect."GLOB"]
            section, sub, cls = draw(st.sampled_from([("verify", "libraries", LibraryRule), ("test", "expect", Expectation)]))
            glob = draw(st.sampled_from(["minikernel/sm100/common_ops*", "*", "", "[", "x/**"]))
            entries = dict(draw(st.lists(_setting(cls), max_size=3)))
            table = data.setdefault(section, {})
            if isinstance(table, dict):
                holder = table.setdefault(sub, {})
                if isinstance(holder, dict):
                    holder[glob] = entries if draw(st.booleans()) else draw(GENERIC)
        elif what == 8:  # a section, or a top-level key, that is not a table / not known
            key = draw(st.sampled_from([*SECTIONS, "deps", "system", "description", "build2", "Source", "extra"]))
            data[key] = draw(GENERIC)
        else:
            data.pop(draw(st.sampled_from(sorted(data))), None) if data else None
    return data


# ---- TOML out (tomllib reads, nothing writes: this writes what the generators make) ----------------------

def _key(k: str) -> str:
    return _string(k)


def _string(s: str) -> str:
    # JSON's escapes of the control characters are TOML's; DEL TOML wants escaped too. The rest as is (JSON's
    # \\ud83d\\ude00 pairs for characters outside the BMP are no TOML).
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, (dt.date, dt.datetime)):
        return v.isoformat()
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(data: dict[str, Any], header: tuple[str, ...] = ()) -> str:
    scalars = [(k, v) for k, v in data.items() if not (isinstance(v, dict) and v)]
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict) and v]
    out = [f"[{'.'.join(_key(h) for h in header)}]"] if header and (scalars or not tables) else []
    out += [f"{_key(k)} = {_value(v)}" for k, v in scalars]
    for k, v in tables:
        out.append(to_toml(v, (*header, k)))
    return "\n".join(out) + "\n"


# ---- cases -------------------------------------------------------------------------------------------------

@dataclass
class Case:
    kind: str
    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)  # recipes/NAME.toml -> text, in the scratch project
    env: dict[str, str] = field(default_factory=dict)  # the environment's settings the plan reads


@st.composite
def recipe_case(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["overlay", "overlay", "whole", "extends", "toml"]))
    files: dict[str, str] = {}
    if kind == "overlay":  # a site's overlay of the shipped demo recipe
        files["gen"] = to_toml({"extends": "demo", **draw(recipe_tables({}))})
    elif kind == "whole":
        files["gen"] = to_toml(draw(recipe_tables(DEMO)))
    elif kind == "extends":
        parent = draw(st.sampled_from(["demo", "gen", "mid", "missing", "../recipes/demo.toml", "demo.toml",
                                       "mid.toml", ""]) | GENERIC)
        files["mid"] = to_toml({"extends": parent, **draw(recipe_tables({}))})
        files["gen"] = to_toml({"extends": draw(st.sampled_from(["mid", "demo", "gen"])), **draw(recipe_tables({}))})
    else:  # broken TOML: the demo recipe cut or spliced, or text
        text = (ROOT / "recipes" / "demo.toml").read_text()
        cut = draw(st.integers(0, len(text)))
        files["gen"] = draw(st.sampled_from([text[:cut], text[:cut] + draw(_TEXT) + text[cut:],
                                             text[:cut] + "\n[build]\n" + text[cut:], draw(_TEXT)]))
    argv = ["plan", "--offline", "--recipe", "recipes/gen.toml", *draw(st.sampled_from([[], ["--json"]]))]
    return Case(f"recipe-{kind}", argv, files)


def _commands() -> dict[tuple[str, ...], list[Any]]:
    """The commands a generated command line may run (none changes anything) and their click parameters."""
    import click

    from build_kernel.cli import cli

    out: dict[tuple[str, ...], list[Any]] = {(): list(cli.params)}
    for path in [("plan",), ("recipes", "show"), ("recipes", "list"), ("recipes", "reference"), ("verify",),
                 ("prune-proof",), ("cache", "stats")]:
        cmd: Any = cli
        for name in path:
            assert isinstance(cmd, click.Group)
            cmd = cmd.commands[name]
        out[path] = list(cmd.params)
    return out


COMMANDS = _commands()
OPTION_WORDS = {"--recipe": ["demo", "nightly-cu130", "gen", "recipes/gen.toml", "recipes", "", "no-such",
                             "/etc/passwd", "demo.toml", "x.toml"],
                "--arch": ARCH_WORDS, "--compile-cache": ["none", "ccache", "sccache", "ninja", ""],
                "--compile-scheduler": ["auto", "static", "governor", "fast", ""],
                "--cache-url": ["redis://host:6379", "s3://b/p", "cache", "redis://", "http://x", "", "::"],
                "--jobs": ["4", "0", "-3", "auto", "", "1e3", "99999999999999999999"],
                "--gpu-check": ["mod:func", "mod", ":", "", "build_kernel.package_checks:nope"]}
# The environment's settings (plan.py's precedence: recipe < environment < command line).
ENV_WORDS = {"ARCH": ARCH_WORDS, "TORCH_CUDA_ARCH_LIST": ARCH_WORDS, "MAX_JOBS": ["4", "0", "-1", "auto", "", "x"],
             "BUILD_KERNEL_COMPILE_CACHE": ["none", "ccache", "sccache", "x", ""],
             "BUILD_KERNEL_SCHEDULER": ["auto", "static", "governor", "x", ""],
             "BUILD_KERNEL_CACHE_URL": ["redis://h:1", "s3://b", "x", "", "redis://"]}
# A word of a command line: no NUL (execve cannot pass one; only an in-process runner could).
_WORD = _TEXT.map(lambda t: t.replace("\0", ""))
_DEAD_WHEEL = ["missing.whl", "garbage.whl", "notes.txt", "", ".", "wheels"]


@st.composite
def argv_case(draw: st.DrawFn) -> Case:
    path = draw(st.sampled_from(sorted(COMMANDS)))
    params = COMMANDS[path] + (COMMANDS[()] if path else [])
    words: list[str] = []
    for param in draw(st.lists(st.sampled_from(params), max_size=5)):
        if param.param_type_name == "argument":
            words.append(draw(st.sampled_from(_DEAD_WHEEL) | _WORD))
            continue
        if "--debug" in param.opts:  # asks for the traceback: not a case of bad input
            continue
        opt = draw(st.sampled_from(param.opts))
        if param.is_flag:
            words.append(opt)
            continue
        value = draw(st.sampled_from(OPTION_WORDS.get(param.opts[0], ["x", "", "-", "--"])) | _WORD)
        words += draw(st.sampled_from([[opt, value], [f"{opt}={value}"], [opt]]))
    if draw(st.integers(0, 4)) == 0:  # a word the CLI does not know
        words.insert(draw(st.integers(0, len(words))), draw(st.sampled_from(["--archs", "-x", "--", "bogus", "--json=1"])
                                                             | _WORD))
    argv = [*path, *words]
    env = {k: draw(st.sampled_from(ENV_WORDS.get(k, ["x"])) | _WORD)
           for k in draw(st.lists(st.sampled_from(sorted(ENV_WORDS)), max_size=2, unique=True))}
    if not path:  # the pipeline itself only as a dry run (a plan, nothing built)
        argv.append("--dry-run")
    return Case("argv-" + ("-".join(path) or "pipeline"), argv, {"gen": to_toml({"extends": "demo"})}, env)


CASES = st.one_of(recipe_case(), argv_case())

# ---- running and judging ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    kind: str
    argv: list[str]
    exit_code: int
    lines: list[str]
    verdict: str  # accepted / rejected / traceback
    unnamed: list[str]  # rejection lines that name no key/option or give no fix


_NAMES = re.compile(r"\[[^\]]+\]|\b[a-z_]+\.[a-z_-]+\b|--[a-z-]+|\.toml|recipe|extends|\b[a-z_]+ = |option|argument|"
                    r"command|wheel|arch|TOML|\bkey\b", re.I)
_FIX = re.compile(r"\(.+\)|did you mean|e\.g\.|\buse\b|\bpass\b|\bgive\b|\bwrite\b|: build-kernel ", re.I)


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    """A scratch project: recipes/ (generated), patches/ and examples/ as the repository's, its own cache."""
    with tempfile.TemporaryDirectory(prefix="bk-bad-input-") as tmp:
        root = Path(tmp)
        (root / "recipes").mkdir()
        for name in ("patches", "examples"):
            (root / name).symlink_to(ROOT / name)
        (root / "garbage.whl").write_bytes(b"not a zip\n")
        (root / "notes.txt").write_text("notes\n")
        yield root


def run_case(case: Case, root: Path) -> Outcome:
    """The case through the real CLI (CliRunner: cli/output.py's exit), judged."""
    from click.testing import CliRunner

    from build_kernel.cli import cli

    for stale in (root / "recipes").glob("*.toml"):
        stale.unlink()
    for name, text in case.files.items():
        (root / "recipes" / f"{name}.toml").write_text(text)
    env = {"BUILD_KERNEL_CACHE_DIR": str(root / "cache"), "BUILD_KERNEL_OUTPUT_DIR": str(root / "out"),
           "XDG_CONFIG_HOME": str(root / "config"), "NO_COLOR": "1", "COLUMNS": "200",
           "ARCH": "", "TORCH_CUDA_ARCH_LIST": "", "MAX_JOBS": "", "BUILD_KERNEL_CONFIG": "", **case.env}
    cwd = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, case.argv, env=env, catch_exceptions=True)
    finally:
        os.chdir(cwd)
    code = result.exit_code
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return Outcome(case.kind, case.argv, code, [repr(result.exception)], "traceback", [])
    lines = [line for line in stderr.split("\n") if line.strip()]  # a line as a terminal shows one
    errors = [line[len("error: "):] for line in lines if line.startswith("error: ")]
    if code == 0:
        return Outcome(case.kind, case.argv, code, [], "accepted", [])
    if (code == 1 and any("unexpected error" in e for e in errors)) or "Traceback" in stderr or code not in EXIT_CODES:
        return Outcome(case.kind, case.argv, code, errors or lines, "traceback", [])
    if not errors and result.stdout.lstrip().startswith("{"):
        # `plan --json` with toolchain problems: exit 3, the problems (each with its fix) in the JSON on stdout.
        with contextlib.suppress(ValueError):
            errors = [str(p) for p in json.loads(result.stdout).get("toolchain_problems") or []]
    unnamed = [e for e in errors if not (_NAMES.search(e) and _FIX.search(e))]
    if not errors:
        unnamed = lines or ["(no message)"]
    return Outcome(case.kind, case.argv, code, errors, "rejected", unnamed)


def template(line: str, root: Path) -> str:
    """A message with what was generated in it replaced: the distinct messages, counted."""
    line = line.replace(str(root.resolve()), "ROOT").replace(str(root), "ROOT")
    line = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`", "…", line)
    line = re.sub(r"(?<=ROOT/recipes/)[^:\s]+", "F", line)
    line = re.sub(r":\d+(:\d+)?", ":N", line)
    line = re.sub(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e[+-]?\d+)?", "N", line)
    return line if len(line) <= 160 else line[:157] + "..."


def examples(strategy: st.SearchStrategy[Case], n: int, seed: int) -> Iterator[Case]:
    """`n` cases drawn from `strategy` by Hypothesis (generation only, no shrinking), the same for the same seed."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fixed_seed

    drawn: list[Case] = []

    @fixed_seed(seed)
    @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    yield from drawn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=68)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "faults" / "results" / "bad_input.json")
    args = parser.parse_args()
    verdicts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    codes: Counter[int] = Counter()
    tracebacks: list[dict[str, Any]] = []
    unnamed: Counter[str] = Counter()
    unnamed_example: dict[str, dict[str, Any]] = {}
    max_lines, lines_per_problem = 0, 0
    with scratch() as root:
        for i, case in enumerate(examples(CASES, args.cases, args.seed)):
            out = run_case(case, root)
            verdicts[out.verdict] += 1
            kinds[f"{out.kind} {out.verdict}"] += 1
            codes[out.exit_code] += 1
            if out.verdict == "traceback":
                tracebacks.append({"argv": out.argv, "files": case.files, "exit_code": out.exit_code, "lines": out.lines})
            if out.verdict == "rejected":
                max_lines = max(max_lines, len(out.lines))
                for line in out.lines:
                    messages[template(line, root)] += 1
                    lines_per_problem = max(lines_per_problem, line.count("\n") + 1)
                for line in out.unnamed:
                    unnamed[template(line, root)] += 1
                    unnamed_example.setdefault(template(line, root), {"argv": out.argv, "env": case.env,
                                                                      "files": case.files, "exit_code": out.exit_code})
            if (i + 1) % 500 == 0:
                print(f"{i + 1} cases: {dict(verdicts)}", file=sys.stderr, flush=True)
    result = {
        "command": f"python bench/faults/bad_input.py --cases {args.cases} --seed {args.seed}",
        "cases": sum(verdicts.values()), "accepted": verdicts["accepted"], "rejected": verdicts["rejected"],
        "tracebacks": verdicts["traceback"], "by_kind": dict(sorted(kinds.items())),
        "exit_codes": {str(k): v for k, v in sorted(codes.items())},
        "max_message_lines": max_lines,
        "rejection_lines_naming_no_key_or_fix": sum(unnamed.values()),
        "distinct_messages": len(messages),
        "messages": [{"message": m, "count": c} for m, c in sorted(messages.items(), key=lambda x: (-x[1], x[0]))],
        "unnamed": [{"message": m, "count": c, "e.g.": unnamed_example[m]}
                    for m, c in sorted(unnamed.items(), key=lambda x: (-x[1], x[0]))],
        "traceback_cases": tracebacks[:20],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n")
    print(json.dumps({k: result[k] for k in ("cases", "accepted", "rejected", "tracebacks", "max_message_lines",
                                             "distinct_messages", "rejection_lines_naming_no_key_or_fix")}))
    return 1 if result["tracebacks"] else 0


if __name__ == "__main__":
    sys.exit(main())
