import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

from beat.heap import Entry, ScheduleHeap
from schedules import parse_schedule

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def entry(at: datetime) -> Entry:
    return Entry(
        task_id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        priority=5,
        queue="normal",
        max_attempts=3,
        schedule=parse_schedule(schedule_type="cron", expression="* * * * *"),
        next_fire_at=at,
    )


def test_only_due_entries_are_popped_in_time_order():
    heap = ScheduleHeap()
    later, sooner, future = (
        entry(T0 + timedelta(seconds=5)),
        entry(T0),
        entry(T0 + timedelta(hours=1)),
    )
    for item in (later, sooner, future):
        heap.upsert(item)
    due = heap.pop_due(T0 + timedelta(seconds=10), limit=100)
    assert [e.task_id for e in due] == [sooner.task_id, later.task_id]
    assert heap.peek_time() == future.next_fire_at


def test_a_changed_entry_replaces_its_old_heap_position():
    heap = ScheduleHeap()
    original = entry(T0)
    heap.upsert(original)
    moved = dataclasses.replace(original, next_fire_at=T0 + timedelta(hours=2), version=0)
    heap.upsert(moved)
    assert heap.pop_due(T0 + timedelta(hours=1), limit=10) == []
    assert [e.task_id for e in heap.pop_due(T0 + timedelta(hours=3), limit=10)] == [
        original.task_id
    ]


def test_removed_entries_never_fire():
    heap = ScheduleHeap()
    gone = entry(T0)
    heap.upsert(gone)
    heap.remove(gone.task_id)
    assert heap.pop_due(T0 + timedelta(days=1), limit=10) == []
    assert len(heap) == 0


def test_reschedule_to_none_drops_the_entry():
    heap = ScheduleHeap()
    once = entry(T0)
    heap.upsert(once)
    [popped] = heap.pop_due(T0, limit=10)
    heap.reschedule(popped, None)
    assert len(heap) == 0 and heap.peek_time() is None


def test_pop_due_respects_the_batch_limit():
    heap = ScheduleHeap()
    for _ in range(25):
        heap.upsert(entry(T0))
    assert len(heap.pop_due(T0, limit=10)) == 10


def test_entries_that_allow_overlap_ring_ahead_of_their_fire():
    heap = ScheduleHeap(ahead=timedelta(milliseconds=500))
    allowing = entry(T0 + timedelta(milliseconds=400))
    skipping = dataclasses.replace(entry(T0 + timedelta(milliseconds=100)), overlap="skip")
    heap.upsert(allowing)
    heap.upsert(skipping)
    # The allowing entry rings at -100 ms, before the skipping one that rings at its fire.
    assert heap.peek_time() == T0 - timedelta(milliseconds=100)
    assert heap.pop_due(T0, 10) == [allowing]
    assert heap.pop_due(T0 + timedelta(milliseconds=99), 10) == []
    assert heap.pop_due(T0 + timedelta(milliseconds=100), 10) == [skipping]


def test_an_extra_lead_takes_entries_that_ring_ahead_early_and_never_the_others():
    heap = ScheduleHeap(ahead=timedelta(milliseconds=500))
    allowing = entry(T0 + timedelta(seconds=3))
    skipping = dataclasses.replace(entry(T0 + timedelta(seconds=1)), overlap="skip")
    dag = dataclasses.replace(entry(T0 + timedelta(seconds=2)), kind="dag")
    for one in (allowing, skipping, dag):
        heap.upsert(one)
    # 3 s ahead of now: the allowing entry (rings at 2.5 s) comes out, the others stay.
    assert heap.pop_due(T0, 10, timedelta(seconds=3)) == [allowing]
    assert heap.peek_time() == T0 + timedelta(seconds=1)
    assert heap.pop_due(T0 + timedelta(seconds=2), 10) == [skipping, dag]


def test_the_due_ahead_profile_counts_live_entries_that_ring_ahead_by_bucket():
    heap = ScheduleHeap(ahead=timedelta(milliseconds=500))
    burst = [entry(T0 + timedelta(seconds=2)) for _ in range(30)]
    later = [entry(T0 + timedelta(seconds=3, milliseconds=550)) for _ in range(5)]
    far = entry(T0 + timedelta(hours=1))
    at_fire = dataclasses.replace(entry(T0 + timedelta(seconds=2)), overlap="queue")
    for one in [*burst, *later, far, at_fire]:
        heap.upsert(one)
    heap.upsert(dataclasses.replace(burst[0], next_fire_at=T0 + timedelta(hours=2)))  # moved
    profile = heap.due_ahead_profile(T0 + timedelta(seconds=5), cap=1000)
    assert profile == [
        (T0 + timedelta(seconds=1, milliseconds=500), 29),
        (T0 + timedelta(seconds=3), 5),
    ]
    assert sum(n for _, n in heap.due_ahead_profile(T0 + timedelta(seconds=5), cap=10)) == 10
