"""Reading the live-log streams (async iterators, as the ASGI server reads them) from a
synchronous test, one chunk at a time so the test can act between two chunks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

CHUNK_TIMEOUT_SECONDS = 60


def sync_chunks(response) -> Iterator[bytes]:
    """The chunks of a streaming response whose content is an async iterator, read on an
    event loop of their own in a thread of their own (this thread may have a loop running
    already: Playwright's sync API keeps one). The stream's database reads run on pool
    threads, so the tests that use this commit their rows (transactional tests)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="sse-reader", daemon=True)
    thread.start()

    def run(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(CHUNK_TIMEOUT_SECONDS)

    chunks = aiter(response.streaming_content)
    try:
        while True:
            try:
                yield run(anext(chunks))
            except StopAsyncIteration:
                return
    finally:
        # Closing the stream runs its cleanup (the tenant's place, the Redis connection).
        run(chunks.aclose())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
