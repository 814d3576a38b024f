"""JSONPath conditions (RFC 9535): parsed at save time, evaluated over upstream nodes."""

from __future__ import annotations

import pytest

from dags.conditions import condition_holds
from dags.spec import DagSpecError, parse_dag_spec

H = {"type": "python", "callable": "noop"}
RESULTS = {"classify": {"items": [{"kind": "invoice", "total": 12}, {"kind": "note"}], "n": None}}
STATUSES = {"classify": "success"}


def dag(*tasks):
    return {"dag": "d", "tasks": list(tasks)}


def t(node_id, *deps, **extra):
    return {"id": node_id, "handler": H, "depends_on": list(deps), **extra}


def holds(path, **operator):
    return condition_holds({"path": path, **operator}, results=RESULTS, statuses=STATUSES)


def test_a_path_reads_results_and_statuses():
    assert holds("$.classify.result.items[0].kind", equals="invoice")
    assert not holds("$.classify.result.items[0].kind", equals="receipt")
    assert holds("$.classify.result.items[1].kind", **{"in": ["note", "memo"]})
    assert holds("$.classify.status", equals="success")
    assert holds("$.classify.result.items[0].kind", not_equals="receipt")


def test_a_path_selecting_several_values_matches_any_of_them():
    assert holds("$.classify.result.items[*].kind", equals="note")
    assert not holds("$.classify.result.items[*].kind", not_equals="note")
    assert holds("$..total", equals=12)
    assert holds("$.classify.result.items[?@.total > 10].kind", equals="invoice")
    assert not holds("$.classify.result.items[?@.total > 100].kind", equals="invoice")


def test_exists_and_a_path_that_selects_nothing():
    assert holds("$.classify.result.items[0].total", exists=True)
    assert holds("$.classify.result.items[1].total", exists=False)
    assert holds("$.classify.result.n", exists=False)  # null counts as absent, as for `field`
    assert not holds("$.classify.result.missing", equals=None)
    assert holds("$.classify.result.missing", not_equals="x")
    assert not holds("$.other.result", exists=True)  # not upstream: not in the document


def test_the_field_form_still_works():
    assert condition_holds(
        {"field": "classify.result.items.0.kind", "equals": "invoice"},
        results=RESULTS,
        statuses=STATUSES,
    )


def test_a_path_that_does_not_parse_is_rejected_naming_the_node():
    bad = {"path": "$.classify.result.items[0", "equals": 1}
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(dag(t("classify"), t("route", "classify", condition=bad)))
    assert caught.value.field == "tasks[1].condition.path"
    assert "'route'" in caught.value.message and "not valid JSONPath" in caught.value.message
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(dag(t("a"), t("b", "a", condition={"path": "a.result", "exists": True})))
    assert caught.value.field == "tasks[1].condition.path"


def test_a_path_must_start_at_an_upstream_node_when_it_names_one():
    cond = {"path": "$.c.result.type", "equals": "x"}
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(dag(t("a"), t("b", "a", condition=cond), t("c")))
    assert "not upstream" in caught.value.message and caught.value.field == "tasks[1].condition"
    parse_dag_spec(dag(t("c"), t("a", "c"), t("b", "a", condition=cond)))
    # A wildcard start reads whatever is upstream: accepted.
    parse_dag_spec(dag(t("a"), t("b", "a", condition={"path": "$.*.status", "equals": "x"})))


def test_path_and_field_together_or_no_operator_are_rejected():
    both = {"path": "$.a.status", "field": "a.status", "equals": "x"}
    with pytest.raises(DagSpecError) as caught:
        parse_dag_spec(dag(t("a"), t("b", "a", condition=both)))
    assert caught.value.field == "tasks[1].condition"
    with pytest.raises(DagSpecError):
        parse_dag_spec(dag(t("a"), t("b", "a", condition={"path": "$.a.status"})))


@pytest.mark.django_db
def test_the_api_answers_400_naming_the_node_and_saves_nothing(api):
    from dags.models import Dag

    raw = dag(
        t("classify"),
        t("route", "classify", condition={"path": "$.classify.result[?", "equals": 1}),
    )
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "tasks[1].condition.path" and "'route'" in body["message"]
    assert not Dag.platform.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("$.classify.result..*..*..*..*..*[?@=='no']", "5 descendant segments"),
        ("$.classify.result..items[?@..kind]", "2 descendant segments"),
        ("$.classify" + ".x" * 16, "17 segments"),
        ("$.classify." + "x" * 600, "characters long"),
        ('$.classify.result[?match(@, "(a")]', "I-Regexp"),
    ],
)
def test_a_path_over_its_budget_is_a_400_naming_the_node_and_the_field(api, path, said):
    from dags.models import Dag

    raw = dag(t("classify"), t("route", "classify", condition={"path": path, "equals": 1}))
    response = api.post("/api/v1/dags", raw, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert body["field"] == "tasks[1].condition.path"
    assert "'route'" in body["message"] and said in body["message"]
    assert not Dag.platform.exists()


def test_a_field_path_over_its_budget_is_refused_naming_the_node():
    deep = "classify.result" + ".k" * 20
    for key, value, field in (
        ("condition", {"field": deep, "equals": 1}, "tasks[1].condition.field"),
        ("map_over", {"field": deep}, "tasks[1].map_over"),
    ):
        with pytest.raises(DagSpecError) as refused:
            parse_dag_spec(dag(t("classify"), t("route", "classify", **{key: value})))
        assert refused.value.field == field
        assert "'route'" in refused.value.message and "22 parts" in refused.value.message
