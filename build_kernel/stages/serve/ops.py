"""Which kernels the server really ran: the op-count hook (op_hook/sitecustomize.py) put into the server's
processes, and its counts read before the smoke request and after the bench.

The resolved-backend audit (audit.py) says what sglang chose; this says which of the wheel's ops were
called. Ops called eagerly between the two snapshots ran for the smoke and bench requests; ops counted
while a CUDA graph was being captured ran at start-up and replay in every decode step since (Python never
sees a replay, so their count is the captures', not the replays').

An op is the wheel's (`sgl_kernel_ops`) only when its namespace is exactly `sgl_kernel` AND the file whose load
registered it (the hook brackets every library load) is the wheel's: its sha256 among the wheel's RECORD hashes
where those are given, else a file of an installed `sgl_kernel` package (serve's preflight refuses an sgl_kernel
whose files are not the wheel's). Ops of that namespace from elsewhere, or of no known file, are listed apart.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOOK = Path(__file__).with_name("op_hook")
FOLDER_VAR = "BUILD_KERNEL_OPS_DIR"
SETTLE_S = 1.2  # the hook writes at most once a second
SETTLE_MAX_S = 8.0
KERNEL_NAMESPACE = "sgl_kernel::"
PACKAGE_PART = "/sgl_kernel/"  # an installed sgl_kernel package's files: site-packages/sgl_kernel/...


@dataclass
class Counts:
    """Every process's counts summed: op -> {"eager": n, "graph": n}, and how many processes wrote."""

    calls: dict[str, dict[str, int]] = field(default_factory=dict)
    processes: int = 0
    origins: dict[str, str] = field(default_factory=dict)  # op (no overload) -> the library that registered it
    libraries: dict[str, str] = field(default_factory=dict)  # library -> sha256


def enable(env: Mapping[str, str], folder: Path) -> dict[str, str]:
    """The server's environment with the hook first on PYTHONPATH, writing to `folder` (emptied first)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    path = os.pathsep.join(p for p in (str(HOOK), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, FOLDER_VAR: str(folder)}


def read(folder: Path) -> Counts:
    counts = Counts()
    for path in sorted(folder.glob("ops-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):  # renamed into place, so only a vanished file; skip it
            continue
        counts.processes += 1
        for name, origin in (data.get("origins") or {}).items():
            counts.origins.setdefault(name, str(origin))
        counts.libraries.update({str(k): str(v) for k, v in (data.get("libraries") or {}).items()})
        for name, by_kind in (data.get("calls") or {}).items():
            total = counts.calls.setdefault(name, {"eager": 0, "graph": 0})
            for kind in ("eager", "graph"):
                total[kind] += int(by_kind.get(kind, 0))
    return counts


def snapshot(folder: Path) -> Counts:
    """The counts once they stop changing (the hook writes each second), or after SETTLE_MAX_S."""
    deadline = time.monotonic() + SETTLE_MAX_S
    last = read(folder)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S)
        now = read(folder)
        if now == last:
            return now
        last = now
    return last


def wheel_sha256(record: Mapping[str, str]) -> set[str]:
    """A wheel's RECORD hashes (path -> urlsafe base64 sha256, preflight.wheel_record) as the hex the hook writes."""
    import base64

    return {base64.urlsafe_b64decode(h + "=" * (-len(h) % 4)).hex() for h in record.values()}


def op_of(name: str) -> str:
    """The op a counted name calls: `sgl_kernel::fwd.default` -> `sgl_kernel::fwd` (the overload dropped)."""
    return name.split(".")[0]


def wheels_own(name: str, origins: Mapping[str, str], libraries: Mapping[str, str],
               wheel_sha256: Collection[str] | None = None) -> bool:
    """Is this counted name an op of the sgl_kernel namespace registered by a library of the served wheel?"""
    op = op_of(name)
    origin = origins.get(op)
    if op.split("::")[0] + "::" != KERNEL_NAMESPACE or not origin:
        return False
    if wheel_sha256 is not None:
        return libraries.get(origin) in wheel_sha256
    return PACKAGE_PART in origin


def report(before: Counts, after: Counts, wheel_sha256: Collection[str] | None = None) -> dict[str, Any]:
    """Ops called eagerly between the snapshots, ops captured in CUDA graphs, and the wheel's among them."""
    eager = {name: c["eager"] - before.calls.get(name, {}).get("eager", 0) for name, c in after.calls.items()}
    eager = {name: n for name, n in sorted(eager.items()) if n > 0}
    graph = {name: c["graph"] for name, c in sorted(after.calls.items()) if c["graph"] > 0}
    startup = {name: c["eager"] for name, c in sorted(before.calls.items()) if c["eager"] > 0}
    ran = {op_of(n) for n in (*eager, *graph)}
    kernel = sorted(op for op in ran if wheels_own(op, after.origins, after.libraries, wheel_sha256))
    elsewhere = {op: after.origins.get(op) for op in sorted(ran) if op.startswith(KERNEL_NAMESPACE) and op not in kernel}
    return {
        "eager_during_requests": eager,  # smoke (and bench): calls between the snapshots
        "graph_captured": graph,  # called while a CUDA graph was captured: replayed in decode
        "eager_at_startup": startup,  # warm-up, health check: before the first snapshot
        "sgl_kernel_ops": kernel,  # the wheel's own: namespace sgl_kernel, registered by the wheel's library
        "sgl_kernel_ops_not_the_wheels": elsewhere,  # that namespace, another library (or none known)
        "origins": {op: after.origins[op] for op in sorted(ran) if op in after.origins},
        "libraries": dict(sorted(after.libraries.items())),
        "processes": after.processes,
        "seen": bool(after.calls),
    }


def summary(found: Mapping[str, Any]) -> list[str]:
    if not found.get("seen"):
        return ["ops: the hook counted no custom op in the server's processes (none called, or none imported "
                "torch)"]

    own = set(found["sgl_kernel_ops"])

    def names(ops: Mapping[str, int]) -> str:
        short = sorted({op_of(n).removeprefix(KERNEL_NAMESPACE) for n in ops if op_of(n) in own})
        return ", ".join(short) or "none"

    others = sorted({n.split("::")[0] if "::" in n else n.split(".")[0]
                     for n in (*found["eager_during_requests"], *found["graph_captured"])
                     if not n.startswith(KERNEL_NAMESPACE)})
    return [f"sgl_kernel ops called for the requests: {names(found['eager_during_requests'])}",
            f"sgl_kernel ops captured in CUDA graphs: {names(found['graph_captured'])}",
            f"{len(found['sgl_kernel_ops'])} distinct sgl_kernel ops of the wheel in {found['processes']} process(es)"
            + (f"; sgl_kernel ops of another library: {', '.join(found['sgl_kernel_ops_not_the_wheels'])}"
               if found.get("sgl_kernel_ops_not_the_wheels") else "")
            + (f"; other counted namespaces: {', '.join(others)}" if others else "")]
