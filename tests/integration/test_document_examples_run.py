"""The design document's conditional-branching DAG, posted verbatim, runs to its end on a
real worker with the shipped DocumentClassifier / InvoiceProcessor / ReceiptProcessor: an
invoice takes the invoice branch, a receipt the receipt branch."""

from __future__ import annotations

import pytest

from dags.models import DagNodeState, DagRun
from tests.examples.document import INVOICE, RECEIPT, dag_definition
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _run_to_end(api, dag_id: str, document: str, worker) -> dict[str, DagNodeState]:
    trigger = api.post(
        f"/api/v1/dags/{dag_id}/trigger", {"parameters": {"document": document}}, format="json"
    )
    assert trigger.status_code == 202, trigger.content
    run_id = trigger.json()["id"]
    try:
        wait_until(
            lambda: DagRun.platform.get(id=run_id).status not in ("running", "queued"),
            timeout=90,
            message="the DAG run to end",
        )
    except AssertionError:
        print(dump_logs(worker))
        raise
    assert DagRun.platform.get(id=run_id).status == "success"
    return {state.node_id: state for state in DagNodeState.objects.filter(run_id=run_id)}


def test_the_branching_example_takes_the_branch_its_document_needs(api, live_worker):
    created = api.post("/api/v1/dags", dag_definition(), format="json")
    assert created.status_code == 201, created.content
    dag_id = created.json()["id"]

    nodes = _run_to_end(api, dag_id, INVOICE, live_worker)
    assert nodes["classify"].result["type"] == "invoice"
    assert nodes["process-invoice"].status == "success"
    assert nodes["process-invoice"].result["invoice_number"] == "2024-117"
    assert nodes["process-invoice"].result["total"] == {"currency": "EUR", "amount": 1250.0}
    assert nodes["process-receipt"].status == "skipped"

    nodes = _run_to_end(api, dag_id, RECEIPT, live_worker)
    assert nodes["classify"].result["type"] == "receipt"
    assert nodes["process-receipt"].status == "success"
    assert nodes["process-receipt"].result["merchant"] == "Corner Bakery"
    assert nodes["process-invoice"].status == "skipped"
