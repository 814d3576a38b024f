import signal
import sys

from django.core.management.base import BaseCommand, CommandParser

from scheduler_app.localstack import run_local_stack


def _interrupt(signum: int, frame: object) -> None:
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
        code = run_local_stack(
            web_port=int(options["port"]),
            flower_port=int(options["flower_port"]),
            stdout=self.stdout,
        )
        sys.exit(code)
