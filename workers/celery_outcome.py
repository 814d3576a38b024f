"""What Celery (and so Flower) is told about a doorbell once its runs ended.

The run's truth is its row in PostgreSQL; Celery only sees the doorbell message. Returning
normally made every doorbell SUCCESS, a failed run included, and Flower's home page said
"Failed 0". So:

- a single run's doorbell carries the execution id as its Celery task id (ringing.publish);
  when its run ended `failed`, `timed_out` or `cancelled`, the task raises RunDidNotSucceed
  *after* the run was recorded: Celery marks it FAILURE (a `task-failed` event, what Flower
  reads) and acknowledges the message (acks_late acknowledges a failure as well), so the
  at-least-once delivery and the run's own retries (new rows, new ids) are untouched;
- when the doorbell did not end its run (a duplicate delivery the claim refused, a run
  deferred over quota, released at shutdown, or whose finish lost its claim), the task
  raises celery's Ignore: acknowledged, and no terminal event, because Flower keeps a
  SUCCESS against a later FAILURE of the same task id: the delivery that does end the run
  reports it;
- a batch doorbell (many runs, one message: workers.runner) is FAILURE when any of its runs
  failed, with the counts in the exception; which one failed is on the runs' pages, not in
  Flower.
"""

from __future__ import annotations

from collections.abc import Mapping

from celery.exceptions import Ignore

from scheduler_app.choices import ExecutionStatus

NOT_SUCCEEDED = (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.CANCELLED)


class RunDidNotSucceed(Exception):
    """A doorbell's run (or some of a batch's) ended without success. Declared in the tasks'
    `throws`, so the worker logs it in one line, without a traceback."""


def single_run_outcome(execution_id: str, outcome: str) -> str:
    """What `workers.run_execution` ends with, given `execution_run`'s outcome."""
    if outcome == ExecutionStatus.SUCCESS:
        return f"execution {execution_id}: success"
    if outcome in NOT_SUCCEEDED:
        raise RunDidNotSucceed(f"execution {execution_id}: {outcome}")
    raise Ignore(f"execution {execution_id}: {outcome} (another delivery ends it)")


def batch_outcome(summary: str, counts: Mapping[str, int]) -> str:
    if any(counts.get(status) for status in NOT_SUCCEEDED):
        raise RunDidNotSucceed(summary)
    return summary
