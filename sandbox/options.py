"""How a worker runs shell tasks (``ShellSandbox``): the operator's mode and the tenant's
egress right, as the shell handler is given them (built from settings by
`workers.shell_sandbox`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .egress_filter import EgressPolicy
from .probe import MODE_ON
from .profile import DEFAULT_SCRATCH_BYTES
from .tools import DEFAULT_BWRAP


@dataclass(frozen=True)
class ShellSandbox:
    """How the worker runs shell tasks: the operator's mode and the tenant's egress right."""

    mode: str = MODE_ON
    egress_allowed: bool = False
    # This worker runs egress tasks at all (WORKER_SHELL_EGRESS): off on the workers that a
    # deployment keeps next to its data, whose queues never carry one.
    egress_offered: bool = True
    # What egress may not reach beyond the built-in list, and what it may (egress_filter).
    egress_policy: EgressPolicy = field(default_factory=EgressPolicy)
    scratch_bytes: int = DEFAULT_SCRATCH_BYTES
    bwrap: str = DEFAULT_BWRAP  # a name looked up in the system directories, or a path
