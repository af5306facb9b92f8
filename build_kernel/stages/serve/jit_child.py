"""Run by the serve interpreter (`python jit_child.py list|build|load JSON`): sglang's own JIT builders,
found and called there. It imports nothing of build_kernel (the serve environment need not have it).

`list`: the builders an entry names (`module`: each zero-argument `_jit_*_module` it defines;
`module:builder`: that one). `build`: call one builder with the GPU reported as the asked arch
(sglang's `override_jit_cuda_arch` for `load_jit`'s flags and `TVM_FFI_CUDA_ARCH_LIST`; and
`torch.cuda.is_available`/`get_device_capability` for builders that ask the GPU themselves, as
`nvfp4._nvfp4_arch_env` does), with `tvm_ffi.cpp.load_inline`/`load` replaced by tvm-ffi's public
`build_inline`/`build` (same arguments, so the same cache entry; nothing is loaded: the host may
have no GPU). `cache_once` is bypassed (`inspect.unwrap`), so several archs build in one process.
Each answer is one `@@JIT-PREWARM@@{json}` line; a failure is `{"error": kind, "detail": ...}`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

MARK = "@@JIT-PREWARM@@"
BUILDER = re.compile(r"^_jit_\w+_module$")


class Failed(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise Failed("module", f"no module {exc.name!r} (importing {name})") from None
    except Exception as exc:  # an import-time failure of sglang's own
        raise Failed("import", f"importing {name}: {type(exc).__name__}: {exc}") from None


def _raw(module: ModuleType, name: str) -> Callable[[], Any]:
    fn = getattr(module, name, None)
    if not callable(fn):
        raise Failed("builder", f"{module.__name__} has no builder {name!r}")
    raw = inspect.unwrap(fn)
    needs = [p.name for p in inspect.signature(raw).parameters.values()
             if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if needs:
        raise Failed("arguments", f"{module.__name__}:{name} needs arguments ({', '.join(needs)})")
    return raw  # type: ignore[no-any-return]


def builders(entry: str) -> list[str]:
    mod_name, _, one = entry.partition(":")
    module = _module(mod_name)
    if one:
        _raw(module, one)
        return [one]
    names = []
    for name, fn in sorted(vars(module).items()):
        if BUILDER.match(name) and callable(fn) and getattr(fn, "__module__", "") == mod_name:
            try:
                _raw(module, name)
                names.append(name)
            except Failed:  # a builder of template arguments: compiled per call, not ahead of time
                continue
    if not names:
        raise Failed("builder", f"{mod_name} defines no `_jit_*_module` builder without arguments")
    return names


@contextlib.contextmanager
def _as_gpu(arch: str) -> Iterator[None]:
    m = re.match(r"^(\d+)\.(\d+)([af]?)$", arch)
    if m is None:
        raise Failed("arch", f"not an arch: {arch!r}")
    major, minor, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
    import torch

    try:
        from sglang.jit_kernel.utils import override_jit_cuda_arch  # type: ignore[import-not-found]
    except ImportError as exc:
        raise Failed("sglang", f"this sglang has no sglang.jit_kernel.utils.override_jit_cuda_arch ({exc})") from None
    cuda: Any = torch.cuda
    saved = cuda.is_available, cuda.get_device_capability
    cuda.is_available = lambda: True
    cuda.get_device_capability = lambda device=None: (major, minor)
    try:
        with override_jit_cuda_arch(major, minor, suffix):
            yield
    finally:
        cuda.is_available, cuda.get_device_capability = saved


def build(entry: str, builder: str, arch: str) -> list[dict[str, Any]]:
    module = _module(entry.partition(":")[0])
    raw = _raw(module, builder)
    # Typed as Any: the serve environment's tvm-ffi, whatever its stubs say (its loaders are swapped below).
    cpp: Any = importlib.import_module("tvm_ffi.cpp")

    built: list[dict[str, Any]] = []

    def recording(build_fn: Callable[..., str]) -> Callable[..., str]:
        def run(name: str, *args: Any, **kwargs: Any) -> str:
            kwargs.pop("keep_module_alive", None)
            start = time.monotonic()
            path = build_fn(name, *args, **kwargs)
            built.append({"name": name, "so": path, "seconds": round(time.monotonic() - start, 2)})
            return path
        return run

    saved = cpp.load_inline, cpp.load
    cpp.load_inline, cpp.load = recording(cpp.build_inline), recording(cpp.build)
    try:
        with _as_gpu(arch):
            raw()
    except Failed:
        raise
    except Exception as exc:
        text = str(exc)
        print(text, file=sys.stderr)  # the whole ninja/nvcc output, for the log
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        first = next((ln for ln in lines if re.search(r"\berror\b", ln)), lines[0] if lines else type(exc).__name__)
        raise Failed("compile", f"{type(exc).__name__}: {first}") from None
    finally:
        cpp.load_inline, cpp.load = saved
    if not built:
        raise Failed("builder", f"{entry}:{builder} compiled nothing through tvm_ffi.cpp (not a load_jit builder?)")
    return built


def load(entry: str, builder: str, arch: str) -> dict[str, Any]:
    """sglang's builder as the server runs it (tvm-ffi's real load_inline: ninja, then the module loaded)."""
    raw = _raw(_module(entry.partition(":")[0]), builder)
    start = time.monotonic()
    with _as_gpu(arch):
        module = raw()
    return {"seconds": round(time.monotonic() - start, 3), "module": type(module).__name__}


def main(argv: list[str]) -> int:
    mode, spec = argv[1], json.loads(argv[2])
    try:
        if mode == "list":  # every entry answered, so that all bad ones are named at once
            out: Any = {}
            for entry in spec["entries"]:
                try:
                    out[entry] = builders(entry)
                except Failed as exc:
                    out[entry] = {"error": exc.kind, "detail": exc.detail}
        elif mode == "load":
            out = load(spec["entry"], spec["builder"], spec["arch"])
        else:
            out = build(spec["entry"], spec["builder"], spec["arch"])
    except Failed as exc:
        print(MARK + json.dumps({"error": exc.kind, "detail": exc.detail}), flush=True)
        return 3
    print(MARK + json.dumps({"ok": out}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
