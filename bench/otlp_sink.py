"""A null OTLP/HTTP receiver for benchmarks: takes every export, answers 200, keeps only
counts. The stack's processes export to it as they would to a collector, so a bench with
tracing on pays the spans, their encoding and their sending, and nothing of a collector's
own work lands in what it measures (the sink's CPU is in the bench's "rest")."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class NullOtlpSink:
    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.requests += 1
                sink.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    # A sink of its own process (`bench trace_instructions`: its work then stays out of the
    # counted process): prints its URL, serves until its stdin closes.
    import sys

    running = NullOtlpSink()
    print(running.url, flush=True)
    sys.stdin.read()
    running.close()
