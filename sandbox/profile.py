"""The bubblewrap profile shell tasks run in: its namespaces, its filesystem, its /etc.

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
  network (slirp4netns) with the host's loopback disabled, see ``egress.py``. The filter is
  ``seccomp.py``; the per-run files that carry it in, ``files.py``.

The pid namespace is what makes timeouts and cancellation complete: when the namespace's
init (bwrap's) dies, the kernel kills every process in it, daemons included, and
``--die-with-parent`` ties that init to the worker. Nothing is left to hunt down afterwards.

Whether this host can provide the profile is ``probe.py``; the argv that puts a command in
it, ``argv.py``. Pure Python, no Django.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
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
