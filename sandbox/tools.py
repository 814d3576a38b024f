"""Where the sandbox's helper programs are: bwrap, setpriv, prlimit, slirp4netns, ip, nsenter.

Looked up in the system directories only, never in ``$PATH``, which could put another program
in their place.
"""

from __future__ import annotations

import os
import shutil
from functools import lru_cache

DEFAULT_BWRAP = "bwrap"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def tool_path(name: str) -> str | None:
    """An absolute path for ``name`` (a bare name is looked up in the system directories)."""
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path=SYSTEM_PATH)


@lru_cache(maxsize=16)
def tool_path_cached(name: str) -> str:
    """`tool_path` for every run's argv, looked up once per process (the availability
    probe, which says whether the tool is there at all, uses `tool_path`)."""
    return tool_path(name) or name
