"""The DAG run page's drawing maths, pure: layers, positions, colours, Gantt bars."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dags.choices import NodeStatus
from dashboard.dags.dag_layout import (
    NODE_HEIGHT,
    NODE_WIDTH,
    TONE_OF_STATUS,
    deadline_line,
    gantt,
    graph_layout,
    ordered_layers,
    timer_line,
    tone_of,
    topological_layers,
)
from dashboard.durations import format_duration

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@dataclass
class State:
    node_id: str
    status: str = "waiting"
    attempts: int = 0
    execution_id: str | None = None
    map_total: int | None = None
    map_finished: int = 0
    started_at: datetime | None = None
    completed_at: datetime | None = None


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_every_node_status_has_one_of_the_tones():
    assert set(TONE_OF_STATUS) == set(NodeStatus.values)
    assert {tone_of(s) for s in NodeStatus.values} == {
        "success",
        "running",
        "failed",
        "skipped",
        "waiting",
        "timer",
        "approval",
    }
    assert tone_of("sleeping") == tone_of("sensing") == "timer"
    assert tone_of("waiting_for_approval") == "approval"
    assert tone_of("timed_out") == "failed"
    assert tone_of("upstream_failed") == "skipped"
    assert tone_of("queued") == "waiting"
    assert tone_of("something-new") == "waiting"


def test_layers_are_the_longest_path_from_a_root():
    depends_on = {"a": [], "b": ["a"], "c": ["b"], "d": ["a", "c"], "e": []}
    assert topological_layers(depends_on) == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 0}


def test_a_cycle_is_refused():
    with pytest.raises(ValueError, match="cycle"):
        topological_layers({"a": ["b"], "b": ["a"]})


def test_a_long_chain_needs_no_recursion():
    depends_on = {f"n{i}": ([f"n{i - 1}"] if i else []) for i in range(3000)}
    assert topological_layers(depends_on)["n2999"] == 2999


def test_children_are_ordered_under_their_parents():
    # Definition order would cross the edges: x1 is a child of the second root.
    depends_on = {"r1": [], "r2": [], "x2": ["r2"], "x1": ["r1"]}
    assert ordered_layers(depends_on) == [["r1", "r2"], ["x1", "x2"]]


def test_layout_puts_layers_in_columns_and_edges_between_box_sides():
    depends_on = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    states = {
        "a": State("a", "success", 1, "e-a", started_at=at(0), completed_at=at(2)),
        "b": State("b", "failed", 3, "e-b", started_at=at(2), completed_at=at(5)),
    }
    layout = graph_layout(depends_on=depends_on, states=states, now=at(10))
    boxes = {box.node_id: box for box in layout.nodes}
    assert boxes["a"].x < boxes["b"].x == boxes["c"].x < boxes["d"].x
    assert boxes["b"].y != boxes["c"].y
    assert (boxes["a"].tone, boxes["b"].tone, boxes["d"].tone) == ("success", "failed", "waiting")
    assert boxes["b"].attempts == 3 and boxes["b"].duration == "3.0 s"
    assert boxes["b"].execution_id == "e-b" and boxes["d"].execution_id is None
    assert len(layout.edges) == 4
    edge = next(e for e in layout.edges if (e.source, e.target) == ("a", "b"))
    assert edge.path.startswith(f"M{boxes['a'].x + NODE_WIDTH},{boxes['a'].y + NODE_HEIGHT // 2}")
    assert edge.tone == "success"
    for box in layout.nodes:  # everything inside the drawing
        assert box.x >= 0 and box.x + NODE_WIDTH <= layout.width
        assert box.y >= 0 and box.y + NODE_HEIGHT <= layout.height


def test_a_mapped_node_shows_its_shard_progress():
    states = {"m": State("m", "running", 1, None, map_total=10, map_finished=4, started_at=at(0))}
    (box,) = graph_layout(depends_on={"m": []}, states=states, now=at(1)).nodes
    assert box.tone == "running" and box.map_total == 10
    assert box.map_bar_width == round((NODE_WIDTH - 16) * 0.4)


@given(
    st.integers(min_value=1, max_value=40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=80),
        )
    )
)
def test_any_acyclic_graph_gets_distinct_boxes_and_edges_point_forward(case):
    n, pairs = case
    # Edges only from a lower to a higher index: acyclic by construction.
    depends_on = {
        f"n{i}": sorted({f"n{a}" for a, b in pairs if b == i and a < i}) for i in range(n)
    }
    layout = graph_layout(depends_on=depends_on, states={}, now=T0)
    boxes = {box.node_id: box for box in layout.nodes}
    assert len(boxes) == n
    assert len({(box.x, box.y) for box in layout.nodes}) == n
    for node_id, deps in depends_on.items():
        for dependency in deps:
            assert boxes[dependency].x < boxes[node_id].x


def test_gantt_bars_are_relative_to_the_run_start():
    states = [
        State("a", "success", started_at=at(0), completed_at=at(4)),
        State("b", "running", started_at=at(4)),
        State("c", "upstream_failed", completed_at=at(6)),
    ]
    chart = gantt(
        run_started_at=T0,
        run_completed_at=None,
        states=states,
        execution_starts={"a": at(1)},  # a waited 1 s in the queue
        now=at(8),
    )
    a, b, c = chart.rows
    assert (a.node_id, a.left, a.wait, a.run_left, a.run) == ("a", 0.0, 12.5, 12.5, 37.5)
    assert a.duration == "4.0 s" and a.tone == "success"
    assert (b.left, b.wait, b.run) == (50.0, 0.0, 50.0)  # running: up to now
    assert b.offset == "+4.0 s"
    assert c.started is False and c.tone == "skipped"
    assert chart.span == "8.0 s"
    assert [t.left for t in chart.ticks] == [0, 25, 50, 75, 100]


def test_gantt_of_a_run_that_has_not_started():
    chart = gantt(
        run_started_at=None,
        run_completed_at=None,
        states=[State("a"), State("b")],
        execution_starts={},
        now=T0,
    )
    assert [r.started for r in chart.rows] == [False, False]


def test_an_instant_node_still_shows_a_sliver():
    states = [
        State("slow", "success", started_at=at(0), completed_at=at(100)),
        State("instant", "success", started_at=at(50), completed_at=at(50)),
    ]
    chart = gantt(
        run_started_at=T0, run_completed_at=at(100), states=states, execution_starts={}, now=at(200)
    )
    assert chart.rows[1].run > 0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, ""), (0.25, "250 ms"), (3.25, "3.2 s"), (125, "2m 05s"), (3720, "1h 02m")],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_a_queued_node_is_all_wait():
    chart = gantt(
        run_started_at=T0,
        run_completed_at=None,
        states=[State("q", "queued", started_at=at(2))],
        execution_starts={},
        now=at(4),
    )
    (row,) = chart.rows
    assert (row.left, row.wait, row.run) == (50.0, 50.0, 0.0)


@dataclass
class Attempt:
    number: int
    status: str
    started_at: datetime | None
    completed_at: datetime | None


def test_a_rerun_nodes_earlier_attempts_are_bars_of_their_own_on_its_row():
    """b failed from 2 s to 4 s, was re-run at 6 s and is running: both attempts show."""
    states = [
        State("a", "success", started_at=at(0), completed_at=at(2)),
        State("b", "running", started_at=at(6)),
    ]
    states[1].attempt_number = 2  # type: ignore[attr-defined]
    chart = gantt(
        run_started_at=T0,
        run_completed_at=None,
        states=states,
        execution_starts={},
        now=at(8),
        earlier={"b": [Attempt(1, "failed", at(2), at(4))]},
    )
    _, b = chart.rows
    assert b.attempt == 2 and (b.left, b.run) == (75.0, 25.0)
    [first] = b.earlier
    assert (first.number, first.tone, first.left, first.width) == (1, "failed", 25.0, 25.0)
    assert (first.offset, first.duration) == ("+2.0 s", "2.0 s")


def test_a_rerun_node_waiting_for_its_next_attempt_still_shows_the_earlier_one():
    chart = gantt(
        run_started_at=T0,
        run_completed_at=None,
        states=[
            State("late", "success", started_at=at(3), completed_at=at(4)),
            State("b", "waiting"),
        ],
        execution_starts={},
        now=at(4),
        earlier={
            "b": [Attempt(1, "failed", at(1), at(2)), Attempt(2, "upstream_failed", None, None)]
        },
    )
    b, late = chart.rows  # ordered by the first attempt's start
    assert b.node_id == "b" and b.started is False
    assert [bar.number for bar in b.earlier] == [1]  # one never started: no bar
    assert late.node_id == "late"


def test_a_sleep_or_sensor_box_says_the_time_left():
    assert timer_line(kind="sleep", due_in=7170.0, deadline_in=None) == "wakes in 1h 59m"
    assert timer_line(kind="sleep", due_in=0.2, deadline_in=None) == "wakes now"
    line = timer_line(kind="sensor", due_in=25.0, deadline_in=21540.0)
    assert line == "poke in 25.0 s · timeout 5h 59m"
    assert timer_line(kind="sensor", due_in=None, deadline_in=None) == ""  # ended
    states = {"s": State("s", status="sensing"), "d": State("d", status="success")}
    layout = graph_layout(
        depends_on={"s": [], "d": []},
        states=states,
        now=T0,
        time_left={"s": line, "d": "stale"},
    )
    boxes = {box.node_id: box for box in layout.nodes}
    assert boxes["s"].tone == "timer" and boxes["s"].time_left == line
    assert boxes["d"].time_left == ""  # only a waiting sleep or sensor shows one


def test_a_waiting_node_with_a_deadline_shows_the_time_left():
    layout = graph_layout(
        depends_on={"sign-off": [], "ship": ["sign-off"]},
        states={
            "sign-off": State("sign-off", status="waiting_for_approval", started_at=at(0)),
            "ship": State("ship"),
        },
        now=at(60),
        time_left={"sign-off": deadline_line(at(3660), now=at(60))},
    )
    boxes = {box.node_id: box for box in layout.nodes}
    assert (boxes["sign-off"].tone, boxes["sign-off"].time_left) == ("approval", "1h 00m left")
    assert boxes["ship"].time_left == ""
