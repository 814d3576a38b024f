"""Which user a shell task runs as. A root worker never runs tenant code as root: it starts
the chain with ``setpriv`` as another user (``ROOT_WORKER_RUN_AS`` unless the operator names
one); root would ignore RLIMIT_NPROC (a fork bomb cap) and there is no reason for tenant code
to start from uid 0. An unprivileged worker already runs its tasks unprivileged, as itself.
"""

from __future__ import annotations

import os
import pwd

from .tools import tool_path_cached

# A root worker runs sandboxed tasks as this user unless WORKER_SHELL_RUN_AS_USER names one.
ROOT_WORKER_RUN_AS = "nobody"


def resolve_identity(run_as: str | None) -> tuple[int, int] | None:
    """(uid, gid) to run a shell task as, or None to run it as the worker. Only root can
    switch users; an unprivileged worker already runs tasks unprivileged."""
    if not run_as or os.geteuid() != 0:
        return None

    entry = pwd.getpwnam(run_as)
    return entry.pw_uid, entry.pw_gid


def drop_privileges_argv(run_as: tuple[int, int] | None) -> list[str]:
    """``setpriv`` to start the chain as ``run_as`` (uid, gid): only a root worker has one.
    An exec of setpriv is cheaper than Popen's own ``user=``, which rules out vfork and
    forks the whole worker."""
    if run_as is None:
        return []
    uid, gid = run_as
    setpriv = tool_path_cached("setpriv")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
