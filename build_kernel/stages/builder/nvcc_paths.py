"""A compiler launcher that makes nvcc's output independent of the folder the build runs in.

    python -S .../build_kernel/stages/builder/nvcc_paths.py --map OLD=NEW [--map OLD=NEW]... -- [launcher...] nvcc args...

Two things of a CUDA object name the folder it was compiled in:
- `__FILE__` and the host compiler's paths: `-Xcompiler=-ffile-prefix-map=OLD=NEW`, the same for every compile,
  given through NVCC_APPEND_FLAGS (reproducible.py), not here: an argument with the build's absolute folder in
  it would cost a compile cache its hits across folders (ccache 4.7 measured: nvcc with it misses, without hits);
- the anonymous-namespace names (`_GLOBAL__N__<hash>_13_activation_cu_<hash>`), in the host object and in
  the fatbin: cudafe++ hashes the source's absolute path (`--orig_src_path_name`, which nvcc always passes
  absolute). Measured with nvcc 13.0: the same file in two folders gives two names; a constant name gives
  one name for two files of different content (an ODR hazard), so each compile is given its own path with
  the prefix mapped: `-Xcudafe --orig_src_path_name=./csrc/x.cu` (cudafe++ takes the last one given; a path
  relative to the build, so a compile cache in front of nvcc hashes the same words in any folder).

A third names the compile itself: nvcc's host object names its STT_FILE symbol after nvcc's temporary file,
`tmpxft_<pid>_00000000-6_x.cudafe1.cpp`, in .strtab only. A stripped library (CMake's install) loses it and ld's
build ID does not hash it, but an unstripped one (setuptools) keeps it: so the compile runs with `-keep` into a
fresh folder of its own, removed after (the same files nvcc writes to TMPDIR and removes), where the names are
the source's (`x.compute_120a.cudafe1.cpp`). Not behind a compile cache (ccache, sccache): `-keep` would change
how they treat the command; their builds keep the pid in an unstripped library's .strtab.

It runs once per compile and must start fast (recorder.py says why): standard library only.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

CACHE_LAUNCHERS = ("ccache", "sccache", "buildcache")
SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")  # CMake may hand nvcc a .cpp as CUDA
# Arguments whose next word is a file of this compile that is not the source.
_TAKES_VALUE = {"-o", "-MF", "-MT", "-MQ", "--output-file", "--dependency-output", "-include", "-isystem", "-I",
                "-x", "-ccbin", "--compiler-bindir", "-Xcompiler", "-Xcudafe", "-Xptxas", "-Xlinker", "-Xnvlink"}


def mapped(path: str, maps: list[tuple[str, str]]) -> str:
    """`path` with its prefix replaced as gcc's -ffile-prefix-map does it (the last matching map wins)."""
    for old, new in reversed(maps):
        if path == old or path.startswith(old.rstrip("/") + "/"):
            return new + path[len(old.rstrip("/")):]
    return path


def source_of(args: list[str]) -> str | None:
    """The one CUDA source of a compile command; None when there is none or more than one (left alone)."""
    found, skip = [], False
    for arg in args[1:]:
        if skip:
            skip = False
        elif arg in _TAKES_VALUE:
            skip = True
        elif arg.endswith(SOURCE_SUFFIXES) and not arg.startswith("-"):
            found.append(arg)
    return found[0] if len(found) == 1 else None


def rewrite(command: list[str], maps: list[tuple[str, str]]) -> list[str]:
    """`command` (`[launcher...] nvcc args...`) with cudafe++ given the source's mapped path."""
    source = source_of(command)
    if source is None:
        return command
    return [*command, "-Xcudafe", f"--orig_src_path_name={mapped(os.path.abspath(source), maps)}"]


def parse(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    maps: list[tuple[str, str]] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--map" and i + 1 < len(argv):
            old, _, new = argv[i + 1].partition("=")
            maps.append((old, new))
            i += 2
        else:
            raise SystemExit(f"nvcc_paths: unknown argument {argv[i]!r} (usage: --map OLD=NEW ... -- command)")
    return maps, argv[i + 1:]


def run_kept(command: list[str]) -> int:
    """`command -keep -keep-dir <fresh folder>`, the folder removed after; the compile's exit status (128 + signal
    for a compile killed by one, as a shell says it)."""
    keep = tempfile.mkdtemp(prefix="nvcc-keep-")
    try:
        pid = os.posix_spawnp(command[0], [*command, "-keep", "-keep-dir", keep], os.environ)
        _, status = os.waitpid(pid, 0)
    finally:
        shutil.rmtree(keep, ignore_errors=True)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def main() -> None:
    maps, command = parse(sys.argv[1:])
    if not command:
        raise SystemExit("nvcc_paths: no command after --")
    command = rewrite(command, maps)
    if source_of(command) is None or os.path.basename(command[0]) in CACHE_LAUNCHERS:
        os.execvp(command[0], command)
    sys.exit(run_kept(command))


if __name__ == "__main__":
    main()
