"""A Redis proxy that loses a fraction of the broker's messages: the design document's chaos
case "drop 50% of broker messages".

It reads what the client sends as RESP (arrays of bulk strings, which is all redis-py
writes) and passes every command through but the pushes that publish a message: kombu's
Redis transport publishes with LPUSH (`Channel._put`, and RPUSH/LPUSH when it restores
unacknowledged messages), and the leader's ringing pipelines LPUSHes
(scheduler_app/ringing/publish.py). A dropped push is not removed but rewritten into
`LLEN <key>`: the server still answers it with an integer, in its place in the stream, so a
pipeline or a MULTI/EXEC around it gets the number of replies it counts on, and the proxy
never has to parse or forge the server's replies. The publisher believes the message went
out; it did not (the message lost after the broker said yes, the worst case).

What the server answers passes back untouched (TcpProxy's pump)."""

from __future__ import annotations

import contextlib
import random
import socket
import threading

from tests.tcp_proxy import TcpProxy

PUSHES = frozenset({b"LPUSH", b"RPUSH"})


class IncompleteCommand(Exception):
    """The buffer ends inside a command: wait for more bytes."""


def parse_command(buffer: bytes, start: int = 0) -> tuple[list[bytes], int]:
    """One RESP command (an array of bulk strings) from `buffer` at `start`: its arguments
    and where the next command starts. Raises IncompleteCommand when it is cut short."""
    if buffer[start : start + 1] != b"*":
        raise ValueError(f"not a RESP array at {start}: {buffer[start : start + 20]!r}")
    end = buffer.find(b"\r\n", start)
    if end < 0:
        raise IncompleteCommand
    count = int(buffer[start + 1 : end])
    position = end + 2
    arguments: list[bytes] = []
    for _ in range(count):
        if buffer[position : position + 1] != b"$":
            if position >= len(buffer):
                raise IncompleteCommand
            raise ValueError(f"not a bulk string at {position}")
        end = buffer.find(b"\r\n", position)
        if end < 0:
            raise IncompleteCommand
        length = int(buffer[position + 1 : end])
        data_start = end + 2
        if len(buffer) < data_start + length + 2:
            raise IncompleteCommand
        arguments.append(buffer[data_start : data_start + length])
        position = data_start + length + 2
    return arguments, position


def encode_command(arguments: list[bytes]) -> bytes:
    parts = [b"*%d\r\n" % len(arguments)]
    for argument in arguments:
        parts.append(b"$%d\r\n%s\r\n" % (len(argument), argument))
    return b"".join(parts)


class RedisDropProxy(TcpProxy):
    """`drop(fraction)` loses that fraction of the pushes from then on (seeded: `seed`),
    `drop(0)` stops; `dropped` and `pushed` count what it lost and let through."""

    def __init__(self, *, upstream_port: int, seed: int = 0, **kwargs) -> None:
        self._random = random.Random(seed)
        self._fraction = 0.0
        self._count_lock = threading.Lock()
        self.dropped = 0
        self.pushed = 0
        super().__init__(upstream_port=upstream_port, **kwargs)

    def drop(self, fraction: float) -> None:
        self._fraction = fraction

    def _should_drop(self) -> bool:
        with self._count_lock:
            lose = self._fraction > 0 and self._random.random() < self._fraction
            if lose:
                self.dropped += 1
            else:
                self.pushed += 1
            return lose

    def _rewrite(self, arguments: list[bytes]) -> bytes:
        is_push = len(arguments) >= 3 and arguments[0].upper() in PUSHES
        if is_push and self._should_drop():
            return encode_command([b"LLEN", arguments[1]])
        return encode_command(arguments)

    def _upstream(self, client: socket.socket, server: socket.socket) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                buffer += data
                position, out = 0, []
                while position < len(buffer):
                    try:
                        arguments, position_next = parse_command(buffer, position)
                    except IncompleteCommand:
                        break
                    out.append(self._rewrite(arguments))
                    position = position_next
                buffer = buffer[position:]
                if out:
                    server.sendall(b"".join(out))
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
