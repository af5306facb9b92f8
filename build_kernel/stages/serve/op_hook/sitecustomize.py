"""Which kernels the server ran: counts calls of custom torch ops (and flashinfer's entry points) in every
Python process the server starts. Put on the server's PYTHONPATH by `serve` (stages/serve/ops.py), so each
process, the scheduler and detokenizer that sglang starts with multiprocessing's spawn included, imports
it at start; inert unless BUILD_KERNEL_OPS_DIR names a folder.

How: when `torch._ops` is first imported, `OpOverload.__call__` and `OpOverloadPacket.__call__` (the
Python entry of every `torch.ops.NS.op[.overload](...)` call, whoever looked the op up and when) count
calls whose namespace is not aten's or prims'; when a `flashinfer.*` or `deep_gemm.*` module is imported
(their kernels are no torch ops), its public functions and its classes' `run`/`forward` are wrapped to count. A call made while the current CUDA
stream is capturing a graph is counted as "graph": it replays during decode, where Python never sees
it again. A daemon thread writes this process's counts to `ops-<pid>.json` in that folder (a temporary
file renamed over it) at most once a second, and again at exit.

Which library registered each op (issue 70: an `sgl_kernel::` name alone does not say the op is the wheel's): every
extension module's load (importlib's ExtensionFileLoader.create_module, the dlopen that runs a library's static op
registrations, whoever asked for it: sgl_kernel's own loader builds its spec by hand) and every
`torch.ops.load_library` is bracketed by torch's list of registered ops; the ops new after it are that file's, and
the file's sha256 is kept for ops of ATTRIBUTED namespaces (so a report can compare it with the wheel's RECORD).

It never breaks the server: each step swallows its own errors (the op itself is always called), and
nothing runs in a process that calls no counted op. Standard library only; nothing of build_kernel.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

FOLDER = os.environ.get("BUILD_KERNEL_OPS_DIR", "")
INTERVAL_S = 1.0
UNCOUNTED = ("aten::", "prims::", "prim::")
WRAPPED = ("flashinfer", "deep_gemm")
# Their builders and helpers are no kernels (a JIT generator named after decode is not a decode).
SKIPPED_PARTS = {"jit", "aot", "testing", "utils", "profiler", "autotuner", "tuner", "env", "logging", "api_logging"}
WRAPPED_METHODS = ("run", "forward")
ATTRIBUTED = ("sgl_kernel::",)  # namespaces whose libraries are hashed

_counts: dict[tuple[str, bool], int] = {}
_origins: dict[str, str] = {}  # op (namespace::name, no overload) -> the file whose load registered it
_libraries: dict[str, str] = {}  # such a file -> its sha256
_state = {"writer": False, "dirty": False}


def _capturing() -> bool:
    # torch.cuda's own predicate, looked up per call; a process that never initialised CUDA captures nothing
    # (and asking would initialise it).
    cuda = sys.modules["torch"].cuda
    return bool(cuda.is_initialized() and cuda.is_current_stream_capturing())


def record(name: str) -> None:
    try:
        try:
            graph = _capturing()
        except Exception:
            graph = False
        key = (name, graph)
        _counts[key] = _counts.get(key, 0) + 1
        _state["dirty"] = True
        if not _state["writer"]:
            _state["writer"] = True
            threading.Thread(target=_write_loop, name="build-kernel-ops", daemon=True).start()
    except Exception:
        pass


def _payload() -> dict[str, Any]:
    calls: dict[str, dict[str, int]] = {}
    for (name, graph), n in list(_counts.items()):
        calls.setdefault(name, {"eager": 0, "graph": 0})["graph" if graph else "eager"] += n
    try:
        import multiprocessing

        role = multiprocessing.current_process().name
    except Exception:
        role = ""
    return {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:3], "process": role, "time": time.time(),
            "calls": calls, "origins": dict(_origins), "libraries": dict(_libraries)}


def write() -> None:
    try:
        if not _counts:
            return
        _state["dirty"] = False
        path = os.path.join(FOLDER, f"ops-{os.getpid()}.json")
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(_payload(), fh)
        os.replace(tmp, path)  # a reader sees the old counts or the new, never half a file
    except Exception:
        pass


def _write_loop() -> None:
    while True:
        time.sleep(INTERVAL_S)
        if _state["dirty"]:
            write()


def _op_names() -> set[str] | None:
    torch = sys.modules.get("torch")
    names = getattr(getattr(torch, "_C", None), "_dispatch_get_all_op_names", None)
    return set(names()) if names is not None else None


def _sha256(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _attribute(before: set[str] | None, origin: str | None) -> None:
    """The ops registered since `before` came from `origin`."""
    try:
        after = _op_names()
        if before is None or after is None or not origin:
            return
        origin = os.path.realpath(origin)
        new = {name.split(".")[0] for name in after - before if not name.startswith(UNCOUNTED)}
        for name in new:
            _origins.setdefault(name, origin)
        if any(name.startswith(ATTRIBUTED) for name in new) and origin not in _libraries:
            _libraries[origin] = _sha256(origin)
        if new:
            _state["dirty"] = True
    except Exception:
        pass


def _bracketed(original: Callable[..., Any], origin_of: Callable[..., str | None]) -> Callable[..., Any]:
    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            before = _op_names()
        except Exception:
            before = None
        result = original(*args, **kwargs)
        _attribute(before, origin_of(*args, **kwargs))
        return result

    load.__wrapped__ = original  # type: ignore[attr-defined]
    return load


def _patch_extension_loader() -> None:
    cls = importlib.machinery.ExtensionFileLoader
    cls.create_module = _bracketed(cls.create_module,  # type: ignore[method-assign]
                                   lambda self, spec: getattr(spec, "origin", None) or getattr(self, "path", None))


def _after_fork() -> None:
    # A forked child has no writer thread and counts of its own to keep (not its parent's).
    _counts.clear()
    _state["writer"] = _state["dirty"] = False


def _patch_torch_ops(module: types.ModuleType) -> None:
    def counting(original: Callable[..., Any], attr: str) -> Callable[..., Any]:
        def __call__(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            try:
                name = getattr(self, attr)
                if not name.startswith(UNCOUNTED):
                    record(name)
            except Exception:
                pass
            return original(self, *args, **kwargs)

        __call__.__wrapped__ = original  # type: ignore[attr-defined]
        return __call__

    for cls_name, attr in (("OpOverload", "_name"), ("OpOverloadPacket", "_qualified_op_name")):
        cls = getattr(module, cls_name, None)
        if cls is not None and "__call__" in cls.__dict__:
            cls.__call__ = counting(cls.__dict__["__call__"], attr)
    ops = getattr(module, "_Ops", None)
    if ops is not None and "load_library" in ops.__dict__:
        ops.load_library = _bracketed(ops.__dict__["load_library"], lambda self, path, *a, **k: str(path))


def _counted(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    import functools

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        record(name)
        return fn(*args, **kwargs)

    return call


def _patch_entry_points(module: types.ModuleType) -> None:
    top = module.__name__.split(".")[0]
    for attr, value in list(vars(module).items()):
        if attr.startswith("_"):
            continue
        owner = getattr(value, "__module__", None) or ""
        # Functions defined here (not lru_cache'd getters: their cache_clear must stay), and the compiled
        # entry points of the package's own extension (deep_gemm's C++ functions).
        if (isinstance(value, types.FunctionType) and owner == module.__name__) or (
                isinstance(value, types.BuiltinFunctionType) and top in owner):
            setattr(module, attr, _counted(value, f"{module.__name__}.{attr}"))
        elif isinstance(value, type) and owner == module.__name__:
            for method in WRAPPED_METHODS:
                fn = value.__dict__.get(method)
                if isinstance(fn, types.FunctionType):
                    setattr(value, method, _counted(fn, f"{module.__name__}.{attr}.{method}"))


class _Loader(importlib.abc.Loader):
    """The module's own loader, then our patch of what it defined."""

    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[types.ModuleType], None]) -> None:
        self.inner, self.patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        with contextlib.suppress(Exception):
            self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torch._ops":
            patch = _patch_torch_ops
        elif fullname.split(".")[0] in WRAPPED and not SKIPPED_PARTS & set(fullname.split(".")[1:]):
            patch = _patch_entry_points
        else:
            return None
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader, patch)
            return spec
        except Exception:
            return None


def _chain() -> None:
    """Run the sitecustomize this one shadows (the next on sys.path), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def install() -> None:
    if not FOLDER:
        return
    try:
        if "torch._ops" in sys.modules:  # imported before us: patch in place
            _patch_torch_ops(sys.modules["torch._ops"])
        sys.meta_path.insert(0, _Finder())
        _patch_extension_loader()
        os.register_at_fork(after_in_child=_after_fork)
        import atexit

        atexit.register(write)
    except Exception:
        pass


install()
with contextlib.suppress(Exception):
    _chain()
