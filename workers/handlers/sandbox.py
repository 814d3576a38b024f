"""The bubblewrap profile shell tasks run in, and whether this host can provide it.

What a sandboxed command sees (the manual's docs/tasks/shell-sandbox.md says the same to tenants):

* its own user, PID, IPC, UTS, cgroup, mount and network namespaces; a fresh ``/proc`` that
  lists only the task's own processes (so ``/proc/*/environ`` of the worker does not exist
  for it); no capabilities; a new session (no terminal to inject keystrokes into);
* read-only ``/usr`` (with ``/bin``, ``/sbin``, ``/lib*`` as on the host: symlinks into
  ``/usr`` or read-only binds), a minimal ``/etc`` (generated passwd/group/hosts naming only
  the sandbox user, plus nsswitch, ld.so cache, alternatives, CA certificates and localtime),
  a minimal ``/dev``, and empty private tmpfs ``/tmp`` and ``/task`` (the work directory);
  nothing else: not the project checkout, ``var/``, ``.env``, sockets, ``/run``, ``/home``,
  ``/var``, ``/sys`` or another task's directory;
* network ``none`` by default: an empty network namespace, and a seccomp filter that refuses
  to create any socket other than AF_UNIX (so not even its own loopback) and refuses
  io_uring (which could create sockets behind the filter's back); ``egress``: a user-mode
  network (slirp4netns) with the host's loopback disabled, see ``egress.py``.

The pid namespace is what makes timeouts and cancellation complete: when the namespace's
init (bwrap's) dies, the kernel kills every process in it, daemons included, and
``--die-with-parent`` ties that init to the worker. Nothing is left to hunt down afterwards.

Pure Python, no Django: the worker passes the mode in.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache

# Where the task's work directory is, inside the sandbox (a fresh tmpfs every run).
SANDBOX_WORKDIR = "/task"
SANDBOX_USER = "task"
SANDBOX_HOSTNAME = "task"
# Each private tmpfs (/tmp and the work directory) holds at most this much by default; tmpfs
# lives in memory, so an unbounded one would let a task fill the host's RAM.
DEFAULT_SCRATCH_BYTES = 1024**3

NETWORK_NONE = "none"
NETWORK_EGRESS = "egress"
NETWORK_MODES = (NETWORK_NONE, NETWORK_EGRESS)

MODE_ON = "on"
MODE_OFF = "off"
DEFAULT_BWRAP = "bwrap"

# What a command needs from the host's /etc (dynamic linker cache, name service switch,
# alternatives symlinks for awk & co, CA certificates, the time zone), copied once per worker
# process into a directory the sandboxes get read-only as their /etc: one bind mount per run
# instead of one per file. Symlinks stay symlinks (they point into /usr). Nothing else of
# /etc (hostname, resolv.conf, machine-id, ssl/private, anything an operator put there);
# passwd, group and hosts are generated.
ETC_COPIED = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust/extracted",
    "localtime",
    "timezone",
    "os-release",
    "mime.types",
)
ETC_DIR_PREFIX = "task-run-etc-"
# Top-level directories that merged-/usr systems turn into symlinks into /usr.
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run on this host (missing, or user namespaces are disabled)."""


@dataclass(frozen=True)
class SandboxStatus:
    """What this worker does with shell tasks; ``detail`` says why, for readiness and logs."""

    mode: str  # "on" or "off"
    available: bool
    detail: str

    @property
    def runs_shell_tasks(self) -> bool:
        return self.mode == MODE_OFF or self.available

    def describe(self) -> str:
        if self.mode == MODE_OFF:
            return "off (WORKER_SHELL_SANDBOX=off): shell tasks run unsandboxed"
        if self.available:
            return f"on ({self.detail})"
        return f"unavailable: {self.detail}"


def tool_path(name: str) -> str | None:
    """An absolute path for ``name`` (a bare name is looked up in the system directories)."""
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")


@lru_cache(maxsize=16)
def tool_path_cached(name: str) -> str:
    """`tool_path` for every run's argv, looked up once per process (the availability
    probe, which says whether the tool is there at all, uses `tool_path`)."""
    return tool_path(name) or name


# A failed probe is tried again after this long (a start-up failure may be transient, e.g.
# EAGAIN under load); a working sandbox is remembered for the life of the process.
PROBE_RETRY_SECONDS = 30.0
_probed: dict[tuple[tuple[int, int] | None, str], tuple[SandboxStatus, float]] = {}


def probe_bubblewrap(
    run_as: tuple[int, int] | None = None, bwrap_name: str = DEFAULT_BWRAP
) -> SandboxStatus:
    """Start one sandbox with this very profile (``true`` inside), once per process.

    Being installed is not enough: user namespaces may be disabled by sysctl, by a container
    runtime's seccomp or AppArmor profile, or by a pod's security context, and bwrap then
    fails at start-up. Only running it tells.
    """
    key = (run_as, bwrap_name)
    known = _probed.get(key)
    if known is not None and (known[0].available or time.monotonic() < known[1]):
        return known[0]
    status = _probe(run_as, bwrap_name)
    _probed[key] = (status, time.monotonic() + PROBE_RETRY_SECONDS)
    return status


def _probe(run_as: tuple[int, int] | None, bwrap_name: str) -> SandboxStatus:
    bwrap = tool_path(bwrap_name)
    if bwrap is None:
        return SandboxStatus(MODE_ON, False, f"bubblewrap ({bwrap_name}) is not installed")
    # Local: spawn imports this module at load time; a module-level import here would close
    # the cycle.
    from .spawn import gate_sets_limits, sandboxed_argv  # noqa: PLC0415

    if not gate_sets_limits(run_as) and tool_path("prlimit") is None:
        return SandboxStatus(MODE_ON, False, "prlimit (util-linux) is not installed")

    with SandboxFiles(network=NETWORK_NONE, upstream=None) as files:
        argv = sandboxed_argv(["true"], limits=[], files=files, run_as=run_as, bwrap=bwrap)
        try:
            probe = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                env={"PATH": "/usr/bin:/bin"},
                pass_fds=files.fds(),
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return SandboxStatus(MODE_ON, False, f"bwrap could not be started: {error}")
    if probe.returncode != 0:
        reason = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        message = reason[-1] if reason else f"exit code {probe.returncode}"
        return SandboxStatus(
            MODE_ON,
            False,
            f"bwrap cannot create its namespaces here ({message}); user namespaces are "
            "probably disabled for this process",
        )
    return SandboxStatus(MODE_ON, True, f"bubblewrap at {bwrap}")


def drop_privileges_argv(run_as: tuple[int, int] | None) -> list[str]:
    """``setpriv`` to start the chain as ``run_as`` (uid, gid): only a root worker has one.
    An exec of setpriv is cheaper than Popen's own ``user=``, which rules out vfork and
    forks the whole worker."""
    if run_as is None:
        return []
    uid, gid = run_as
    setpriv = tool_path_cached("setpriv")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def sandbox_status(
    mode: str, run_as: tuple[int, int] | None = None, bwrap_name: str = DEFAULT_BWRAP
) -> SandboxStatus:
    if mode == MODE_OFF:
        return SandboxStatus(MODE_OFF, tool_path(bwrap_name) is not None, "")
    return probe_bubblewrap(run_as, bwrap_name)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # not CLOEXEC: pass_fds hands it to bwrap
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


@lru_cache(maxsize=4)
def sandbox_etc(identity: tuple[int, int]) -> str:
    """The sandboxes' /etc for this process, built on first use, removed at exit.

    ``identity``: the (uid, gid) the sandbox runs as, named `task` in its passwd. bwrap maps
    it to itself (no ``--uid``): another uid inside would make bwrap nest a second user
    namespace on every run, which costs time and buys nothing here."""
    # A root worker's sandboxes run as another user, who must be able to reach the
    # directory: the system's /tmp, not a TMPDIR that may sit under a private directory.
    root = tempfile.mkdtemp(prefix=ETC_DIR_PREFIX, dir="/tmp" if os.geteuid() == 0 else None)  # noqa: S108
    atexit.register(shutil.rmtree, root, True)
    for name in ETC_COPIED:
        source = os.path.join("/etc", name)
        target = os.path.join(root, name)
        if not os.path.lexists(source):
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
            elif os.path.isdir(source):
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target)
        except OSError:
            continue  # unreadable to this user: the sandbox goes without it
    generated = {
        "passwd": _passwd(*identity),
        "group": _group(identity[1]),
        "hosts": b"127.0.0.1 localhost\n::1 localhost\n",
        # Used with egress only: slirp4netns answers DNS there, forwarding to the host's.
        "resolv.conf": b"nameserver 10.0.2.3\n",
    }
    for name, data in generated.items():
        with open(os.path.join(root, name), "wb") as fh:
            fh.write(data)
    # Readable by the sandbox's user (a root worker starts sandboxes as another user).
    for directory, _dirs, _files in os.walk(root):
        os.chmod(directory, 0o755)  # noqa: S103 (nothing secret in it; the tasks read it)
    return root


class SandboxFiles:
    """The per-run files bwrap copies into the sandbox, as memfds (nothing on disk).

    bwrap reads each descriptor to its end, so they cannot be shared between runs.
    """

    def __init__(self, *, network: str, upstream: bytes | None) -> None:
        self._entries: list[tuple[str, str, int]] = []  # (bwrap option, destination, fd)
        try:
            if upstream is not None:
                self._add("--file", f"{SANDBOX_WORKDIR}/upstream_results.json", upstream)
            self.seccomp_fd: int | None = None
            program = socket_filter_program() if network == NETWORK_NONE else None
            if program is not None:
                self.seccomp_fd = _memfd("seccomp", program)
        except BaseException:
            self.close()
            raise

    def _add(self, option: str, destination: str, data: bytes) -> None:
        self._entries.append((option, destination, _memfd(destination, data)))

    def bwrap_options(self) -> list[str]:
        options: list[str] = []
        for option, destination, fd in self._entries:
            options += [option, str(fd), destination]
        if self.seccomp_fd is not None:
            options += ["--seccomp", str(self.seccomp_fd)]
        return options

    def fds(self) -> tuple[int, ...]:
        fds = [fd for _option, _destination, fd in self._entries]
        if self.seccomp_fd is not None:
            fds.append(self.seccomp_fd)
        return tuple(fds)

    def close(self) -> None:
        for fd in self.fds():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._entries = []
        self.seccomp_fd = None

    def __enter__(self) -> SandboxFiles:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _passwd(uid: int, gid: int) -> bytes:
    lines = [f"{SANDBOX_USER}:x:{uid}:{gid}:task:{SANDBOX_WORKDIR}:/bin/sh"]
    if uid != 65534:
        lines.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
    return ("\n".join(lines) + "\n").encode()


def _group(gid: int) -> bytes:
    lines = [f"{SANDBOX_USER}:x:{gid}:"]
    if gid != 65534:
        lines.append("nogroup:x:65534:")
    return ("\n".join(lines) + "\n").encode()


@lru_cache(maxsize=1)
def _system_options() -> tuple[str, ...]:
    """/usr and the top-level system directories as this host has them (looked at once)."""
    options = ["--ro-bind", "/usr", "/usr"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            options += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            options += ["--ro-bind", path, path]
    return tuple(options)


def filesystem_options(
    *, identity: tuple[int, int], scratch_bytes: int = DEFAULT_SCRATCH_BYTES
) -> list[str]:
    """bwrap options for the read-only system view and the private scratch space."""
    options = [*_system_options(), "--ro-bind", sandbox_etc(identity), "/etc"]
    options += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(scratch_bytes),
        "--tmpfs",
        "/tmp",  # noqa: S108 (a private tmpfs inside the sandbox, not the host's /tmp)
        "--size",
        str(scratch_bytes),
        "--tmpfs",
        SANDBOX_WORKDIR,
        "--chdir",
        SANDBOX_WORKDIR,
    ]
    return options


def namespace_options() -> list[str]:
    return [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
        "--unshare-net",
        "--hostname",
        SANDBOX_HOSTNAME,
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
    ]


# --- seccomp: no sockets but AF_UNIX -----------------------------------------------------
# A classic BPF program, assembled here so no compiler or libseccomp binding is needed.
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EAFNOSUPPORT = 97
_ENOSYS = 38
_EPERM = 1
_AF_UNIX = 1
_X32_SYSCALL_BIT = 0x40000000
# (audit arch, socket, io_uring_setup) per machine.
_SYSCALLS = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


@lru_cache(maxsize=1)
def socket_filter_program() -> bytes | None:
    """socket(2) with any family but AF_UNIX fails with EAFNOSUPPORT; io_uring_setup(2)
    fails with EPERM; syscalls of a foreign ABI (x32, 32-bit compat) fail with ENOSYS.
    None on machines this does not know (the empty network namespace still holds there)."""
    known = _SYSCALLS.get(platform.machine())
    if known is None:
        return None
    arch, socket_nr, io_uring_setup_nr = known
    program = [
        _insn(_BPF_LD_W_ABS, 0, 0, 4),  # 0: A = arch
        _insn(_BPF_JEQ_K, 1, 0, arch),  # 1: native ABI? skip the next
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),  # 2: foreign ABI
        _insn(_BPF_LD_W_ABS, 0, 0, 0),  # 3: A = syscall number
        _insn(_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT),  # 4: x32 ABI?
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),  # 5
        _insn(_BPF_JEQ_K, 0, 1, io_uring_setup_nr),  # 6
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _EPERM),  # 7
        _insn(_BPF_JEQ_K, 0, 3, socket_nr),  # 8: socket? else allow (12)
        _insn(_BPF_LD_W_ABS, 0, 0, 16),  # 9: A = family (low 32 bits of args[0])
        _insn(_BPF_JEQ_K, 1, 0, _AF_UNIX),  # 10: AF_UNIX? allow (12)
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _EAFNOSUPPORT),  # 11
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),  # 12
    ]
    return b"".join(program)
