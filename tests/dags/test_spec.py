"""DAG validation is pure: graph errors are found and named before anything is saved."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dags.conditions import condition_holds
from dags.engine.readiness import decide
from dags.graph import find_cycle
from dags.spec import DagSpecError, parse_dag_spec

H = {"type": "python", "callable": "noop"}


def dag(*tasks, **extra):
    return {"dag": "d", "tasks": list(tasks), **extra}


def t(node_id, *deps, **extra):
    return {"id": node_id, "handler": H, "depends_on": list(deps), **extra}


def error_of(raw) -> DagSpecError:
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(raw)
    return caught.value


def test_cycle_error_lists_the_cycle():
    error = error_of(dag(t("a", "c"), t("b", "a"), t("c", "b"), t("x")))
    assert error.message == "cycle: a -> b -> c -> a"


def test_self_dependency_is_a_cycle():
    assert error_of(dag(t("a", "a"))).message == "cycle: a -> a"


def test_unknown_dependency_and_duplicate_ids_are_named():
    assert "unknown task 'zzz'" in error_of(dag(t("a"), t("b", "zzz"))).message
    error = error_of(dag(t("a"), t("a")))
    assert "duplicate task id 'a'" in error.message and error.field == "tasks[1].id"


def test_condition_must_name_an_upstream_node():
    cond = {"field": "c.result.type", "equals": "x"}
    error = error_of(dag(t("a"), t("b", "a", condition=cond), t("c")))
    assert "not upstream" in error.message and error.field == "tasks[1].condition"
    parse_dag_spec(dag(t("c"), t("a", "c"), t("b", "a", condition=cond)))  # transitive is fine


def test_bad_choices_are_rejected():
    assert error_of(dag(t("a"), failure_policy="explode")).field == "failure_policy"
    assert error_of(dag(t("a", trigger_rule="sometimes"))).field == "tasks[0].trigger_rule"
    assert error_of(dag({"id": "a"})).field == "tasks[0].handler"


@given(st.integers(min_value=2, max_value=30), st.data())
def test_any_chain_with_a_back_edge_is_a_cycle(length, data):
    back_from = data.draw(st.integers(min_value=0, max_value=length - 1))
    edges = {f"n{i}": ([f"n{i - 1}"] if i else []) for i in range(length)}
    edges["n0"] = [f"n{back_from}"]
    cycle = find_cycle(edges)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert len(cycle) == back_from + 2


@given(st.lists(st.lists(st.integers(min_value=0, max_value=40), max_size=4), max_size=40))
def test_edges_only_to_earlier_nodes_never_form_a_cycle(deps):
    edges = {f"n{i}": [f"n{d}" for d in set(ds) if d < i] for i, ds in enumerate(deps)}
    assert find_cycle(edges) is None


def test_conditions():
    results = {"c": {"type": "invoice", "tags": ["x"]}}
    statuses = {"c": "success"}
    assert condition_holds(
        {"field": "c.result.type", "equals": "invoice"}, results=results, statuses=statuses
    )
    assert not condition_holds(
        {"field": "c.result.type", "equals": "receipt"}, results=results, statuses=statuses
    )
    assert condition_holds(
        {"field": "c.result.type", "not_equals": "receipt"}, results=results, statuses=statuses
    )
    assert condition_holds(
        {"field": "c.result.type", "in": ["a", "invoice"]}, results=results, statuses=statuses
    )
    assert condition_holds(
        {"field": "c.result.tags", "exists": True}, results=results, statuses=statuses
    )
    assert condition_holds(
        {"field": "c.result.nope", "exists": False}, results=results, statuses=statuses
    )
    assert condition_holds(
        {"field": "c.status", "equals": "success"}, results=results, statuses=statuses
    )


@pytest.mark.parametrize(
    ("rule", "policy", "counts", "verdict"),
    [
        ("all_success", "skip_downstream", (2, 0, 0), "run"),
        ("all_success", "skip_downstream", (1, 1, 0), "upstream_failed"),
        ("all_success", "continue", (1, 1, 0), "run"),
        ("all_success", "skip_downstream", (1, 0, 1), "skipped"),
        ("all_done", "skip_downstream", (0, 2, 0), "run"),
        ("one_success", "skip_downstream", (1, 1, 1), "run"),
        ("one_success", "skip_downstream", (0, 0, 2), "skipped"),
        ("one_success", "skip_downstream", (0, 1, 1), "upstream_failed"),
    ],
)
def test_trigger_rules(rule, policy, counts, verdict):
    succeeded, failed, skipped = counts
    assert (
        decide(rule=rule, policy=policy, succeeded=succeeded, failed=failed, skipped=skipped)
        == verdict
    )


# --- input cost: caps and linear reachability ----------------------------------------------
def test_too_many_tasks_is_refused_naming_the_field():
    error = error_of(dag(*[t(f"n{i}") for i in range(5001)]))
    assert error.field == "tasks" and "at most 5000 tasks" in error.message
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(dag(t("a"), t("b"), t("c")), max_nodes=2)
    assert "at most 2 tasks" in caught.value.message


def test_too_many_edges_is_refused_naming_the_task_that_passes_the_cap():
    from tests.dag_bomb import dense_dag, edge_count

    bomb = dense_dag(nodes=2000, body_bytes=1024 * 1024 - 1024)
    assert edge_count(bomb) > 100_000
    error = error_of(bomb)
    assert "at most 50000 dependencies" in error.message
    assert error.field.startswith("tasks[") and error.field.endswith("].depends_on")
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(dag(t("a"), t("b", "a"), t("c", "a", "b")), max_edges=2)
    assert caught.value.field == "tasks[2].depends_on"


def test_the_bomb_is_valid_without_the_cap_and_its_reachability_is_right():
    from tests.dag_bomb import dense_dag, edge_count

    bomb = dense_dag(nodes=300, body_bytes=200_000)
    spec = parse_dag_spec(bomb, max_edges=edge_count(bomb))
    assert spec["tasks"][-1]["condition"]["field"] == "n0.status"  # n0 is upstream of the last


@given(
    st.lists(st.lists(st.integers(min_value=0, max_value=30), max_size=4), min_size=1, max_size=30),
    st.data(),
)
def test_upstream_check_agrees_with_walking_the_ancestors(dependency_lists, data):
    """The bitsets built once in topological order say "upstream" exactly when a walk from
    the node through its dependencies reaches the named node."""
    from dags.graph import ancestors, topological_order, upstream_bitsets

    # Node i may only depend on nodes before it: always acyclic.
    nodes = {
        f"n{i}": {"depends_on": sorted({f"n{d % i}" for d in deps}) if i else []}
        for i, deps in enumerate(dependency_lists)
    }
    edges = {node_id: node["depends_on"] for node_id, node in nodes.items()}
    order = topological_order(edges)
    assert order is not None
    bits = upstream_bitsets(edges, order)
    position = {node_id: index for index, node_id in enumerate(order)}
    node = data.draw(st.sampled_from(sorted(nodes)))
    named = data.draw(st.sampled_from(sorted(nodes)))
    walked = named in ancestors(nodes, node)
    assert bool((bits[node] >> position[named]) & 1) == walked


def test_a_cycle_is_found_by_the_topological_order_too():
    from dags.graph import topological_order

    assert topological_order({"a": ["c"], "b": ["a"], "c": ["b"]}) is None
    assert topological_order({"a": [], "b": ["a"]}) == ["a", "b"]


def test_a_policy_object_is_kept_and_a_yaml_timestamp_becomes_json_text():
    from datetime import UTC, datetime

    start = datetime(2026, 3, 1, tzinfo=UTC)
    spec = parse_dag_spec(dag(t("a"), policy={"catchup": "all", "start_at": start}))
    assert spec["catchup"] == "all" and spec["overlap"] == "allow"
    assert spec["policy"] == {"catchup": "all", "start_at": "2026-03-01T00:00:00+00:00"}
    # Without a policy object the normalized spec is what it always was (no new version).
    assert "policy" not in parse_dag_spec(dag(t("a"), catchup="none"))


def test_catchup_given_twice_must_agree():
    assert parse_dag_spec(dag(t("a"), catchup="all", policy={"catchup": "all"}))["catchup"] == "all"
    assert (
        error_of(dag(t("a"), catchup="all", policy={"catchup": "none"})).field == "policy.catchup"
    )
    assert error_of(dag(t("a"), policy={"overlap": "queue"})).field == "policy.overlap"
    assert error_of(dag(t("a"), policy=[1])).field == "policy"
