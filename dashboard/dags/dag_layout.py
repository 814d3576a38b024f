"""What the DAG run page draws, computed in plain Python: the graph laid out by topological
layers (left to right) and the Gantt rows of node timings. No Django, no database: the view
passes the version's dependencies and the nodes' states, the template only prints numbers.

Colours. Each node status maps to one of five tones (CSS classes `tone-<tone>`):

    success                                  -> success (green)
    running (incl. a mapped node's shards)   -> running (yellow)
    failed, timed_out                        -> failed  (red)
    skipped, upstream_failed, cancelled      -> skipped (gray): it ended without running
                                                to completion; upstream_failed and
                                                cancelled keep a red / dark dashed outline
                                                (class `state-<status>`) so they stay
                                                distinguishable from a plain skip
    waiting, pending, queued                 -> waiting (white): not started yet; queued
                                                (dispatched, no worker yet) has a blue
                                                dashed outline
    sleeping, sensing                        -> timer (lilac): a sleep or a sensor, holding
                                                no worker; the box says the time left
                                                (sensing has a dashed outline)
    waiting_for_approval                     -> approval (violet): waits for people, holding
                                                no worker; the box shows the time left

A mapped node shows its shard progress (`map_finished / map_total`) as a bar inside the box.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from dashboard.durations import format_duration

TONES = ("success", "running", "failed", "skipped", "waiting", "timer", "approval")
TONE_OF_STATUS = {
    "success": "success",
    "running": "running",
    "failed": "failed",
    "timed_out": "failed",
    "skipped": "skipped",
    "upstream_failed": "skipped",
    "cancelled": "skipped",
    "waiting": "waiting",
    "pending": "waiting",
    "queued": "waiting",
    "waiting_for_event": "running",
    "sleeping": "timer",
    "sensing": "timer",
    "waiting_for_approval": "approval",
}
# The statuses whose box shows a time-left line instead of its attempts.
TIME_LEFT_STATUSES = ("sleeping", "sensing", "waiting_for_approval")

NODE_WIDTH, NODE_HEIGHT = 180, 64
GAP_X, GAP_Y, PADDING = 64, 18, 12
LABEL_CHARS = 22


class NodeStateLike(Protocol):
    """The fields of `dags.models.DagNodeState` the page reads."""

    node_id: str
    status: str
    attempts: int
    execution_id: Any
    map_total: int | None
    map_finished: int
    started_at: datetime | None
    completed_at: datetime | None


def tone_of(status: str) -> str:
    return TONE_OF_STATUS.get(status, "waiting")


def node_duration(state: NodeStateLike, *, now: datetime) -> float | None:
    """From dispatch to the end (or to now while it is active); None if it never started."""
    if state.started_at is None:
        return None
    end = state.completed_at or now
    return max(0.0, (end - state.started_at).total_seconds())


# -- layers ---------------------------------------------------------------------------------
def topological_layers(depends_on: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Layer of each node: 0 for roots, else one more than its deepest dependency.

    Iterative (Kahn), so a 2,000-node chain needs no recursion. The spec is validated
    acyclic; a cycle here would leave nodes out, so it is an error.
    """
    order = {node_id: index for index, node_id in enumerate(depends_on)}
    children: dict[str, list[str]] = {node_id: [] for node_id in depends_on}
    remaining = {node_id: len(deps) for node_id, deps in depends_on.items()}
    for node_id, deps in depends_on.items():
        for dependency in deps:
            children[dependency].append(node_id)
    ready = [(order[n], n) for n, count in remaining.items() if count == 0]
    heapq.heapify(ready)
    layer: dict[str, int] = {}
    while ready:
        _, node_id = heapq.heappop(ready)
        layer[node_id] = max((layer[d] + 1 for d in depends_on[node_id]), default=0)
        for child in children[node_id]:
            remaining[child] -= 1
            if remaining[child] == 0:
                heapq.heappush(ready, (order[child], child))
    if len(layer) != len(depends_on):
        raise ValueError("the graph has a cycle")
    return layer


def ordered_layers(depends_on: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Nodes per layer, each layer ordered by the mean row of its parents (one barycentre
    pass, which removes most crossings of ordinary pipelines), ties in definition order."""
    layer_of = topological_layers(depends_on)
    order = {node_id: index for index, node_id in enumerate(depends_on)}
    layers: list[list[str]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for node_id in depends_on:
        layers[layer_of[node_id]].append(node_id)
    row: dict[str, float] = {
        node_id: float(i) for i, node_id in enumerate(layers[0] if layers else [])
    }
    for nodes in layers[1:]:
        nodes.sort(
            key=lambda n: (sum(row[d] for d in depends_on[n]) / len(depends_on[n]), order[n])
        )
        row.update({node_id: float(i) for i, node_id in enumerate(nodes)})
    return layers


# -- the graph ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeBox:
    node_id: str
    label: str
    status: str
    tone: str
    x: int
    y: int
    attempts: int
    duration: str
    execution_id: str | None
    map_total: int | None
    map_finished: int
    map_bar_width: int  # pixels of the shard progress bar, 0 when not mapped
    run_attempt: int = 1  # which attempt of the node in the run (2 after a re-run, ...)
    # A sleep's, a sensor's or an approval's ("wakes in 1h 59m", "poke in 25s · ...", "2h left").
    time_left: str = ""

    @property
    def text_x(self) -> int:
        return self.x + 8


@dataclass(frozen=True)
class EdgeLine:
    source: str
    target: str
    path: str
    tone: str  # the source's tone: a failed node's outgoing edges are drawn red


@dataclass(frozen=True)
class GraphLayout:
    nodes: list[NodeBox]
    edges: list[EdgeLine]
    width: int
    height: int
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


def _label(node_id: str) -> str:
    return node_id if len(node_id) <= LABEL_CHARS else node_id[: LABEL_CHARS - 1] + "…"


def graph_layout(
    *,
    depends_on: Mapping[str, Sequence[str]],
    states: Mapping[str, NodeStateLike],
    now: datetime,
    time_left: Mapping[str, str] | None = None,
) -> GraphLayout:
    """Boxes and edges in SVG coordinates: layers are columns, each column centred.
    `time_left`: the line a waiting sleep, sensor or approval node shows, by node id."""
    time_left = time_left or {}
    layers = ordered_layers(depends_on)
    tallest = max((len(nodes) for nodes in layers), default=0)
    height = 2 * PADDING + max(0, tallest * (NODE_HEIGHT + GAP_Y) - GAP_Y)
    width = 2 * PADDING + max(0, len(layers) * (NODE_WIDTH + GAP_X) - GAP_X)
    boxes: dict[str, NodeBox] = {}
    for column, nodes in enumerate(layers):
        offset = (tallest - len(nodes)) * (NODE_HEIGHT + GAP_Y) // 2
        for row, node_id in enumerate(nodes):
            boxes[node_id] = _box(
                node_id,
                states.get(node_id),
                x=PADDING + column * (NODE_WIDTH + GAP_X),
                y=PADDING + offset + row * (NODE_HEIGHT + GAP_Y),
                now=now,
                time_left=time_left.get(node_id, ""),
            )
    edges = [
        _edge(boxes[dependency], boxes[node_id])
        for node_id, deps in depends_on.items()
        for dependency in deps
    ]
    ordered = [boxes[node_id] for nodes in layers for node_id in nodes]
    return GraphLayout(nodes=ordered, edges=edges, width=width, height=height)


def _box(
    node_id: str,
    state: NodeStateLike | None,
    *,
    x: int,
    y: int,
    now: datetime,
    time_left: str = "",
) -> NodeBox:
    status = state.status if state is not None else "waiting"
    map_total = state.map_total if state is not None else None
    map_finished = state.map_finished if state is not None else 0
    bar = 0
    if map_total:
        bar = round((NODE_WIDTH - 16) * min(map_finished, map_total) / map_total)
    return NodeBox(
        node_id=node_id,
        label=_label(node_id),
        status=status,
        tone=tone_of(status),
        x=x,
        y=y,
        attempts=state.attempts if state is not None else 0,
        run_attempt=getattr(state, "attempt_number", 1) if state is not None else 1,
        duration=format_duration(node_duration(state, now=now)) if state is not None else "",
        execution_id=str(state.execution_id) if state is not None and state.execution_id else None,
        map_total=map_total,
        map_finished=map_finished,
        map_bar_width=bar,
        time_left=time_left if status in TIME_LEFT_STATUSES else "",
    )


def timer_line(*, kind: str, due_in: float | None, deadline_in: float | None) -> str:
    """What a waiting sleep or sensor node's box says: the time left."""
    if due_in is None:
        return ""
    soon = due_in < 1
    if kind == "sleep":
        return "wakes now" if soon else f"wakes in {format_duration(due_in)}"
    line = "poke due" if soon else f"poke in {format_duration(due_in)}"
    if deadline_in is not None:
        line += f" · timeout {format_duration(deadline_in)}"
    return line


def deadline_line(deadline: datetime, *, now: datetime) -> str:
    """What a waiting approval node's box says: the time until its timeout decides."""
    return f"{format_duration(max(0.0, (deadline - now).total_seconds()))} left"


def _edge(source: NodeBox, target: NodeBox) -> EdgeLine:
    x1, y1 = source.x + NODE_WIDTH, source.y + NODE_HEIGHT // 2
    x2, y2 = target.x - 2, target.y + NODE_HEIGHT // 2  # stops short: the arrow head fits
    middle = (x1 + x2) // 2
    return EdgeLine(
        source=source.node_id,
        target=target.node_id,
        path=f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2},{y2}",
        tone=source.tone,
    )


# -- the Gantt ------------------------------------------------------------------------------
class AttemptLike(Protocol):
    number: int
    status: str
    started_at: datetime | None
    completed_at: datetime | None


@dataclass(frozen=True)
class GanttBar:
    """An earlier attempt of a node, drawn on the node's row before its current one."""

    number: int
    status: str
    tone: str
    left: float
    width: float
    offset: str
    duration: str


@dataclass(frozen=True)
class GanttRow:
    node_id: str
    status: str
    tone: str
    started: bool
    left: float  # percent of the run's span where the node was dispatched
    wait: float  # percent spent queued (dispatch to the first attempt's start)
    run: float  # percent from the first attempt's start to the end (or now)
    run_left: float  # left + wait: where the running part of the bar begins
    offset: str  # "+3.2 s" from the run start
    duration: str
    attempt: int = 1  # which attempt of the node in the run the main bar is
    earlier: tuple[GanttBar, ...] = ()  # its earlier attempts (a re-run keeps them)


@dataclass(frozen=True)
class GanttTick:
    left: float
    label: str


@dataclass(frozen=True)
class Gantt:
    rows: list[GanttRow]
    ticks: list[GanttTick]
    span: str


MIN_BAR_PERCENT = 0.4  # an instant node still shows as a sliver


def _percent(seconds: float, span: float) -> float:
    return round(100.0 * seconds / span, 3)


def gantt(
    *,
    run_started_at: datetime | None,
    run_completed_at: datetime | None,
    states: Iterable[NodeStateLike],
    execution_starts: Mapping[str, datetime],
    now: datetime,
    earlier: Mapping[str, Sequence[AttemptLike]] | None = None,
) -> Gantt:
    """Rows in start order (nodes that never started last), bars relative to the run start.

    `execution_starts`: node id -> when its first attempt started on a worker; the part of a
    bar before it is queue wait. `earlier`: node id -> its earlier attempts in the run (kept
    by a re-run), each drawn as a bar of its own on the node's row.
    """
    states = list(states)
    earlier = {
        node_id: [a for a in attempts if a.started_at is not None]
        for node_id, attempts in (earlier or {}).items()
    }

    def first_start(state: NodeStateLike) -> datetime | None:
        starts = [a.started_at for a in earlier.get(state.node_id, [])]
        if state.started_at is not None:
            starts.append(state.started_at)
        return min(starts) if starts else None

    started = sorted(
        ((first_start(s), s) for s in states if first_start(s) is not None), key=lambda p: p[0]
    )
    origin = run_started_at or (started[0][0] if started else now)
    end = run_completed_at or now
    for _, state in started:
        end = max(end, state.completed_at or now) if state.started_at else end
        for attempt in earlier.get(state.node_id, []):
            end = max(end, attempt.completed_at or attempt.started_at)
    span = max((end - origin).total_seconds(), 0.001)

    def earlier_bars(node_id: str) -> tuple[GanttBar, ...]:
        bars = []
        for attempt in earlier.get(node_id, []):
            began = max(0.0, (attempt.started_at - origin).total_seconds())
            took = max(0.0, ((attempt.completed_at or attempt.started_at) - origin).total_seconds())
            left = min(_percent(began, span), 100.0 - MIN_BAR_PERCENT)
            bars.append(
                GanttBar(
                    number=attempt.number,
                    status=attempt.status,
                    tone=tone_of(attempt.status),
                    left=left,
                    width=max(_percent(took - began, span), MIN_BAR_PERCENT),
                    offset=f"+{format_duration(began)}",
                    duration=format_duration(took - began),
                )
            )
        return tuple(bars)

    rows = []
    for _, state in started:
        if state.started_at is None:  # only earlier attempts have run: the current waits
            rows.append(_unstarted_row(state, earlier=earlier_bars(state.node_id)))
            continue
        dispatched = max(0.0, (state.started_at - origin).total_seconds())
        finish = (state.completed_at or now) - origin
        total = max(0.0, finish.total_seconds() - dispatched)
        began = execution_starts.get(state.node_id)
        if began is not None:
            wait = min(max(0.0, (began - origin).total_seconds() - dispatched), total)
        else:  # never started on a worker: still queued, or ended without running
            wait = total if tone_of(state.status) == "waiting" else 0.0
        left = _percent(dispatched, span)
        wait_pct = _percent(wait, span)
        run_pct = _percent(total - wait, span)
        if wait_pct + run_pct < MIN_BAR_PERCENT:
            run_pct = MIN_BAR_PERCENT - wait_pct
        run_left = min(round(left + wait_pct, 3), 100.0 - run_pct)
        rows.append(
            GanttRow(
                node_id=state.node_id,
                status=state.status,
                tone=tone_of(state.status),
                started=True,
                left=left,
                wait=wait_pct,
                run=run_pct,
                run_left=run_left,
                offset=f"+{format_duration(dispatched)}",
                duration=format_duration(total),
                attempt=getattr(state, "attempt_number", 1),
                earlier=earlier_bars(state.node_id),
            )
        )
    rows += [_unstarted_row(s) for s in states if first_start(s) is None]
    ticks = [GanttTick(left=25.0 * i, label=format_duration(span * i / 4)) for i in range(5)]
    return Gantt(rows=rows, ticks=ticks, span=format_duration(span))


def _unstarted_row(state: NodeStateLike, *, earlier: tuple[GanttBar, ...] = ()) -> GanttRow:
    return GanttRow(
        node_id=state.node_id,
        status=state.status,
        tone=tone_of(state.status),
        started=False,
        left=0.0,
        wait=0.0,
        run=0.0,
        run_left=0.0,
        offset="",
        duration="",
        attempt=getattr(state, "attempt_number", 1),
        earlier=earlier,
    )
