"""Celery handler: send a named Celery task (args/kwargs) to a queue, for schedules imported
from django-celery-beat, whose tasks keep running on the team's existing Celery workers.

The run succeeds once the broker accepted the message; what the task then does is the
consuming worker's business (its result is not awaited: that would hold one of our worker
slots for someone else's job). Broker errors are transient and retried.

The sending function is passed in by the caller (`send_task`, Celery's `app.send_task`
signature); without one, Celery's current app (the worker's own, configured from Django
settings) sends it. No Django import here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import current_app

from handler_contract.base import (
    STATUS_FAILED,
    STATUS_SUCCESS,
    HandlerContext,
    HandlerOutcome,
    clip,
)

SendTask = Callable[..., Any]


def run_celery(
    config: dict[str, Any], ctx: HandlerContext, *, send_task: SendTask | None = None
) -> HandlerOutcome:
    if send_task is None:  # the worker's configured app
        send_task = current_app.send_task
    queue = config["queue"]
    try:
        message = send_task(
            config["task"],
            args=list(config["args"]),
            kwargs=dict(config["kwargs"]),
            queue=queue,
            routing_key=queue,
            headers={"scheduler_execution_id": ctx.execution_id},
        )
    except Exception as error:
        return HandlerOutcome(
            status=STATUS_FAILED,
            error_class="celery_send",
            error_message=clip(f"{type(error).__name__}: {error}"),
            transient=True,
        )
    task_id = getattr(message, "id", None)
    ctx.log.write("system", f"sent {config['task']} to queue {queue} as {task_id}")
    return HandlerOutcome(status=STATUS_SUCCESS, result={"celery_task_id": task_id, "queue": queue})
