"""An approval node's definition, parsed (pure: no database): the normalized node, the
durations, and the roles the spec knows are the product's."""

from __future__ import annotations

import pytest

from dags.spec import parse_dag_spec
from dags.spec_approval import KNOWN_ROLES, approval_node_parse
from dags.spec_errors import DagSpecError
from scheduler_app.choices import Role


def test_the_normalized_approval_node():
    spec = parse_dag_spec(
        {
            "dag": "release",
            "tasks": [
                {"id": "build", "handler": "noop"},
                {
                    "id": "sign-off",
                    "type": "approval",
                    "depends_on": "build",
                    "approvers": {"role": "operator", "count": 2},
                    "timeout": "1d12h",
                    "message": "Ship it?",
                },
            ],
        }
    )
    node = spec["tasks"][1]
    assert node == {
        "id": "sign-off",
        "type": "approval",
        "approval": {
            "role": "operator",
            "users": [],
            "count": 2,
            "timeout_seconds": 36 * 3600,
            "on_timeout": "reject",
            "message": "Ship it?",
        },
        "depends_on": ["build"],
        "trigger_rule": "all_success",
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24h", 86400),
        ("90m", 5400),
        ("45s", 45),
        ("1d2h3m4s", 93784),
        (3600, 3600),
        # The grammar a sleep's or a sensor's durations take (one for every node type).
        ("1.5h", 5400),
        ("3600", 3600),
    ],
)
def test_approval_timeouts(text, seconds):
    node = approval_node_parse(
        {"approvers": {"role": "operator"}, "timeout": text}, where="tasks[0]"
    )
    assert node["approval"]["timeout_seconds"] == seconds
    assert isinstance(node["approval"]["timeout_seconds"], int)


@pytest.mark.parametrize("text", ["", "h", "24 hours", True, None, "2h1d", "500ms", 0.4])
def test_what_is_not_an_approval_timeout(text):
    with pytest.raises(DagSpecError) as refused:
        approval_node_parse({"approvers": {"role": "operator"}, "timeout": text}, where="tasks[0]")
    assert refused.value.field == "tasks[0].timeout"


def test_the_spec_knows_the_products_roles():
    assert set(KNOWN_ROLES) == set(Role.values)
