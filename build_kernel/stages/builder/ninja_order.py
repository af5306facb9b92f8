"""Longest first: the compile edges of CMake's build.ninja reordered by predicted duration.

Why. Stock ninja (>= 1.12) starts ready edges by critical path (edges to the end) and, at
equal depth, in manifest order; it does not use .ninja_log's times (checked on the build
environment's ninja 1.13.2 and pinned by tests/test_ninja_order.py). CMake writes a
library's objects in CMakeLists order, so in the real H200 build of DESIGN.md (6ffc74ef, 12.0a,
15 jobs) the longest TU, fp8_gemm_kernel (341 s), started at 58 s and fp8_blockwise_moe
(212 s) at 227 s: they trailed the build instead of overlapping its many short compiles.

How. CMAKE_MAKE_PROGRAM is a shell script (`install`) that runs this file by path with
`python -S` (stdlib, the recorder and process.py only, like recorder.py: CMake calls it for every probe)
and then execs the real ninja. Called for the build folder (not for CMake's try-compile
folders, not for `--version`: the script execs ninja itself for those), it orders build.ninja first. CMake calls it there right
after each generation (`-t restat build.ninja`, also when ninja re-runs CMake mid-build,
before ninja reloads the file), and `cmake --build` calls it: every generation is ordered.

The rewrite sorts the compile edges (`ninja -t compdb` entries whose command compiles a
source, named as the recorder names it) longest first, those with no prediction after
them in their own order, within each run of `build` blocks between two other statements
(rule, pool, variable, include, subninja, default stay in place, so ninja's scoping does).
A block (its build line and indented variable lines) moves whole and byte for byte;
comments and blank lines stay. Dependencies are untouched: only the order among ready
edges changes. Written beside and renamed over, with build.ninja's mtime kept (ninja's
regeneration check and CMake's restat see the file as CMake left it); idempotent.

Predictions (`predictions`, by the tool before each build): the recorded profile (its
nearest-rank p90 wall, by source and flags digest, else by source) or the recipe's
shipped `order_profile` CSV (`source`, `seconds`), whichever knows more of the build's
edges (the recorded one on a tie). One or the other for a whole build, never
mixed: times measured on another machine do not compare with times recorded here.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__:
    from build_kernel.stages.builder.recorder import compiled
else:  # run by path with -S (see above): the recorder beside this file, without the package's imports
    from recorder import compiled  # type: ignore[import-not-found, no-redef]

    # and the tool's one runner of programs (build_kernel/__init__ and errors import nothing more)
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from build_kernel import process
from build_kernel.errors import BuildKernelError

HERE = str(Path(__file__).resolve())
FILE = "ninja-order.json"
# Every compile the build runs, by source (one entry per edge): the governor's complete TU list.
EDGES = "ninja-edges.json"
RECORDED, SHIPPED, NONE = "recorded profile", "shipped profile", "none"
_SCOPED = ("rule ", "pool ")  # statements whose indented lines are theirs


# --- the manifest ---------------------------------------------------------------------------------


def _continues(line: str) -> bool:
    """A line ending in an odd run of `$` goes on on the next line (`$$` is a literal dollar)."""
    body = line.rstrip("\r\n")
    return line != body and (len(body) - len(body.rstrip("$"))) % 2 == 1


def _first_output(line: str) -> str:
    """The first output of a `build` line, unescaped as ninja names it (`$ `, `$:`, `$$`)."""
    out, i, text = [], 0, line[len("build "):].lstrip(" ")
    while i < len(text) and text[i] not in " :|\r\n":
        if text[i] == "$" and i + 1 < len(text) and text[i + 1] in " :$":
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out)


def statements(text: str) -> list[tuple[str, str, str]]:
    """The manifest as (kind, text, first output) chunks whose texts join back to it: kind "build" (a
    block), "fixed" (any other statement), "" (a comment or blank line)."""
    logical: list[str] = []
    for line in text.splitlines(keepends=True):
        if logical and _continues(logical[-1]):
            logical[-1] += line
        else:
            logical.append(line)
    chunks: list[tuple[str, str, str]] = []
    open_block = False  # the last chunk is a build/rule/pool statement: indented lines are its own
    for line in logical:
        stripped = line.strip()
        if open_block and line.startswith(" ") and stripped:
            kind, body, output = chunks[-1]
            chunks[-1] = (kind, body + line, output)
            continue
        if line.startswith(" ") and stripped and not stripped.startswith("#"):
            raise ValueError(f"an indented line outside a build/rule/pool block: {stripped[:60]!r}")
        open_block = line.startswith(("build ", *_SCOPED))
        if line.startswith("build "):
            chunks.append(("build", line, _first_output(line)))
        elif not stripped or stripped.startswith("#"):
            chunks.append(("", line, ""))
        else:
            chunks.append(("fixed", line, ""))
    return chunks


def reorder(text: str, seconds: Mapping[str, float | None]) -> str:
    """`text` with the build blocks whose first output `seconds` names sorted longest first (None last,
    in their own order), each within its run of build blocks between two fixed statements."""
    chunks = statements(text)
    out = list(chunks)
    run: list[int] = []

    def flush() -> None:
        slots = [i for i in run if chunks[i][2] in seconds]
        key = {i: seconds[chunks[i][2]] for i in slots}
        ranked = sorted(slots, key=lambda i: (key[i] is None, -(key[i] or 0.0), i))
        for slot, i in zip(slots, ranked, strict=True):
            out[slot] = chunks[i]
        run.clear()

    for i, (kind, _, _) in enumerate(chunks):
        if kind == "fixed":
            flush()
        elif kind == "build":
            run.append(i)
    flush()
    return "".join(body for _, body, _ in out)


def compiles(folder: str, ninja: str, data: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Each compile edge's first output -> (source, flags digest), from the expanded commands."""
    listed = process.run([ninja, "-C", folder, "-t", "compdb"], what="ninja -t compdb").stdout
    found: dict[str, tuple[str, str]] = {}
    for entry in json.loads(listed):
        # Quoting shlex cannot read: that edge keeps its place.
        if (described := compiled(entry["command"], data["strip"])) is not None:
            found[entry["output"]] = (described.source, described.flags_digest)
    return found


def choose(edges: Mapping[str, tuple[str, str]], data: Mapping[str, Any]) -> tuple[str, dict[str, float | None]]:
    """Which profile orders this build (the one that knows more of its edges; the recorded one on a tie),
    and each edge's seconds. More, not any: a cache shared by several projects records sources of the
    same name (csrc/common_extension.cc), and one such hit must not set a shipped profile aside."""
    exact, anyflags, shipped = data["recorded"]["exact"], data["recorded"]["any"], data["shipped"]
    recorded = {out: exact.get(f"{src}\t{digest}", anyflags.get(src)) for out, (src, digest) in edges.items()}
    from_file = {out: shipped.get(src) for out, (src, _) in edges.items()}
    known_recorded = sum(s is not None for s in recorded.values())
    known_shipped = sum(s is not None for s in from_file.values())
    if known_recorded and known_recorded >= known_shipped:
        return RECORDED, recorded
    if known_shipped:
        return SHIPPED, from_file
    return NONE, dict.fromkeys(edges)


def built(folder: str, ninja: str, data: Mapping[str, Any], targets: Sequence[str]) -> list[str]:
    """The sources this ninja run compiles: `targets` (ninja's defaults when none) and what they need.
    Not compdb's list, which also holds targets CMake leaves out of `all` (a variant library
    no asked arch loads, optional modules): counted as still to come, those would hold the governor's
    bound up for the whole build."""
    listed = process.run([ninja, "-C", folder, "-t", "commands", *targets], what="ninja -t commands").stdout
    return sorted(d.source for line in listed.splitlines() if (d := compiled(line, data["strip"])) is not None)


_WITH_VALUE = ("-C", "-f", "-j", "-k", "-l", "-d", "-t", "-w")  # ninja's options that take the next word


def targets_of(args: Sequence[str]) -> list[str]:
    """The targets a ninja command line builds ([] for its defaults, and for a tool run such as CMake's
    `-t restat`, which builds nothing: the next build's defaults are what will run)."""
    if "-t" in args:
        return []
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


def order(folder: str, ninja: str, data: Mapping[str, Any], targets: Sequence[str] = ()) -> str:
    """Order folder/build.ninja (rewritten only when that changes it); one line saying how."""
    path = os.path.join(folder, "build.ninja")
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as fh:
        text = fh.read()
    edges = compiles(folder, ninja, data)
    if data.get("edges_file"):
        _write_json(data["edges_file"], {"sources": built(folder, ninja, data, targets)})
    which, seconds = choose(edges, data)
    if which == NONE:
        return f"build-kernel: build.ninja: no prediction for its {len(edges)} compile(s): CMake's order"
    new = reorder(text, seconds)
    if new != text:
        _replace(path, new)
    known = sorted(((s, edges[o][0]) for o, s in seconds.items() if s is not None), key=lambda e: -e[0])
    head = ", ".join(f"{src} {s:.0f} s" for s, src in known[:3])
    return (f"build-kernel: build.ninja: {len(edges)} compile(s) {'ordered' if new != text else 'in order'}, "
            f"longest first by the {which} ({len(known)} predicted; first {head})")


def _replace(path: str, text: str) -> None:
    st = os.stat(path)
    fd, tmp = tempfile.mkstemp(prefix=".build.ninja.", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, st.st_mode & 0o7777)
        # CMake's mtime, kept: ninja's "is build.ninja older than its inputs" sees what it saw before.
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _write_json(path: str, data: Mapping[str, Any]) -> None:
    """Written beside and renamed over: a reader (the governor's thread) never sees half a file."""
    fd, tmp = tempfile.mkstemp(prefix=".edges.", dir=os.path.dirname(path) or ".")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _folder(args: Sequence[str]) -> str:
    """The folder a ninja command line runs in: each `-C DIR` applies after the last, as in ninja."""
    folder = os.getcwd()
    for i, arg in enumerate(args):
        if arg == "-C" and i + 1 < len(args):
            folder = os.path.join(folder, args[i + 1])
        elif arg.startswith("-C") and len(arg) > 2:
            folder = os.path.join(folder, arg[2:])
    return os.path.realpath(folder)


def _without_j(args: Sequence[str]) -> list[str]:
    """`args` less `-j N` / `-jN`: ninja >= 1.13 follows MAKEFLAGS' jobserver only when no -j is given."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "-j":
            skip = True
        elif not (arg.startswith("-j") and arg[2:].isdigit()):
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """`ninja_order.py --predictions FILE --build-dir DIR --ninja NINJA -- ARGS...`: order, then exec ninja."""
    args = list(sys.argv[1:] if argv is None else argv)
    split = args.index("--")
    opts, rest = dict(zip(args[:split:2], args[1:split:2], strict=False)), args[split + 1:]
    ninja, folder = opts["--ninja"], _folder(rest)
    if opts.get("--drop-j"):  # installed so for a build under the jobserver (the tool knew it then)
        rest = _without_j(rest)  # a caller's -j (torch's cpp_extension passes MAX_JOBS) would turn the jobserver off
    want = os.path.realpath(opts["--build-dir"])
    if "--version" not in rest and (folder == want or ("*" in want and fnmatch.fnmatchcase(folder, want))):
        try:
            with open(opts["--predictions"]) as fh:
                said = order(folder, ninja, json.load(fh), targets_of(rest))
        except (OSError, ValueError, KeyError, BuildKernelError) as exc:
            # Order is an optimisation: a build must never fail for want of it.
            said = f"build-kernel: warning: build.ninja left in CMake's order ({type(exc).__name__}: {exc})"
        if "-t" not in rest:  # a build, not CMake's restat after generating: said once in the build's log
            print(said, file=sys.stderr, flush=True)
    os.execvp(ninja, [ninja, *rest])


# --- the tool's side (imported, never run by path) ------------------------------------------------


class EdgesList:
    """The edges file `order` writes (this build's compiles), read by whoever follows the build (the governor,
    the ETA): `changed()` gives its sources when the file is new or rewritten (CMake regenerated), else None,
    also while it does not exist yet or is being replaced."""

    def __init__(self, path: Path | None) -> None:
        self.path, self._mtime = path, -1

    def changed(self) -> list[str] | None:
        if self.path is None:
            return None
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime == self._mtime:
                return None
            sources = [str(src) for src in json.loads(self.path.read_text())["sources"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        self._mtime = mtime
        return sources


def read_shipped(path: str | os.PathLike[str]) -> dict[str, float]:
    """source -> seconds of a shipped order profile (read_shipped_rows)."""
    return {source: seconds for source, (seconds, _) in read_shipped_rows(path).items()}


def read_shipped_rows(path: str | os.PathLike[str]) -> dict[str, tuple[float, float | None]]:
    """source -> (seconds, peak GB or None) of a shipped order profile: CSV with `source` and `seconds`
    columns and an optional `peak_gb` (others ignored; `#` lines are comments). ValueError naming the
    problem otherwise."""
    with open(path, newline="") as fh:
        rows = csv.DictReader(line for line in fh if not line.startswith("#"))
        missing = sorted({"source", "seconds"} - set(rows.fieldnames or ()))
        if missing:
            raise ValueError(f"no {' or '.join(missing)} column (the header must name source and seconds)")
        out: dict[str, tuple[float, float | None]] = {}
        for n, row in enumerate(rows, 1):
            seconds, peak = _number(row["seconds"]), _number(row.get("peak_gb"))
            if not row["source"] or not math.isfinite(seconds) or seconds < 0:
                raise ValueError(f"data row {n}: needs a source and seconds >= 0, not "
                                 f"{row['source']!r}, {row['seconds']!r}")
            out[row["source"]] = (seconds, peak if math.isfinite(peak) and peak > 0 else None)
    if not out:
        raise ValueError("no data rows (one row per source: source,seconds)")
    return out


def _number(text: str | None) -> float:
    try:
        return float(text or "")
    except ValueError:
        return math.nan


def predictions(db: Path, shipped: Path | None, strip: Sequence[Path | str], *,
                project: str | None = None) -> dict[str, Any]:
    """What the wrapper orders by: the recorded profile's p90 wall per (source, digest) and per source, the
    shipped file's; `strip`: the recorder's --strip roots (the source tree first), to name sources as it does;
    `project`: whose rows (scheduling.project_key; None: every row)."""
    from build_kernel.stages.builder import profile

    rows = profile.rows(db, project=project)
    by_source: dict[str, list[profile.Compile]] = {}
    for r in rows:
        if r.source:
            by_source.setdefault(r.source, []).append(r)
    exact: dict[str, float] = {}
    anyflags: dict[str, float] = {}
    for source, mine in by_source.items():
        for digest in {r.flags_digest for r in mine}:
            est = profile.estimate(mine, source, digest, default_mb=0)
            if est.wall_s is not None and est.source == "profile":
                exact[f"{source}\t{digest}"] = est.wall_s
        if (wall := profile.estimate(mine, source, None, default_mb=0).wall_s) is not None:
            anyflags[source] = wall
    return {"strip": [str(p) for p in strip],
            "recorded": {"exact": exact, "any": anyflags}, "shipped": read_shipped(shipped) if shipped else {},
            "shipped_file": str(shipped) if shipped else None}


def preview(data: Mapping[str, Any], n: int = 5) -> dict[str, Any]:
    """What `plan` shows: the profile that would order the build, and its longest TUs. Before configure
    the edges are unknown; a shipped profile names the project's sources, so the recorded one wins only
    where it knows all of them."""
    recorded, shipped = data["recorded"]["any"], data["shipped"]
    if shipped and sum(s in recorded for s in shipped) < len(shipped):
        recorded = {}  # as `choose` would: the shipped profile knows more of the project's sources
    which, table = (RECORDED, recorded) if recorded else (SHIPPED, shipped) if shipped else (NONE, {})
    first = sorted(table.items(), key=lambda kv: -kv[1])[:n]
    return {"source": which, "file": data["shipped_file"] if which == SHIPPED else None,
            "first": [{"source": s, "seconds": round(v, 1)} for s, v in first]}


def install(folder: Path, *, python: str, ninja: str, build_dir: Path, data: Mapping[str, Any],
            drop_j: bool = False) -> Path:
    """Write the predictions and the CMAKE_MAKE_PROGRAM script that orders `build_dir` (a folder, or a glob of
    folders: setuptools names its own) before running `ninja`; `drop_j` (a build under the jobserver): the
    caller's -j is left out."""
    folder.mkdir(parents=True, exist_ok=True)
    data_file, edges = folder / FILE, folder / EDGES
    edges.unlink(missing_ok=True)  # an earlier configure's list is not this build's
    tmp = data_file.with_name(f".{FILE}.tmp")
    tmp.write_text(json.dumps({**data, "edges_file": str(edges)}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, data_file)
    script = folder / "ninja"
    command = shlex.join([python, "-S", HERE, "--predictions", str(data_file), "--build-dir", str(build_dir),
                          "--ninja", ninja, *(["--drop-j", "1"] if drop_j else []), "--"])
    # CMake calls the script ~26 times a configure for itself (`--version`; `-C` a try-compile folder `-t restat`,
    # `-t recompact`, then its build there), and Python (~0.07 s a start) is needed only in the build folder. The
    # shell finds the folder as `main` does (each -C after the last; the real path; a glob where it holds `*`);
    # where it cannot (a folder that does not exist, a -j to drop), `main` decides.
    want = os.path.realpath(build_dir)
    pattern = "*".join(shlex.quote(part) if part else "" for part in want.split("*"))
    real = shlex.quote(ninja)
    drop = "\n        -j*) python=1 ;;" if drop_j else ""
    script.write_text(f"""#!/bin/sh
# build-kernel: orders build.ninja longest first, then runs ninja (build_kernel/stages/builder/ninja_order.py)
dir=$(pwd -P) python= next=
for arg in "$@"; do
    if [ -n "$next" ]; then
        case $arg in /*) dir=$arg ;; *) dir=$dir/$arg ;; esac
        next=
        continue
    fi
    case $arg in
        --version) exec {real} "$@" ;;
        -C) next=1 ;;
        -C*) case ${{arg#-C}} in /*) dir=${{arg#-C}} ;; *) dir=$dir/${{arg#-C}} ;; esac ;;{drop}
    esac
done
[ -z "$python" ] && dir=$(cd -P -- "$dir" 2>/dev/null && pwd -P) || python=1
[ -n "$python" ] || case $dir in {pattern}) ;; *) exec {real} "$@" ;; esac
exec {command} "$@"
""")
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    main()
