"""An attacker's DAG conditions against the expression budget, on the real shared worker,
while another tenant's no-op runs are timed.

Before: `$.a.result..*..*..*..*..*[?@=='no']` over 288 bytes took 10.1 s inside the worker's
finish transaction (the run's lock held), `match(@, "(a|aa)*")` doubled with each character,
and another tenant's no-op went from 0.03 s to 54.8 s. Now a query is checked when saved and
again when evaluated, its evaluation is metered, regular expressions run on RE2, and the
evaluation happens after the finish commits: the attacker's nodes fail naming the budget, a
condition within it still decides its branch, and the bystander does not wait."""

from __future__ import annotations

import time

import pytest

from dags.models import DagNodeExecution, DagNodeState, DagRun, DagVersion
from dags.services.definitions import dag_create
from dags.services.runs import dag_trigger
from tests.integration.bystander import Bystander
from tests.integration.conftest import dump_logs
from tests.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = {"type": "python", "callable": "noop"}
WORD = "a" * 39 + "b"  # (a|aa)* backtracks about 10^8 times on it before failing
ROWS = [[0] * 400 for _ in range(400)]  # 160,400 nodes for `.*.*`: past the 100,000 budget
REVIEWED_QUERY = "$.a.result..*..*..*..*..*[?@=='no']"


def _node(node_id: str, condition: dict) -> dict:
    return {"id": node_id, "handler": NOOP, "depends_on": ["a"], "condition": condition}


def _attack_dag(tenant):
    dag = dag_create(
        tenant=tenant,
        raw={
            "dag": "stall-the-workers",
            "failure_policy": "continue",
            "tasks": [
                {
                    "id": "a",
                    "handler": {"type": "python", "callable": "echo"},
                    "parameters": {"rows": ROWS, "word": WORD, "deep": [[[[[[[[[]]]]]]]]]},
                },
                _node("wide", {"path": "$.a.result.rows.*.*", "equals": 1}),
                _node("regex", {"path": '$.a.result[?match(@, "(a|aa)*")]', "exists": True}),
                _node("legacy", {"path": "$.a.result.deep", "exists": True}),
                _node("honest", {"path": "$.a.result.word", "equals": WORD}),
            ],
        },
    )
    # `legacy` carries the review's query, stored as a DAG saved before saving checked it.
    version = DagVersion.objects.get(dag=dag)
    spec = version.spec
    spec["tasks"][3]["condition"] = {"path": REVIEWED_QUERY, "equals": "no"}
    DagVersion.objects.filter(id=version.id).update(spec=spec)
    return dag


def test_conditions_past_their_budget_fail_their_nodes_and_never_slow_another_tenant(
    tenant_factory, live_worker
):
    acme, _ = tenant_factory("acme")
    demo, _ = tenant_factory("demo")
    bystander = Bystander(demo)
    bystander.run_once()  # warm: the worker's first run of a task pays for its imports
    bystander.seconds.clear()

    dag = _attack_dag(acme)
    started = time.monotonic()
    run = dag_trigger(dag=dag)

    def attack_going() -> bool:
        return DagRun.platform.get(id=run.id).status in ("running", "queued")

    try:
        seconds = bystander.run_while(attack_going)
        wait_until(lambda: not attack_going(), timeout=60, message="the attacker's run to end")
    except AssertionError:
        print(dump_logs(live_worker))
        raise
    attack_seconds = time.monotonic() - started
    nodes = {state.node_id: state for state in DagNodeState.objects.filter(run=run)}
    print(
        f"\nattack run {attack_seconds:.2f} s; bystander no-ops "
        + ", ".join(f"{s:.3f}" for s in seconds)
        + " s"
    )

    # What the attacker saw: each node over budget failed, naming the budget; nothing ran.
    assert nodes["wide"].status == "failed"
    assert nodes["wide"].error_message.startswith("condition over its nodes budget")
    assert nodes["legacy"].status == "failed"
    assert nodes["legacy"].error_message.startswith("condition over its descendant segments budget")
    assert not DagNodeExecution.objects.filter(run=run, node_id__in=["wide", "legacy"]).exists()
    # RE2 answers the exponential pattern at once (it does not match: the branch is skipped),
    # and a condition within its budget still takes its branch.
    assert nodes["regex"].status == "skipped"
    assert nodes["honest"].status == "success"
    # The other tenant: its no-ops ran while the attack was decided, none held up by it.
    assert max(seconds) < 5.0, seconds
    assert attack_seconds < 30, attack_seconds
