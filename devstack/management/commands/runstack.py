import ctypes
import os
import signal
import sys

from django.core.management.base import BaseCommand, CommandParser

from devstack.localstack import run_local_stack

PR_SET_PDEATHSIG = 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_with_parent() -> None:
    """SIGTERM when the process that started us dies. `make run` stopped with SIGTERM dies
    without passing the signal on (only Ctrl-C reaches the whole process group), which left
    the stack running, orphaned."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: Ctrl-C and SIGTERM to this process still stop it
    if os.getppid() != parent:  # the parent died before the request was in place
        raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Run the whole stack locally (web, beat, worker, Flower, embedded Redis) until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--flower-port", type=int, default=5555)

    def handle(self, *args: object, **options: object) -> None:
        # SIGTERM (a supervisor stopping us) cleans up exactly like Ctrl-C.
        signal.signal(signal.SIGTERM, _interrupt)
        # Ctrl-C even when started from a non-interactive shell, which ignores SIGINT.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _stop_with_parent()
        code = run_local_stack(
            web_port=int(options["port"]),
            flower_port=int(options["flower_port"]),
            stdout=self.stdout,
        )
        sys.exit(code)
