"""The scheduler's loop, independent of Celery beat so it can be driven and tested directly.

Every instance keeps the whole schedule warm in a heap and follows the change feed
(`TaskDefinition.changed_at`, `Dag.changed_at`). Tasks and DAGs are entries of the same
heap (`beat.sources`): catch-up, jitter, start/end, shards and the leader lock mean one
thing for both; a task's fire records an execution, a DAG's starts a DAG run
(`dags.services.schedule_fires`). Only the leader writes fires; a standby advances its heap
behind the leader so it can take over without a reload.
"""

from __future__ import annotations

import gc
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from beat.config import EngineConfig
from beat.expansion import Batch, due_expand
from beat.heap import Entry, ScheduleHeap
from beat.lead import RingRate, extra_lead
from beat.lock import LeaderLock
from beat.publisher import FirePublisher, doorbell_batch
from beat.sources import (
    BY_KIND,
    SOURCES,
    TASK,
    Source,
    changed_window,
    rows_of,
)
from beat.status import publish_node_status
from dags.services.schedule_fires import dag_next_fires_save, dag_schedule_fires_record
from scheduler_app.capabilities import queue_for
from scheduler_app.choices import TIERS, ScheduleType
from scheduler_app.housekeeping import chores
from scheduler_app.ringing.fairness import fair_promote_allowance
from scheduler_app.ringing.ring import fleet_round, ring
from scheduler_app.ringing.traces import RingReason
from scheduler_app.services.firing import (
    due_pending_promote,
    fires_record,
    next_fires_save,
    stale_queued_requeue,
    takeover_queued_republish,
)
from scheduler_app.shard_keys import shard_of, shard_sql
from scheduler_app.task_schedule import schedule_for
from schedules import ScheduleError

logger = logging.getLogger(__name__)

# Transactions commit out of changed_at order; re-reading a short overlap catches late ones.
CHANGE_FEED_OVERLAP = timedelta(seconds=5)
TICK_BUDGET_SECONDS = 1.0
# After a takeover, the previous leader's last seconds are rung again once more this much
# later (a COMMIT it sent before it died may land after the takeover).
REPUBLISH_AGAIN_SECONDS = 2.0


class SchedulerEngine:
    def __init__(
        self,
        *,
        lock: LeaderLock,
        config: EngineConfig,
        shard: tuple[int, int] | None = None,
        clock: Callable[[], datetime] = timezone.now,
    ) -> None:
        self.lock = lock
        self.config = config
        # What the engine reads the time from: a test moves one of its own instead of
        # sleeping (the change feed's lag, a measure of the database's clock, reads the real one).
        self.clock = clock
        # (index, count) of the shard this engine schedules (`beat.shards`); None: all.
        self.shard = shard if shard is not None and shard[1] > 1 else None
        # Promoting pending runs, reaping, requeueing, retention: once per
        # fleet, by the unsharded leader or shard 0's.
        self.fleet_duties = self.shard is None or self.shard[0] == 0
        self.heap = ScheduleHeap(ahead=timedelta(seconds=config.fire_ahead_seconds))
        self._seen_changes: dict[uuid.UUID, datetime] = {}
        self._change_cursor: datetime | None = None
        self._last_housekeeping = 0.0
        # A takeover's second republish pass: (when, since, until), see _republish_after_takeover.
        self._republish_again: tuple[float, datetime, datetime] | None = None
        # When a batch last failed to record (the database lost), until the fires recorded
        # around it are rung again (`_ring_what_the_outage_left`).
        self._database_lost_at: datetime | None = None
        self.fired_total = 0
        self.published_total = 0
        self.ring_rate = RingRate()
        self.last_extra_lead = timedelta(0)
        self.last_tick_at: datetime | None = None
        self.leading = False
        # Change feed: the largest (apply time - changed_at) of the last poll, and when it ran.
        self.change_feed_lag_seconds = 0.0
        self.change_feed_polled_at: datetime | None = None
        self.last_tick_seconds = 0.0
        self._next_after_now: dict[int, datetime | None] | None = None
        self._tenant_ids: dict[uuid.UUID, uuid.UUID] = {}
        self._publisher = FirePublisher()

    # -- loading and following the change feed -------------------------------------
    def load(self, *, now: datetime | None = None) -> int:
        now = now or self.clock()
        self._change_cursor = now
        loaded = 0
        # A million tasks share a few hundred schedule objects (`task_schedule._parsed`): each
        # one's next fire after `now` is computed once, not once per task.
        self._next_after_now = {}
        # Loading allocates millions of long-lived objects; the cyclic collector would walk
        # the growing heap again and again (quadratic). Nothing here makes cycles.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for row in self._schedulable_rows():
                if self._apply_row(row, now=now):
                    loaded += 1
        finally:
            self._next_after_now = None
            if collecting:
                gc.enable()
        # The loaded heap lives as long as the process: keep it out of every later collection.
        gc.freeze()
        logger.info("scheduler %s loaded %d schedules", self.lock.node_id, loaded)
        return loaded

    def _schedulable_rows(self) -> Iterator[dict]:
        for source in SOURCES:
            yield from rows_of(source, self._schedulable_values(source))

    def _schedulable_values(self, source: Source) -> Iterator[tuple]:
        rows = source.schedulable()
        if self.shard is not None:
            index, count = self.shard
            # No user input in this SQL: our own expression, the shard index as a parameter.
            # DAGs shard by their id exactly as tasks do.
            where = f"{shard_sql('id', count)} = %s"
            rows = rows.extra(where=[where], params=[index])  # noqa: S610
        # A million rows: a named (server-side) cursor in binary format, big fetches and
        # no ORM per row: half the load time goes into decoding timestamps as text otherwise.
        sql, params = rows.values_list(*source.fields).query.sql_with_params()
        connection.ensure_connection()
        with (
            transaction.atomic(),
            connection.connection.cursor(
                name=f"scheduler_load_{uuid.uuid4().hex[:8]}", binary=True
            ) as cursor,
        ):
            cursor.itersize = 20000
            cursor.execute(sql.replace("%s", "%b") if params else sql, params)
            yield from cursor

    def follow_changes(self, *, now: datetime) -> int:
        """Apply the definitions changed since the last poll.

        A change is re-read for CHANGE_FEED_OVERLAP after the poll that could first see it
        (transactions commit out of `changed_at` order), then drops out of the window. The
        window is read as (id, changed_at) pairs first and only rows not applied yet are
        fetched whole, so a bulk import re-read for a few ticks costs two columns a row.
        """
        if self._change_cursor is None:
            return self.load(now=now)
        since = self._change_cursor - CHANGE_FEED_OVERLAP
        # Tasks and DAGs in one query (a UNION): each row says which it is.
        unseen: dict[str, list[uuid.UUID]] = {source.kind: [] for source in SOURCES}
        for row_id, changed_at, kind in changed_window(since).iterator(chunk_size=5000):
            if self._seen_changes.get(row_id) != changed_at:
                unseen[kind].append(row_id)
        applied = 0
        lag = 0.0
        for kind, ids in unseen.items():
            source = BY_KIND[kind]
            for start in range(0, len(ids), 2000):
                chunk = source.model.platform.filter(id__in=ids[start : start + 2000])
                values = chunk.order_by("changed_at").values_list(*source.fields)
                for row in rows_of(source, values):
                    self._apply_row(row, now=now)
                    applied += 1
                    lag = max(lag, (timezone.now() - row["changed_at"]).total_seconds())
                    if row["changed_at"] > self._change_cursor:
                        self._change_cursor = row["changed_at"]
        # Everything stamped before this poll began has been offered to it: the window moves
        # on with the clock, not only when a newer change arrives (a quiet fleet after a bulk
        # import would otherwise re-read that import on every tick).
        self._change_cursor = max(self._change_cursor, now)
        self._forget_old_changes()
        self.change_feed_lag_seconds = lag
        self.change_feed_polled_at = now
        return applied

    def _forget_old_changes(self) -> None:
        if self._change_cursor is None or len(self._seen_changes) < 10000:
            return
        horizon = self._change_cursor - CHANGE_FEED_OVERLAP * 2
        self._seen_changes = {k: v for k, v in self._seen_changes.items() if v >= horizon}

    def _in_shard(self, task_id: uuid.UUID) -> bool:
        return self.shard is None or shard_of(task_id, self.shard[1]) == self.shard[0]

    def _apply_row(self, row: dict, *, now: datetime) -> bool:
        # Only changes the next poll can still see need remembering (not a million at load).
        if (
            self._change_cursor is None
            or row["changed_at"] >= self._change_cursor - CHANGE_FEED_OVERLAP
        ):
            self._seen_changes[row["id"]] = row["changed_at"]
        schedulable = (
            self._in_shard(row["id"])
            and row["enabled"]
            and not row["paused"]
            and row["deleted_at"] is None
            and row["schedule_type"] != ScheduleType.MANUAL
        )
        if not schedulable:
            self.heap.remove(row["id"])
            return False
        try:
            schedule = schedule_for(
                schedule_type=row["schedule_type"],
                expression=row["schedule_expression"],
                timezone=row["timezone"],
                run_at=row["run_at"],
                anchor=row["created_at"],
                start_at=row["start_at"],
                end_at=row["end_at"],
                jitter_seconds=row["jitter_seconds"],
                seed=row["id"],
                exclude=row["schedule_exclude"],
            )
        except ScheduleError as error:
            logger.error(
                "%s %s has an invalid schedule, not loaded: %s", row["kind"], row["id"], error
            )
            self.heap.remove(row["id"])
            return False
        next_fire_at = row["next_fire_at"] or self._first_fire(schedule, now)
        if next_fire_at is None:
            self.heap.remove(row["id"])
            return False
        # One UUID object per tenant, not one per task (a million rows, a handful of tenants).
        tenant_id = self._tenant_ids.setdefault(row["tenant_id"], row["tenant_id"])
        self.heap.upsert(
            Entry(
                task_id=row["id"],
                tenant_id=tenant_id,
                priority=row["priority"],
                queue=(
                    queue_for(priority=row["priority"], capability=row["capability"])
                    if row["kind"] == TASK
                    else ""
                ),
                max_attempts=row["max_attempts"],
                schedule=schedule,
                next_fire_at=next_fire_at,
                catchup=row["catchup"],
                overlap=row["overlap"],
                kind=row["kind"],
            )
        )
        return True

    def _first_fire(self, schedule, now: datetime) -> datetime | None:
        memo = self._next_after_now
        if memo is None:
            return schedule.next_after(now)
        key = id(schedule)  # shared objects stay alive in the parse cache during the load
        if key not in memo:
            memo[key] = schedule.next_after(now)
        return memo[key]

    # -- one tick ---------------------------------------------------------------------
    def tick(self, *, may_lead: bool = True) -> float:
        """Run one round; returns how long to sleep before the next. `may_lead` False: stay
        a standby unless this engine already leads (a sharded beat at its fair share)."""
        close_old_connections()
        started = time.monotonic()
        now = self.clock()
        self.follow_changes(now=now)
        was_leading = self.leading
        if may_lead or self.lock.is_held():
            leading = self.leading = self.lock.try_acquire()
        else:
            leading = self.leading = False
        if leading:
            # The takeover's instant is after the lock is ours, not the tick's start: a
            # predecessor that recorded a batch between the two and died before ringing it
            # left rows stamped after `now` (seen: one second of fires in 1 of 10 kills).
            took_over_at = self.clock() if not was_leading else now
            self._fire_due()
            self._ring_what_the_outage_left()
            # After the fires due now: what a dead predecessor may have left unrung is late
            # already, and a fire due now must not wait behind it.
            if not was_leading:
                self._republish_after_takeover(until=took_over_at)
            elif self._republish_again and time.monotonic() >= self._republish_again[0]:
                _, since, until = self._republish_again
                self._republish_again = None
                self._republish_queued(since=since, until=until)
            if self.fleet_duties:
                self._promote_pending()
                self._housekeeping()
        else:
            self._shadow_leader(now=self.clock())
        self.last_tick_at = self.clock()
        self.last_tick_seconds = time.monotonic() - started
        publish_node_status(self, leading=leading)
        sleep = self._sleep_seconds()
        return sleep if leading else min(sleep, self.config.lock_try_seconds)

    def _fire_due(self) -> None:
        started = time.monotonic()
        fired_before = self.fired_total
        extra = self.last_extra_lead = self._extra_lead(self.clock())
        try:
            # Never dispatch unless the lock is confirmed; checked before each batch is taken.
            while time.monotonic() - started < TICK_BUDGET_SECONDS and self.lock.is_held():
                now = self.clock()
                # Entries that ring by now: fires due by now, and up to `fire_ahead_seconds`
                # (plus a burst's extra lead) later for the ones that ring ahead
                # (`heap.Entry.ring_ahead`).
                due = self.heap.pop_due(now, self.config.batch_size, extra)
                if not due:
                    # Every fire due by `now` is recorded: standbys may shadow up to here.
                    self.lock.mark_fired_through(now)
                    return
                # Where each entry stood: a batch the database did not take (the primary
                # lost, `_batch_not_recorded`) puts them back, to be owed again.
                before = [(entry, entry.next_fire_at, entry.last_fired_at) for entry in due]
                batch = due_expand(
                    due,
                    heap=self.heap,
                    now=now,
                    extra=extra,
                    window=timedelta(seconds=self.config.catchup_window_seconds),
                    late_grace=self.config.late_grace,
                )
                try:
                    self._record(batch, now=now)
                except Exception:
                    self._batch_not_recorded(before)
                    raise
        finally:
            self.published_total += self._publisher.drain()
            self.ring_rate.observe(self.fired_total - fired_before, time.monotonic() - started)

    def _record(self, batch: Batch, *, now: datetime) -> None:
        # The fires and where each schedule goes next commit together (one commit).
        with transaction.atomic():
            bells = fires_record(batch.fires, now=now)
            next_fires_save(batch.updates)
        self.fired_total += len(bells)
        if bells:
            # Goes out while the next batch is being recorded (`beat.publisher`).
            self._publisher.submit(bells)
        if batch.dag_updates:
            # Each DAG fire commits on its own (it locks its DAG's row, which a
            # finishing node's run also takes); its first nodes ring after that
            # commit. A fire recorded before a crash left the next fires unsaved is
            # a no-op the second time (UNIQUE(dag, scheduled_at)).
            self.fired_total += dag_schedule_fires_record(batch.dag_fires)
            dag_next_fires_save(batch.dag_updates)

    def _batch_not_recorded(self, before: list[tuple[Entry, datetime, datetime | None]]) -> None:
        """The database failed the batch (typically: the primary died and its standby is
        being promoted). Its entries go back to where they stood, so the next tick owes
        their fires again, with what fell due meanwhile (inside the catch-up window, by each
        one's catch-up policy): nothing is skipped because one COMMIT failed. Its outcome is
        unknown: it may have landed. Recording it again is a no-op then (ON CONFLICT DO
        NOTHING, UNIQUE(dag, scheduled_at)), but rows it wrote are rung by nobody: the
        first tick that records again rings what was recorded since then (`tick`)."""
        for entry, next_fire_at, last_fired_at in before:
            if self.heap.get(entry.task_id) is entry:  # not changed or removed meanwhile
                entry.last_fired_at = last_fired_at
                self.heap.reschedule(entry, next_fire_at)
        if self._database_lost_at is None:
            self._database_lost_at = self.clock()

    def _ring_what_the_outage_left(self) -> None:
        """After a batch failed, once the database records again: ring the queued rows
        recorded from a little before the failure until now, now and once more a little
        later (a COMMIT whose answer was lost may be replayed on the promoted standby
        after a delay). A doorbell for a run already rung costs a refused claim."""
        lost_at = self._database_lost_at
        if lost_at is None:
            return
        since = lost_at - self.config.late_grace - timedelta(seconds=TICK_BUDGET_SECONDS)
        until = self.clock()
        self._republish_queued(since=since, until=until)
        self._database_lost_at = None  # only once rung: a failure here tries again next tick
        self._republish_again = (time.monotonic() + REPUBLISH_AGAIN_SECONDS, since, until)
        logger.info("the database records again: fires since %s rung again", since.isoformat())

    def _extra_lead(self, now: datetime) -> timedelta:
        """How much earlier than its own lead a burst ahead must ring (`beat.lead`)."""
        most = self.config.most_extra_lead
        if not most:
            return most
        rate = self.ring_rate.per_second
        profile = self.heap.due_ahead_profile(now + most, cap=int(rate * most.total_seconds()) + 1)
        return extra_lead(
            profile, now=now, rate=rate, margin_seconds=self.config.tick_seconds, most=most
        )

    def _shadow_leader(self, *, now: datetime) -> None:
        """A standby moves its heap along behind a live leader, so that a takeover starts
        from where the leader stood instead of replaying its history: up to the leader's
        fired-through mark (every fire due by it is recorded), never past this standby's
        own clock; anything newer may still be owed by a leader that just died
        (`heap.ScheduleHeap.skip_through`). Only without a mark (Redis restarted empty, a
        leader that has not caught up once yet) does it go by its own clock, two lock TTLs
        behind.

        Not the later of the two: a standby whose clock is ahead (an NTP step) would skip
        through fires the leader has not recorded yet, and a leader behind on its work (or
        whose clock is behind) has not recorded what two TTLs ago is on the standby's clock.
        Either is lost if that leader dies and this standby takes over (the nemesis found
        the first: tests/scheduler_app/test_standby_clock_skew.py)."""
        if self.lock.current_leader() is None:
            return
        recorded_through = self.lock.fired_through()
        if recorded_through is not None:
            horizon = min(recorded_through, now)
        else:
            horizon = now - timedelta(seconds=2 * self.config.lock_ttl_seconds)
        self.heap.skip_through(horizon, self.config.batch_size)

    def _republish_after_takeover(self, *, until: datetime) -> None:
        """Ring again what the previous leader recorded in its last seconds, at once, and
        once more REPUBLISH_AGAIN_SECONDS later for the same window: a leader SIGKILLed
        while its COMMIT was on the wire has that transaction land after a takeover as fast
        as presence makes it (seen: a whole second of fires left without a doorbell).
        `until`: the takeover's instant; what this leader recorded since is rung already."""
        since = until - self.config.late_grace - timedelta(seconds=TICK_BUDGET_SECONDS)
        self._republish_queued(since=since, until=until)
        self._republish_again = (time.monotonic() + REPUBLISH_AGAIN_SECONDS, since, until)

    def _republish_queued(self, *, since: datetime, until: datetime) -> None:
        while self.lock.is_held():
            bells = takeover_queued_republish(since=since, now=until, limit=self.config.batch_size)
            if bells:
                self.published_total += ring(bells, reason=RingReason.REPUBLISH)
                logger.info("republished %d queued executions of the previous leader", len(bells))
            if len(bells) < self.config.batch_size:
                return

    def _promote_pending(self) -> None:
        batch = doorbell_batch()
        # A cold tier takes a round of the fleet (`fairness`), but promoted runs go out cut
        # the default way (`dispatch.batch_size` with the fleet unknown): one message per
        # process would put a DAG wave's nodes, which finish one by one, into a few long
        # batches that spill and come back (500-wide fan-out: 2.8 s cut small, 10 s).
        round_size = fleet_round(batch, self._publisher.fleet_processes())
        per_tenant = fair_promote_allowance(TIERS, fleet_round=round_size)
        while self.lock.is_held():
            bells = due_pending_promote(
                now=self.clock(), limit=self.config.batch_size, per_tenant=per_tenant
            )
            if bells:
                self.published_total += ring(bells, batch=batch, round_size=round_size)
            if len(bells) < self.config.batch_size:
                return

    def _housekeeping(self) -> None:
        if time.monotonic() - self._last_housekeeping < self.config.housekeeping_seconds:
            return
        self._last_housekeeping = time.monotonic()
        # The stale requeue is the beat's own; every other chore is an app's
        # (scheduler_app.housekeeping: each app adds its own in its AppConfig.ready).
        leader = self.lock.is_held()
        if leader:
            bells = stale_queued_requeue(
                now=self.clock(),
                grace_seconds=self.config.requeue_grace_seconds,
                limit=self.config.batch_size,
            )
            if bells:
                logger.warning("republishing %d queued executions nobody started", len(bells))
                ring(bells, reason=RingReason.REQUEUE)
        for chore in chores():
            if chore.leader_only and not leader:
                continue
            try:
                chore.run(self.clock())
            except Exception:  # the next round tries again; the rest goes on
                logger.exception("housekeeping chore %s failed", chore.name)

    def _sleep_seconds(self) -> float:
        head = self.heap.peek_time()
        if head is None:
            return self.config.tick_seconds
        # A burst ringing early (`_extra_lead`) goes on at once: its head rings by now + extra.
        until_head = (head - self.clock() - self.last_extra_lead).total_seconds()
        return max(0.01, min(self.config.tick_seconds, until_head))
