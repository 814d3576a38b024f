"""What a doorbell tells Celery (and Flower) once its runs ended: success returns, a run that
did not succeed raises RunDidNotSucceed (FAILURE, after the run was recorded), a delivery that
did not end its run is Ignored (acknowledged, no state, so it cannot overwrite the outcome the
ending delivery reports). tests/integration/test_flower_truth.py plays it with Flower."""

from __future__ import annotations

from collections import Counter

import pytest
from celery.exceptions import Ignore

from workers.celery_outcome import RunDidNotSucceed, batch_outcome, single_run_outcome

RUN = "0b6c1d52-4a4e-4c43-9a57-6f0f7f1f8e10"


def test_a_success_returns_and_names_the_run():
    assert single_run_outcome(RUN, "success") == f"execution {RUN}: success"


@pytest.mark.parametrize("status", ["failed", "timed_out", "cancelled"])
def test_a_run_that_did_not_succeed_is_a_failure(status):
    with pytest.raises(RunDidNotSucceed, match=f"execution {RUN}: {status}"):
        single_run_outcome(RUN, status)


@pytest.mark.parametrize("outcome", ["duplicate", "deferred", "rejected", "released"])
def test_a_delivery_that_did_not_end_its_run_reports_nothing(outcome):
    with pytest.raises(Ignore):
        single_run_outcome(RUN, outcome)


def test_a_batch_fails_when_any_of_its_runs_failed():
    assert batch_outcome("batch of 3: 3 success", Counter(success=3)) == "batch of 3: 3 success"
    assert batch_outcome("batch of 3: 2 success, 1 duplicate", Counter(success=2, duplicate=1))
    with pytest.raises(RunDidNotSucceed, match="batch of 3: 2 success, 1 failed"):
        batch_outcome("batch of 3: 2 success, 1 failed", Counter(success=2, failed=1))
