"""`schedctl apply` and approval nodes: the client normalizes an approval node as the server
does (so a file that did not change shows no change), and a changed quorum is a change."""

from __future__ import annotations

from dags.spec import parse_dag_spec
from scheduler_sdk.plan import dag_diff, dag_normalized

RAW = {
    "dag": "release",
    "tasks": [
        {"id": "build", "handler": "noop"},
        {
            "id": "sign-off",
            "type": "approval",
            "depends_on": ["build"],
            "approvers": {"role": "operator", "count": 2},
            "timeout": "1d12h",
            "on_timeout": "skip",
            "message": "Ship it?",
        },
        {
            "id": "named",
            "type": "approval",
            "depends_on": ["sign-off"],
            "approvers": {"users": ["alice"]},
        },
    ],
}


def test_the_client_normalizes_an_approval_node_as_the_server_does():
    assert dag_normalized(RAW) == parse_dag_spec(RAW)
    assert dag_diff(parse_dag_spec(RAW), RAW) == []


def test_a_changed_quorum_is_a_change():
    edited = {**RAW, "tasks": [dict(node) for node in RAW["tasks"]]}
    edited["tasks"][1]["approvers"] = {"role": "operator", "count": 3}
    lines = {(line.op, line.path) for line in dag_diff(parse_dag_spec(RAW), edited)}
    assert ("~", "tasks.sign-off.approval.count") in lines
