"""A shell task's output, line by line: cut to size, masked, handed to the log sink once.

Only a bounded head of each line and the last stdout line (for the JSON result) are held;
the full line is never in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from handler_contract.base import LogSink, SecretMasker, clip

# Longer lines are cut in the log; the full line is never held in memory.
MAX_LOG_LINE_BYTES = 16 * 1024
# The last stdout line is kept up to this size so it can be parsed as the JSON result.
MAX_RESULT_LINE_BYTES = 1024 * 1024
# How much of the last stderr line goes into error_message.
MAX_STDERR_TAIL_CHARS = 1000


class LineSplitter:
    """Splits a byte stream into lines for the log without ever holding a whole long line."""

    def __init__(
        self,
        stream: str,
        sink: LogSink,
        secrets: Sequence[str],
        *,
        keep_last_line: bool,
        take_line: Callable[[str], bool] | None = None,
    ) -> None:
        self.stream = stream
        # Sees each line first: True when it took the line (a progress report), not logged.
        self._take_line = take_line
        self._sink = sink
        self._masker = SecretMasker(secrets)
        # Keep a little more than we show so a secret straddling the cut is still masked.
        self._head_cap = MAX_LOG_LINE_BYTES + self._masker.longest_bytes
        self._keep_last_line = keep_last_line
        self._head = bytearray()
        self._size = 0
        self._pending = False
        self._body = bytearray()
        self._body_overflow = False
        # Last non-empty line: raw bytes (None if it was too long) and its masked log text.
        self.last_line: bytes | None = None
        self.last_text = ""

    def feed(self, data: bytes) -> None:
        pieces = data.split(b"\n")
        for piece in pieces[:-1]:
            self._append(piece)
            self._end_line()
        self._append(pieces[-1])

    def finish(self) -> None:
        if self._pending:
            self._end_line()

    def _append(self, piece: bytes) -> None:
        if not piece:
            return
        self._pending = True
        self._size += len(piece)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += piece[:room]
        if self._keep_last_line and not self._body_overflow:
            if len(self._body) + len(piece) > MAX_RESULT_LINE_BYTES:
                self._body_overflow = True
                self._body = bytearray()
            else:
                self._body += piece

    def _end_line(self) -> None:
        # NUL cannot be stored in a PostgreSQL text column (a task printing /proc/*/environ
        # would otherwise make its own run unrecordable); it is shown as U+FFFD.
        text = self._head.decode("utf-8", "replace").replace("\x00", "\ufffd")
        if text.endswith("\r") and self._size <= self._head_cap:
            text = text[:-1]
        text = self._masker.text(text)
        if self._size > MAX_LOG_LINE_BYTES:
            text = f"{text[:MAX_LOG_LINE_BYTES]} [line truncated: {self._size} bytes]"
        self.emit_line(text)
        self._head = bytearray()
        self._size = 0
        self._pending = False
        self._body = bytearray()
        self._body_overflow = False

    def emit_line(self, text: str) -> None:
        """Every complete line of the command's stdout or stderr passes here exactly once,
        already masked and cut to size: the one place to interpret a line (the log, the
        last line kept for the JSON result, a `::progress` report taken out of both)."""
        if self._take_line is not None and self._take_line(text):
            return  # taken: neither logged nor the result line
        self._sink.write(self.stream, text)
        if text.strip():
            self.last_text = clip(text, MAX_STDERR_TAIL_CHARS)
            if self._keep_last_line:
                self.last_line = None if self._body_overflow else bytes(self._body)
