"""The nemesis' PostgreSQL faults (faults.py) are drawn only when it runs on a primary and
standby (NEMESIS_POSTGRES=cluster, `make chaos`): the in-suite form on the single test
PostgreSQL keeps the plan it had, so the suite's time does not grow. Pure: no process."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from tests.chaos.faults import FAULT_KINDS, PostgresFailover, PostgresPartition
from tests.chaos.nemesis import plan

POSTGRES_KINDS = (PostgresPartition, PostgresFailover)


def test_the_postgres_faults_need_the_cluster():
    single = SimpleNamespace(cluster=None)
    clustered = SimpleNamespace(cluster=object())
    for kind in POSTGRES_KINDS:
        assert kind in FAULT_KINDS
        assert not kind().applicable(single)
        assert kind().applicable(clustered)


def test_the_in_suite_plan_is_the_one_it_was_before_the_postgres_faults():
    # What the in-suite form has: two beats, the faketime clock, no cluster.
    single = SimpleNamespace(
        cluster=None, clock_file="clock", stack=SimpleNamespace(beats={"a": 1, "b": 2})
    )
    kinds = [kind for kind in FAULT_KINDS if kind().applicable(single)]
    before = [kind for kind in FAULT_KINDS if kind not in POSTGRES_KINDS]
    assert kinds == before
    steps = plan(31, seconds=90, kinds=kinds, long=False)
    assert not {step.kind for step in steps} & {kind.kind for kind in POSTGRES_KINDS}


def test_a_second_failover_draw_does_nothing_once_the_standby_is_promoted():
    """After one failover the cluster has no standby: a later draw of either kind is logged
    as skipped instead of killing the only server left or cutting a link to nothing."""
    cluster = SimpleNamespace(killed_at=1.0, promoted_at=2.0)
    stack = SimpleNamespace(cluster=cluster)
    failover, partition = PostgresFailover(), PostgresPartition()
    assert "skipped" in failover.inject(stack, rng=None)
    assert failover.heal(stack) == {"promoted": False}
    assert "skipped" in partition.inject(stack, rng=None)
    assert partition.heal(stack) == {"healed": False}


def test_a_plan_that_draws_both_cuts_the_link_before_it_loses_the_primary():
    """Seed 7 over three minutes drew the failover first, and the partition drawn after it
    had no standby left to cut off: the plan puts the first partition before the first
    failover, keeping every gap between steps."""
    clustered = SimpleNamespace(
        cluster=object(), clock_file="clock", stack=SimpleNamespace(beats={"a": 1, "b": 2})
    )
    kinds = [kind for kind in FAULT_KINDS if kind().applicable(clustered)]
    for seed in range(40):
        steps = plan(seed, seconds=180, kinds=kinds, long=True)
        drawn = [step.kind for step in steps]
        if "postgres-failover" in drawn and "postgres-partition" in drawn:
            assert drawn.index("postgres-partition") < drawn.index("postgres-failover"), seed
        for step, later in itertools.pairwise(steps):
            assert later.at > step.at + step.hold - 0.11, seed  # no two faults at once
    assert plan(7, seconds=180, kinds=kinds, long=True) == plan(
        7, seconds=180, kinds=kinds, long=True
    )
