"""Server-Sent Events as a client reads them (a run's live log stream)."""

from __future__ import annotations

from collections.abc import Iterator

import requests


def server_sent_events(response: requests.Response) -> Iterator[tuple[str, str, str | None]]:
    """(event type, data, id) per Server-Sent Event; comments (keepalives) are skipped."""
    kind, data, event_id = "message", [], None
    for raw in response.iter_lines(chunk_size=None, decode_unicode=True):
        line = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        if line == "":
            if data:
                yield kind, "\n".join(data), event_id
            kind, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
        elif name == "id":
            event_id = value
