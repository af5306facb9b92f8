"""What was asked is what runs: sglang's own startup log, read after launch.

A healthy `/health` proves little: sglang resolves backends itself (`ServerArgs.__post_init__`
picks or replaces them per GPU and model) and may skip CUDA-graph capture. Its startup log
says what it resolved: the `server_args=ServerArgs(...)` dump (a dataclass repr, logged by
`_launch_subprocesses` after the arguments are final) and the model runner's
`Capture cuda graph begin/end` lines. A value the recipe asked for (a flag in `[serve] args`)
that sglang resolved to another is a failure naming both.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# dest -> the flag a recipe gives it with (sglang renames fp4_gemm_runner_backend's flag).
AUDITED = {
    "attention_backend": "--attention-backend",
    "moe_runner_backend": "--moe-runner-backend",
    "fp4_gemm_runner_backend": "--fp4-gemm-backend",
    "kv_cache_dtype": "--kv-cache-dtype",
}
DUMP = "server_args=ServerArgs("
CAPTURE_BEGIN, CAPTURE_END = "Capture cuda graph begin", "Capture cuda graph end"


@dataclass
class Audit:
    resolved: dict[str, Any] = field(default_factory=dict)
    cuda_graph: str = ""
    failures: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def summary(self) -> str:
        shown = ", ".join(f"{AUDITED[k]} {v}" for k, v in self.resolved.items() if k in AUDITED)
        return f"sglang resolved {shown}; CUDA graph: {self.cuda_graph}"


def asked(args: Sequence[str], namespace: Mapping[str, Any], abbreviations: Mapping[str, str]) -> dict[str, Any]:
    """The audited settings the recipe's flags name (abbreviations as argparse read them), as parsed."""
    given = {abbreviations.get(a.split("=", 1)[0], a.split("=", 1)[0]) for a in args if a.startswith("--")}
    out = {dest: namespace.get(dest) for dest, flag in AUDITED.items() if flag in given}
    if "--disable-cuda-graph" in given:
        out["disable_cuda_graph"] = bool(namespace.get("disable_cuda_graph"))
    return out


def server_args(log_text: str) -> dict[str, Any] | None:
    """The last `server_args=ServerArgs(...)` dump of the log, as {field: value}; None without one."""
    line = next((ln for ln in reversed(log_text.splitlines()) if DUMP in ln), None)
    if line is None:
        return None
    text = line[line.index(DUMP) + len("server_args="):]
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:  # a field whose repr is no Python (`<object at 0x..>`): the audited ones by pattern
        return _by_pattern(text)
    if not isinstance(call, ast.Call):
        return None
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        try:
            out[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:  # a non-literal repr (an object): its text
            out[kw.arg] = ast.unparse(kw.value)
    return out


def _by_pattern(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dest in (*AUDITED, "disable_cuda_graph"):
        found = re.search(rf"\b{dest}=('[^']*'|None|True|False|-?\d+(?:\.\d+)?)", text)
        if found:
            out[dest] = ast.literal_eval(found.group(1))
    return out


def audit(log_text: str, wanted: Mapping[str, Any]) -> Audit:
    """What sglang resolved, and each asked-for setting it did not keep."""
    result = Audit()
    dump = server_args(log_text)
    if dump is None:
        result.failures.append("sglang's startup log has no server_args=ServerArgs(...) line, so what it resolved is "
                               "unknown (is --log-level above info?)")
        return result
    result.resolved = {dest: dump.get(dest) for dest in AUDITED}
    for dest, value in wanted.items():
        if dest in AUDITED and dump.get(dest) != value:
            result.failures.append(f"{AUDITED[dest]} {value} was asked for, but sglang resolved {dest}="
                                   f"{dump.get(dest)!r}: a silent fallback")
    disabled = bool(dump.get("disable_cuda_graph"))
    began, ended = CAPTURE_BEGIN in log_text, CAPTURE_END in log_text
    result.cuda_graph = ("disabled" if disabled else "captured" if ended else "begun, never ended" if began
                         else "not captured")
    if disabled and not wanted.get("disable_cuda_graph"):
        result.failures.append("sglang disabled CUDA graphs (disable_cuda_graph=True in its server_args) though the "
                               "recipe did not pass --disable-cuda-graph: a silent fallback")
    elif not disabled and not ended:
        result.failures.append(f"CUDA-graph capture was on but the log has no '{CAPTURE_END}' line "
                               f"({result.cuda_graph})")
    return result
