"""How a shell run that did not start, or that exited, is told in its outcome."""

from __future__ import annotations

import errno
import signal

from handler_contract.base import STATUS_FAILED, HandlerOutcome

# A start that failed for want of resources is worth another attempt.
TRANSIENT_SPAWN_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE})


def spawn_failure(error_class: str, message: str) -> HandlerOutcome:
    return HandlerOutcome(
        status=STATUS_FAILED, error_class=error_class, error_message=message, transient=False
    )


def describe_exit(returncode: int, *, sandboxed: bool = False) -> str:
    if returncode < 0:
        return f"killed by {_signal_name(-returncode)} (exit code {returncode})"
    if sandboxed and 128 < returncode <= 128 + 64:
        # bwrap reports a command killed by signal n as 128 + n, as shells do.
        return (
            f"exited with code {returncode} (killed by {_signal_name(returncode - 128)}, "
            "or exited with that code)"
        )
    return f"exited with code {returncode}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
