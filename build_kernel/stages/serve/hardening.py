"""The unit's sandbox: each systemd directive with the reason written beside it in the unit.

`systemd-analyze security --offline=yes` rates the unit 1.8 to 1.9 ("OK"; the test holds every shipped recipe to
4.5 or less). What a GPU server needs stays open, each opening with its reason too: the GPU's device nodes,
/dev/shm (NCCL), netlink (getifaddrs), writable-executable memory (JIT compilers). A recipe relaxes a directive
only by naming it with why (`[serve.unit_relax] DIRECTIVE = "why"`): it is then left out and the why written
in its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

# Folders ProtectHome= hides: a serve environment, model or JIT cache in one of them is bound back.
HOMES = ("/home", "/root", "/run/user")

# (directive, value, why), in the order they are written.
SANDBOX: tuple[tuple[str, str, str], ...] = (
    ("NoNewPrivileges", "yes", "no setuid program or file capability can raise the server's privileges"),
    ("CapabilityBoundingSet", "", "an empty capability set: a server on a port above 1024 needs none"),
    ("AmbientCapabilities", "", "and none handed to it"),
    ("ProtectSystem", "strict",
     "the whole file system read-only (the model folder included); writable: StateDirectory=, CacheDirectory= "
     "and the JIT cache below"),
    ("PrivateTmp", "yes", "its own /tmp: triton's and torch's temporary files are no one else's"),
    ("UMask", "0077", "what it writes (JIT kernels, state) is its own alone"),
    ("DevicePolicy", "closed",
     "devices: the pseudo ones (/dev/null, /dev/urandom, ...) and the GPU's below, nothing else"),
    ("DeviceAllow", "char-nvidia-frontend rw", "/dev/nvidia0..N and /dev/nvidiactl (the driver's major 195)"),
    ("DeviceAllow", "char-nvidia-uvm rw", "/dev/nvidia-uvm: CUDA's unified memory"),
    ("DeviceAllow", "char-nvidia-caps rw", "/dev/nvidia-caps/*: MIG instances"),
    ("SupplementaryGroups", "video", "where the driver makes /dev/nvidia* root:video 0660, the GPU is the video "
                                     "group's"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
     "HTTP and NCCL/gloo's TCP bootstrap (INET, INET6), sglang's ZMQ IPC sockets (UNIX), and glibc's "
     "getifaddrs(), which NCCL and gloo call to pick an interface and which reads the list over NETLINK"),
    ("SystemCallFilter", "@system-service pidfd_getfd",
     "the calls a service makes (with @resources: NCCL pins threads with sched_setaffinity, mbind), plus "
     "pidfd_getfd, by which NCCL's cuMem and torch's expandable segments take a peer process's memory handle"),
    ("SystemCallFilter", "~@privileged", "never mount, setuid, swap, load modules; without @debug's "
                                          "perf_event_open the torch profiler (sglang's /start_profile) fails: "
                                          "relax SystemCallFilter to profile"),
    ("SystemCallErrorNumber", "EPERM", "a refused call fails with EPERM (a clear error) instead of killing the "
                                       "server with SIGSYS"),
    ("SystemCallArchitectures", "native", "no 32-bit system calls"),
    ("ProtectKernelTunables", "yes", "/proc/sys and /sys read-only (NCCL only reads them)"),
    ("ProtectKernelModules", "yes", "no module loading: the nvidia modules are loaded at boot, not by the server"),
    ("ProtectKernelLogs", "yes", "no kernel log"),
    ("ProtectControlGroups", "yes", "cgroups read-only"),
    ("ProtectClock", "yes", "no clock changes"),
    ("ProtectHostname", "yes", "no hostname changes"),
    ("ProtectProc", "invisible", "other users' processes are not in its /proc"),
    ("PrivateMounts", "yes", "its mounts are its own"),
    ("RestrictNamespaces", "yes", "no new namespaces"),
    ("RestrictRealtime", "yes", "no realtime scheduling that could starve the host"),
    ("RestrictSUIDSGID", "yes", "it cannot make setuid/setgid files"),
    ("LockPersonality", "yes", "no execution-domain changes"),
    ("KeyringMode", "private", "its own kernel keyring"),
    ("RemoveIPC", "yes", "its System V / POSIX IPC objects (NCCL's /dev/shm segments) go when it stops"),
)
# Set elsewhere in the unit but relaxable all the same.
OTHER = ("DynamicUser", "ProtectHome")

# What is left out on purpose, written as comments where it would stand.
LEFT_OUT: tuple[tuple[str, str], ...] = (
    ("PrivateDevices=yes", "it would hide /dev/nvidia*; DevicePolicy=closed and DeviceAllow= above keep the rest out"),
    ("MemoryDenyWriteExecute=yes", "triton's and nvrtc's JIT compilers and libffi's closures (ctypes callbacks) "
                                   "need writable-executable memory"),
    ("PrivateUsers=yes", "the GPU's device nodes (root:video) would be owned by nobody inside it"),
    ("ProcSubset=pid", "psutil reads /proc/meminfo and NCCL /proc/sys: they must stay visible"),
    ("PrivateNetwork=yes", "it serves over the network"),
    ("IPAddressAllow=/IPAddressDeny=", "who may connect is the API key's business and the firewall's; a drop-in "
                                       "with IPAddressAllow= narrows it"),
    ("/dev/shm", "stays the host's, writable (ProtectSystem= leaves /dev alone): NCCL's intra-node buffers live there"),
)


def relaxable() -> tuple[str, ...]:
    """Every directive a recipe may name in `[serve.unit_relax]`."""
    return tuple(dict.fromkeys([*(d for d, _, _ in SANDBOX), *OTHER]))


def under_home(path: str) -> bool:
    return any(path == h or path.startswith(h + "/") for h in HOMES)


def _why(text: str) -> str:
    return "# " + text.replace("\n", " ")


def lines(*, user: str, relax: Mapping[str, str], read: Iterable[str] = (), write: Iterable[str] = ()) -> list[str]:
    """The [Service] lines of the sandbox. `read`: folders the server reads (its environments, the model);
    `write`: folders it writes besides its own (the JIT cache). Under a home folder they are bound back."""
    out: list[str] = []

    def put(directive: str, value: str, why: str) -> None:
        if directive in relax:
            out.append(_why(f"{directive}={value} relaxed by the recipe ([serve.unit_relax]): {relax[directive]}"))
        else:
            out.extend([_why(why), f"{directive}={value}"])

    if user:
        put("User", user, "[serve] user: a system user of its own, which owns the prewarmed JIT cache")
    else:
        put("DynamicUser", "yes", "a user made for this service alone, gone when it stops; it owns only its "
                                  "StateDirectory= and CacheDirectory=")
    read, write = sorted(set(read)), sorted(set(write))
    homed = [p for p in [*read, *write] if under_home(p)]
    if homed:
        put("ProtectHome", "tmpfs", "home folders are empty; the environments, model and caches the server needs "
                                    "are bound back below (read-only but for the JIT cache)")
        if "ProtectHome" not in relax:
            out += [f"BindReadOnlyPaths={_path(p)}" for p in read if under_home(p)]
            out += [f"BindPaths={_path(p)}" for p in write if under_home(p)]
    else:
        put("ProtectHome", "yes", "home folders are invisible")
    for directive, value, why in SANDBOX:
        put(directive, value, why)
    writable = [p for p in write if not under_home(p)]
    if writable and "ProtectSystem" not in relax:
        out += [_why("the JIT cache: tvm-ffi takes a lock and runs ninja in it even for a prewarmed module"),
                *(f"ReadWritePaths={_path(p)}" for p in writable)]
    out.append("# Left out on purpose:")
    out += [_why(f"{what}: {why}") for what, why in LEFT_OUT]
    return out


def _path(path: str) -> str:
    """A path in a unit: `%` doubled (a specifier otherwise), quoted when it holds a space."""
    path = path.replace("%", "%%")
    return f'"{path}"' if " " in path else path


def unknown(relax: Sequence[str]) -> list[str]:
    return [d for d in relax if d not in relaxable()]


def folder_of(python: str) -> str:
    """The environment a `.../bin/python` belongs to (its prefix), else the interpreter's folder."""
    p = Path(python)
    return str(p.parent.parent if p.parent.name == "bin" else p.parent)
