"""Types shared by every handler, plus secret masking and an in-memory log sink.

Nothing here may import Django or Celery: the worker passes settings in as plain values so
handlers can be exercised with real processes and sockets in plain unit tests.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote, quote_plus

MASK = "****"

STATUS_SUCCESS = "success"
STATUS_FAILED = "failed"
STATUS_TIMED_OUT = "timed_out"
STATUS_CANCELLED = "cancelled"
STATUSES = frozenset({STATUS_SUCCESS, STATUS_FAILED, STATUS_TIMED_OUT, STATUS_CANCELLED})

# The error class of an attempt its handler stopped for the worker's preemption: the worker
# hands the run back (the same attempt) instead of finishing it.
PREEMPTED = "preempted"

# Error messages end up in the database and in API responses; keep them readable, not huge.
MAX_ERROR_MESSAGE_CHARS = 4000


class HandlerConfigError(ValueError):
    """A handler configuration is invalid; ``field`` points at the offending key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PermanentError(Exception):
    """Raised by a python handler to say that retrying cannot help."""


class Preempted(Exception):
    """Raised by a python handler that stops early because its worker is being preempted
    (``context.preempted`` is set): the run is handed back, the same attempt, and the next
    claim of it starts from the last checkpoint (``context.resumed_from``)."""


class CheckpointRefused(ValueError):
    """``context.checkpoint(state)`` could not be kept: not JSON, over the size cap, or over
    the tenant's checkpoint budget. Nothing was stored; the previous checkpoint stands."""


class Checkpoints(Protocol):
    """Where a run's checkpoints go (the worker's, `workers.checkpoints`): keyed by the run's
    chain, so every attempt of one run finds the last state any of them saved."""

    file_cap_bytes: int

    def save_state(self, state: Any) -> int:
        """Keep `state` (JSON) at once; its size in bytes, or CheckpointRefused."""
        ...

    def save_file(self, data: bytes) -> int:
        """Keep a shell task's checkpoint file (at most `file_cap_bytes`)."""
        ...

    def resumed_state(self) -> Any:
        """The last state saved by an earlier attempt of this run; None on a first start."""
        ...

    def resumed_file(self) -> bytes | None:
        """The last checkpoint file saved by an earlier attempt of this run."""
        ...

    def watch_file(self, path: str | None) -> None:
        """Save the file at `path` whenever the lease is renewed (None: stop watching)."""
        ...


class LogSink(Protocol):
    def write(self, stream: str, line: str) -> None:
        """Record one line; ``stream`` is "stdout", "stderr" or "system". The sink timestamps."""
        ...


@dataclass
class HandlerContext:
    execution_id: str
    attempt: int
    timeout_seconds: float
    parameters: dict[str, Any]
    log: LogSink
    # Set by another thread (the worker's cancel listener); handlers poll it and stop at once.
    cancel_event: threading.Event
    upstream_results: dict[str, Any] | None = None
    secrets_to_mask: tuple[str, ...] = ()
    # progress(percent, message): the run's progress reporter (None where nothing listens).
    progress: Callable[..., None] | None = None
    # Where checkpoints go (None: this run cannot checkpoint, e.g. a handler's unit test).
    checkpoints: Checkpoints | None = None
    # Set when the worker is being preempted (SIGTERM): the handler has the worker's preempt
    # grace to checkpoint and stop (raise Preempted) before its run is handed back anyway.
    preempted: threading.Event = field(default_factory=threading.Event)

    def checkpoint(self, state: Any) -> None:
        """Keep `state` (JSON, size-capped) for a later attempt of this run, at once."""
        if self.checkpoints is None:
            raise CheckpointRefused("this run has nowhere to keep a checkpoint")
        self.checkpoints.save_state(state)

    @property
    def resumed_from(self) -> Any:
        """The last checkpoint of an earlier attempt of this run (None on a first start)."""
        return None if self.checkpoints is None else self.checkpoints.resumed_state()

    # The W3C trace context of the handler's span ("" when the run is not traced): an http
    # handler sends it as the `traceparent` header, a shell or container task gets it as
    # TRACEPARENT, so what the run calls joins its trace.
    traceparent: str = ""


@dataclass
class HandlerOutcome:
    status: str
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    error_message: str = ""
    error_class: str = ""
    transient: bool = True
    # What the run used: CPU seconds (user + system) and peak memory in bytes (the sandbox's
    # process tree for shell, the pool process's growth for python); None: not measured.
    cpu_seconds: float | None = None
    peak_memory_bytes: int | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == STATUS_SUCCESS


# A base64 core shorter than this is too likely to occur by chance in ordinary output.
MIN_BASE64_CORE = 6


def _base64_cores(raw: bytes) -> set[str]:
    """The base64 characters that depend on `raw` alone, for each of the three alignments it
    can have inside a longer encoded text (base64 of "token: <secret>\n" contains one of
    them, whatever surrounds the secret), in the standard and the URL-safe alphabet."""
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).decode()
        start = -(-offset * 8 // 6)  # ceil: the first character with no prefix bits
        end = (offset + len(raw)) * 8 // 6  # floor: the last character with no suffix bits
        core = encoded[start:end]
        if len(core) >= MIN_BASE64_CORE:
            cores.add(core)
            cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def encoded_forms(secret: str) -> set[str]:
    """The plaintext, JSON-escaped, repr, URL-encoded, hex and base64 forms of a secret."""
    raw = secret.encode("utf-8")
    forms = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(raw)[2:-1],
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        quote(secret),
        raw.hex(),
        raw.hex().upper(),
    }
    forms |= _base64_cores(raw)
    return {form for form in forms if form}


class SecretMasker:
    """Replaces secret values with ``MASK``; build once, apply to many lines."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Every secret in each of its encoded forms (a handler that prints json.dumps(value),
        # repr(value), a URL or base64 would otherwise show it). Longest first, so a form that
        # contains another one is replaced whole rather than leaving its remainder visible
        # around the shorter one's mask.
        forms = {
            form
            for secret in secrets
            if isinstance(secret, str) and secret
            for form in encoded_forms(secret)
        }
        self.secrets: tuple[str, ...] = tuple(sorted(forms, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self.secrets)

    @property
    def longest_bytes(self) -> int:
        return max((len(s.encode("utf-8")) for s in self.secrets), default=0)

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def data(self, value: Any) -> Any:
        """Mask every string (keys included) of a JSON-like structure."""
        if not self.secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                (self.text(k) if isinstance(k, str) else k): self.data(v) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


def mask_text(text: str, secrets: Iterable[str]) -> str:
    return SecretMasker(secrets).text(text)


def mask_data(value: Any, secrets: Iterable[str]) -> Any:
    """Mask secrets in every string (keys included) of a JSON-like structure."""
    return SecretMasker(secrets).data(value)


def mask_outcome(outcome: HandlerOutcome, secrets: Iterable[str]) -> HandlerOutcome:
    """Mask secrets in the parts of an outcome that get stored and shown to users."""
    masker = SecretMasker(secrets)
    if masker:
        outcome.error_message = masker.text(outcome.error_message)
        if outcome.result is not None:
            outcome.result = masker.data(outcome.result)
    return outcome


def clip(text: str, limit: int = MAX_ERROR_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN/Infinity, which JSON columns cannot store."""
    return json.loads(text, parse_constant=_reject_constant)


def to_json_safe(value: Any) -> Any:
    """Round-trip through JSON so the value is exactly what storage will hold.

    Raises ``TypeError``/``ValueError`` when the value is not representable.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite float is not valid JSON")
    return json.loads(json.dumps(value, allow_nan=False))


class MaskingLogSink:
    """Wraps a caller's sink so handlers never hand it an unmasked secret."""

    def __init__(self, inner: LogSink, secrets: Iterable[str]) -> None:
        self._inner = inner
        self._masker = SecretMasker(secrets)

    def write(self, stream: str, line: str) -> None:
        self._inner.write(stream, self._masker.text(line))


def masking_sink(ctx: HandlerContext) -> LogSink:
    if not any(ctx.secrets_to_mask):
        return ctx.log
    return MaskingLogSink(ctx.log, ctx.secrets_to_mask)


class LogLine(NamedTuple):
    timestamp: str
    stream: str
    text: str

    def render(self) -> str:
        return f"{self.timestamp} [{self.stream}] {self.text}"


class BufferedLogSink:
    """Keeps masked, timestamped lines in memory up to ``max_bytes`` of rendered text.

    Once a line would cross the budget, one marker line is appended and every later line is
    only counted (``dropped_bytes``), so memory stays bounded however much a task prints.
    Safe to write from several threads at once.
    """

    def __init__(self, max_bytes: int, secrets: Iterable[str] = ()) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self._masker = SecretMasker(secrets)
        self._lines: list[LogLine] = []
        self._kept_bytes = 0
        self._dropped_bytes = 0
        self._truncated = False
        self._lock = threading.Lock()

    def write(self, stream: str, line: str) -> None:
        with self._lock:
            if self._truncated:
                # Counting raw bytes is enough here; masking dropped text would be wasted work.
                self._dropped_bytes += len(line.encode("utf-8", "replace")) + 1
                return
            line = self._masker.text(line)
            entry = LogLine(_utc_now_iso(), stream, line)
            size = len(entry.render().encode("utf-8", "replace")) + 1  # +1: the newline
            if self._kept_bytes + size > self.max_bytes:
                self._truncated = True
                self._dropped_bytes += size
                marker = f"[log truncated after {self._kept_bytes} bytes]"
                self._lines.append(LogLine(entry.timestamp, "system", marker))
                return
            self._lines.append(entry)
            self._kept_bytes += size

    @property
    def lines(self) -> list[LogLine]:
        with self._lock:
            return list(self._lines)

    @property
    def truncated(self) -> bool:
        return self._truncated

    def last_line_rendered(self) -> str:
        with self._lock:
            return self._lines[-1].render() if self._lines else ""

    @property
    def kept_bytes(self) -> int:
        return self._kept_bytes

    @property
    def dropped_bytes(self) -> int:
        return self._dropped_bytes

    def text(self) -> str:
        return "".join(line.render() + "\n" for line in self.lines)

    def stream_text(self, stream: str) -> str:
        """The kept lines of one stream, without timestamps (handy for assertions)."""
        return "".join(line.text + "\n" for line in self.lines if line.stream == stream)


def _utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
