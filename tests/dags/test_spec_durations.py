"""One duration grammar for every DAG node type (pure): an approval's timeout, a sleep's
duration and a sensor's interval read the same text the same way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dags.spec import parse_dag_spec
from dags.spec_durations import UNIT_SECONDS, duration_seconds
from dags.spec_errors import DagSpecError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (90, 90.0),
        (2.5, 2.5),
        ("90", 90.0),
        (" 30s ", 30.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1d12h", 129600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("1m30s250ms", 90.25),
    ],
)
def test_durations(text, seconds):
    assert duration_seconds(text, field="f") == seconds


@pytest.mark.parametrize(
    "text",
    ["", "h", "24 hours", "2h1d", "1h1h", "1h 30m", "-5", -5, True, None, "1e3", "5" * 65, [1]],
)
def test_what_is_not_a_duration(text):
    with pytest.raises(DagSpecError) as refused:
        duration_seconds(text, field="tasks[0].timeout")
    assert refused.value.field == "tasks[0].timeout"


@given(st.dictionaries(st.sampled_from(list(UNIT_SECONDS)), st.integers(0, 10**6), min_size=1))
def test_parts_from_the_largest_unit_add_up(parts):
    text = "".join(f"{parts[unit]}{unit}" for unit in UNIT_SECONDS if unit in parts)
    expected = sum(UNIT_SECONDS[unit] * count for unit, count in parts.items())
    assert duration_seconds(text, field="f") == pytest.approx(expected)


def test_every_node_type_reads_a_duration_alike():
    """The regression: "1d12h" was an approval's timeout and a 400 on a sensor, "1.5h" a
    sleep's duration and a 400 on an approval."""
    http = {"kind": "http", "url": "https://example.com/health"}
    spec = parse_dag_spec(
        {
            "dag": "d",
            "tasks": [
                {
                    "id": "a",
                    "type": "approval",
                    "approvers": {"role": "operator"},
                    "timeout": "1.5h",
                },
                {"id": "z", "type": "sleep", "duration": "1d12h", "depends_on": ["a"]},
                {
                    "id": "s",
                    "type": "sensor",
                    "sensor": http,
                    "timeout": "1d12h",
                    "interval": "1m30s",
                },
            ],
        }
    )
    nodes = {node["id"]: node for node in spec["tasks"]}
    assert nodes["a"]["approval"]["timeout_seconds"] == 5400
    assert nodes["z"]["duration"] == 129600.0
    assert (nodes["s"]["timeout"], nodes["s"]["interval"]) == (129600.0, 90.0)
