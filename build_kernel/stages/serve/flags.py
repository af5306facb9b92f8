"""The serve flags, parsed by the installed sglang's own argparse (and nothing else).

`ServerArgs.add_cli_args` on a plain `ArgumentParser`, then `parse_args` only: never
`ServerArgs.from_cli_args`, whose `__post_init__` probes the GPU and the model. A
misspelt flag is one line with the closest real ones; a bad choice is argparse's own
line with the valid choices. The outcome is cached by interpreter, sglang's parser file
and the flags, since importing `server_args` takes 10-20 s; the port and the model folder
serve puts on every command line are left out of the key (another port is no other parse)
and put back into the namespace the cache holds. What the cache lacks, one child per serve
run parses (`Parser`), importing sglang once for all of that run's parses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_kernel import atomic, process
from build_kernel.errors import ServeError

_MARK = "@@FLAGS@@"
# One child per serve run answers every parse (one JSON argv a line on stdin, one marked line back): sglang's
# import is paid once however many parses the run makes (a checkpoint's advice means a second one).
_SCRIPT = r"""
import argparse, difflib, json, os, sys
failed = None
try:
    import sglang
    from sglang.srt.server_args import ServerArgs
except Exception as exc:
    failed = f"cannot import sglang.srt.server_args: {type(exc).__name__}: {exc}"
class Refused(Exception):
    pass
def refuse(message):
    raise Refused(message)
for request in sys.stdin:
    argv = json.loads(request)
    out = {"error": failed, "unknown": {}, "namespace": {}, "abbreviations": {}}
    if failed:
        print("@@FLAGS@@" + json.dumps(out), flush=True)
        continue
    out["sglang"] = getattr(sglang, "__version__", "")
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    parser.error = refuse
    options = sorted(parser._option_string_actions)
    try:
        ns, unknown = parser.parse_known_args(argv)
        for arg in unknown:
            if arg.startswith("-"):
                flag = arg.split("=", 1)[0]
                out["unknown"][flag] = difflib.get_close_matches(flag, options, n=3, cutoff=0.6)
        out["namespace"] = {k: v if isinstance(v, (str, int, float, bool, list, type(None))) else str(v)
                            for k, v in vars(ns).items()}
        for arg in argv:
            flag = arg.split("=", 1)[0]
            if flag.startswith("--") and flag not in parser._option_string_actions:
                full = [o for o in options if o.startswith(flag)]
                if len(full) == 1:
                    out["abbreviations"][flag] = full[0]
    except (Refused, argparse.ArgumentError) as exc:
        out["error"] = str(exc)
    print("@@FLAGS@@" + json.dumps(out), flush=True)
# Every answer is flushed: skip the interpreter's teardown of sglang, torch and transformers (~1 s, paid per serve).
os._exit(0)
"""


@dataclass
class Parsed:
    """sglang's reading of the flags: every dest with its value (defaults included)."""

    sglang: str
    namespace: dict[str, Any]
    # `--tp` given, `--tp-size` meant: argparse takes unique prefixes; shown so nobody is surprised.
    abbreviations: dict[str, str] = field(default_factory=dict)

    def given(self, dest: str) -> Any:
        return self.namespace.get(dest)


# The flags whose value serve itself writes (a port per recipe, the model's resolved folder), and the dest
# argparse keeps each under: a value that changes nothing the parser accepts or refuses, only what it stores.
_PUT_BACK = {"--port": "port", "--model-path": "model_path"}
_PLACEHOLDER = "@@VALUE@@"


def _shape(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """`argv` with the value of each `_PUT_BACK` flag replaced by a placeholder, and those values. Only a flag
    given once as `--flag VALUE`, with no other word argparse could take for it (a prefix, `--flag=`)."""
    shape, values = list(argv), {}
    for flag in _PUT_BACK:
        spots = [i for i, a in enumerate(argv) if a.startswith("--") and (flag.startswith(a.split("=", 1)[0]))]
        if len(spots) != 1 or argv[spots[0]] != flag or spots[0] + 1 >= len(argv):
            continue
        value = argv[spots[0] + 1]
        if value.startswith("-"):
            continue
        shape[spots[0] + 1], values[flag] = _PLACEHOLDER, value
    return shape, values


def _put_back(data: dict[str, Any], values: Mapping[str, str]) -> dict[str, Any] | None:
    """`data` (a parse of another value of the `values` flags) with these values in their dests, converted as
    argparse converted the other one (a str stays a str, an int is an int); None where that is not sure."""
    namespace = dict(data["namespace"])
    for flag, value in values.items():
        stored = namespace.get(_PUT_BACK[flag])
        if isinstance(stored, str):
            namespace[_PUT_BACK[flag]] = value
        elif isinstance(stored, int) and not isinstance(stored, bool) and value.isdigit():
            namespace[_PUT_BACK[flag]] = int(value)
        else:
            return None
    return {**data, "namespace": namespace}


def _cache_key(python: str, argv: Sequence[str], sglang_root: Path) -> str | None:
    """By interpreter, sglang's parser file (size, mtime) and the flags; None without that file."""
    origin = sglang_root / "srt" / "server_args.py"
    if not origin.is_file():
        return None
    st = origin.stat()
    spec = {"python": python, "origin": str(origin), "size": st.st_size, "mtime": st.st_mtime_ns, "argv": list(argv)}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


class Parser:
    """sglang's parser for one serve run: the cache first, else one child that stays loaded between parses."""

    def __init__(self, python: str, env: Mapping[str, str], *, cache_dir: Path | None = None,
                 sglang_root: Path | None = None) -> None:
        self.python, self.env, self.cache_dir, self.sglang_root = python, env, cache_dir, sglang_root
        self._child: process.Conversation | None = None

    def _ask(self, argv: Sequence[str]) -> dict[str, Any]:
        if self._child is None:
            self._child = process.converse([self.python, "-c", _SCRIPT], error=ServeError, env=self.env,
                                           what="parsing the serve flags with sglang's argparse")
        answer = self._child.ask(json.dumps(list(argv)), mark=_MARK, timeout=600)
        if answer is None:
            tail = self._child.stderr_tail() or ["(no output)"]
            self.close()
            raise ServeError(f"sglang's parser crashed in {self.python}: {tail[0]}",
                             hint="run `build-kernel serve --install --recipe R` to repair the serve environment")
        data: dict[str, Any] = json.loads(answer)
        return data

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None

    def __enter__(self) -> Parser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def parse(self, argv: Sequence[str]) -> Parsed:
        """Parse `argv` (as `launch_server` would get it) or raise one line naming the bad flag.

        Cached in `cache_dir` when `sglang_root` (the installed package's folder) says which parser it is."""
        shape, values = _shape(argv)
        key = _cache_key(self.python, shape, self.sglang_root) if self.cache_dir and self.sglang_root else None
        cached = self.cache_dir / f"{key}.json" if self.cache_dir and key else None
        data = _put_back(json.loads(cached.read_text()), values) if cached is not None and cached.is_file() else None
        if data is None:
            data = self._ask(argv)
            # Kept only where the values are in their dests as given (then another port's parse is this one's).
            if cached is not None and not data["error"] and not data["unknown"] and _put_back(data, values) == data:
                atomic.write_text(cached, json.dumps(data))
        return _outcome(self.python, data)


def parse(python: str, argv: Sequence[str], env: Mapping[str, str], *, cache_dir: Path | None = None,
          sglang_root: Path | None = None) -> Parsed:
    """One parse (`Parser.parse`), its child ended after it."""
    with Parser(python, env, cache_dir=cache_dir, sglang_root=sglang_root) as parser:
        return parser.parse(argv)


def _outcome(python: str, data: dict[str, Any]) -> Parsed:
    """sglang's answer as the namespace, or one line naming what it refused."""
    if data["error"] and data["error"].startswith("cannot import"):
        raise ServeError(f"{python}: {data['error']}",
                         hint="run `build-kernel serve --install --recipe R` (add --flags-only on a machine without a GPU)")
    if data["unknown"]:
        flag, close = next(iter(data["unknown"].items()))
        more = f" (and {len(data['unknown']) - 1} more)" if len(data["unknown"]) > 1 else ""
        raise ServeError(f"sglang {data.get('sglang', '')} has no flag {flag}{more}",
                         hint=f"did you mean {' or '.join(close)}?" if close else
                         f"see `{python} -m sglang.launch_server --help`")
    if data["error"]:
        raise ServeError(f"sglang {data.get('sglang', '')} refuses the flags: {data['error']}",
                         hint="fix [serve] args in the recipe")
    return Parsed(data.get("sglang", ""), data["namespace"], data["abbreviations"])
