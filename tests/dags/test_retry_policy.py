"""The `retry` failure policy's definition: where it may be said and what it is checked for."""

from __future__ import annotations

import pytest

from dags.engine.dispatch import node_max_attempts, node_retries
from dags.graph import graph_from_spec
from dags.models import Dag
from dags.spec import DagSpecError, parse_dag_spec

H = {"type": "python", "callable": "noop"}


def t(node_id, *deps, **extra):
    return {"id": node_id, "handler": H, "depends_on": list(deps), **extra}


def test_dag_level_retry_applies_to_every_node_but_a_mapped_one():
    spec = parse_dag_spec(
        {
            "dag": "d",
            "failure_policy": "retry",
            "retry_policy": {"max_attempts": 5},
            "tasks": [
                t("a"),
                t("b", "a", retry_policy={"max_attempts": 2}),
                t("m", "a", map_over=[1, 2]),
            ],
        }
    )
    graph = graph_from_spec(spec)
    assert node_retries(graph, "a") and node_retries(graph, "b")
    assert not node_retries(graph, "m")
    assert node_max_attempts(graph, "a", task_max_attempts=3) == 5
    assert node_max_attempts(graph, "b", task_max_attempts=3) == 2  # its own wins
    assert node_max_attempts(graph, "m", task_max_attempts=3) == 3


def test_node_level_retry_only_for_that_node():
    spec = parse_dag_spec({"dag": "d", "tasks": [t("a", failure_policy="retry"), t("b", "a")]})
    graph = graph_from_spec(spec)
    assert node_retries(graph, "a") and not node_retries(graph, "b")
    assert node_max_attempts(graph, "a", task_max_attempts=4) == 4  # the task's own
    assert node_max_attempts(graph, "b", task_max_attempts=4) == 4


def test_a_node_may_only_ask_for_retry():
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec({"dag": "d", "tasks": [t("a", failure_policy="fail_all")]})
    assert caught.value.field == "tasks[0].failure_policy"
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec({"dag": "d", "tasks": [t("a", failure_policy="retry", map_over=[1])]})
    assert caught.value.field == "tasks[0].failure_policy"


@pytest.mark.django_db
def test_a_bad_dag_retry_policy_is_a_400_naming_it(api):
    raw = {
        "dag": "d",
        "failure_policy": "retry",
        "retry_policy": {"max_attempts": 0},
        "tasks": [t("a")],
    }
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "retry_policy.max_attempts"
    raw["retry_policy"] = {"backoff": "sometimes"}
    assert api.post("/api/v1/dags", raw, format="json").json()["field"] == "retry_policy.backoff"
    assert not Dag.platform.exists()
    raw["retry_policy"] = {"max_attempts": 4, "backoff": "fixed"}
    created = api.post("/api/v1/dags", raw, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["failure_policy"] == "retry"
