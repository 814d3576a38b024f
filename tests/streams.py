"""Reading the live-log streams (async iterators, as the ASGI server reads them) from a
synchronous test, one chunk at a time so the test can act between two chunks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator


def sync_chunks(response) -> Iterator[bytes]:
    """The chunks of a streaming response whose content is an async iterator, read on an
    event loop of this thread's own. The stream's database reads run on asgiref's thread,
    so the tests that use this commit their rows (transactional tests)."""
    loop = asyncio.new_event_loop()
    chunks = aiter(response.streaming_content)
    try:
        while True:
            try:
                yield loop.run_until_complete(anext(chunks))
            except StopAsyncIteration:
                return
    finally:
        # Closing the stream runs its cleanup (the tenant's place, the Redis connection).
        loop.run_until_complete(chunks.aclose())
        loop.close()
