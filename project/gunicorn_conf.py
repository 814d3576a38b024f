"""The web tier's server settings, one file for `make run`, the image, compose and Kubernetes:

    gunicorn --config python:project.gunicorn_conf project.asgi:application

gunicorn supervises uvicorn workers running the ASGI application: a live-log stream (Server-
Sent Events) waits on Redis without holding a worker or a thread, so open streams do not
delay other requests. Command-line flags override these values (`make run` binds to
127.0.0.1 on a free port and starts two workers).
"""

from __future__ import annotations

import os

worker_class = "uvicorn_worker.UvicornWorker"
bind = os.environ.get("WEB_BIND", "0.0.0.0:8000")
# gunicorn reads WEB_CONCURRENCY itself too; said here so the default is visible.
workers = int(os.environ.get("WEB_CONCURRENCY", "3"))
# A worker that stops answering gunicorn's heartbeat for this long is restarted (a slow
# request alone does not trip it: uvicorn's event loop keeps beating).
timeout = 60
# On SIGTERM open streams get this long; their clients reconnect with Last-Event-ID.
graceful_timeout = 20
accesslog = "-"
