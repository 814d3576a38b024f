"""`schedctl apply` and approval nodes: the client normalizes an approval node as the server
does (so a file that did not change shows no change), and a changed quorum is a change."""

from __future__ import annotations

import pytest

from dags.spec import parse_dag_spec
from dags.spec_errors import DagSpecError
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


@pytest.mark.parametrize("timeout", ["1.5h", "1h30m", "3600", 5400, 90.4, "2h1d", "soon"])
def test_the_client_reads_an_approval_timeout_as_the_server_does(timeout):
    raw = {**RAW, "tasks": [dict(node) for node in RAW["tasks"]]}
    raw["tasks"][1]["timeout"] = timeout
    try:
        server = parse_dag_spec(raw)
    except DagSpecError:
        # What the server refuses the client leaves as written (the server's 400 says why).
        assert dag_normalized(raw)["tasks"][1]["approval"]["timeout_seconds"] == timeout
        return
    assert dag_normalized(raw) == server
