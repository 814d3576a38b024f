"""Flow control's admission as one database function (`scheduler_flow_admit`), so that a
claimed batch under limits is admitted in one round trip and one commit: lock the keys,
count them, decide each run in due order, write what it holds or why it waits, record its
rate starts (`scheduler_app.services.flow_admission`). Before, the same decision took a
transaction of its own with four round trips (begin, lock and count, write, commit).

The rules are those the Python code had (its tests in tests/flow/ hold for both):
- a run is admitted when every one of its limits has room (slots held by running runs whose
  lease has not ended, and by queued runs a lost worker's requeue kept them for until that
  lease (`services.losses`), not by this batch's own runs, plus what this batch admitted
  before it; a rate key's starts in its window), and then takes from each;
- the first limit without room decides: `skip` and `cancel_newest` end the newcomer (the
  caller finishes it), `cancel_in_progress` names the oldest holders to cancel (the caller
  signals them) and waits, `queue` waits;
- a waiting run goes back to `pending`, keeping its scheduled_at, with its `waiting_for`
  and a `flow_wake_at`: the caller's recheck time for a slot, a rate window's opening;
- a pool's size is read here, under the lock, so a resize takes effect at once (a pool
  that is gone has no slots).

And the other side, `scheduler_flow_hand_on`, from a finish: the slots its runs held go to
their keys' oldest waiters (pending -> queued; the caller rings them after its commit), under
the same locks, so that no admission's refusal and no finish miss each other.
"""

from django.db import migrations

ADMIT_FUNCTION = """
CREATE OR REPLACE FUNCTION scheduler_flow_admit(
    p_now timestamptz,
    p_lock_ids bigint[],
    p_runs uuid[],
    p_tokens uuid[],
    p_tenants uuid[],
    p_wakes timestamptz[],
    p_limit_runs int[],
    p_kinds text[],
    p_keys text[],
    p_shown text[],
    p_maxima int[],
    p_weights int[],
    p_per int[],
    p_strategies text[]
) RETURNS TABLE (out_run int, out_verdict text, out_waiting_for jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    keys text[];
    used int[];
    oldest timestamptz[];
    maxima int[] := p_maxima;
    n_limits int := coalesce(array_length(p_keys, 1), 0);
    n_runs int := coalesce(array_length(p_runs, 1), 0);
    i int;
    j int := 1;
    x int;
    k int;
    first_limit int;
    blocking int;
    holds jsonb;
    shown jsonb;
    row record;
    chosen text[];
    admit_ids uuid[] := '{}';
    admit_tokens uuid[] := '{}';
    admit_holds jsonb[] := '{}';
    wait_ids uuid[] := '{}';
    wait_tokens uuid[] := '{}';
    wait_shown jsonb[] := '{}';
    wait_wakes timestamptz[] := '{}';
    start_keys text[] := '{}';
    start_runs uuid[] := '{}';
BEGIN
    -- The caller sorts the lock ids: two batches never wait for each other in a cycle.
    PERFORM pg_advisory_xact_lock(l) FROM unnest(p_lock_ids) AS l;
    SELECT coalesce(array_agg(DISTINCT key ORDER BY key), '{}') INTO keys
    FROM unnest(p_keys) AS key;
    used := array_fill(0, ARRAY[coalesce(array_length(keys, 1), 0)]);
    oldest := array_fill(NULL::timestamptz, ARRAY[coalesce(array_length(keys, 1), 0)]);
    -- Each statement has its own snapshot, taken after the locks: every admission committed
    -- before them is counted.
    FOR row IN
        SELECT h.key, sum(h.value::int)::int AS total
        FROM scheduler_app_taskexecution e, jsonb_each_text(e.flow_holds) h
        WHERE e.status IN ('running', 'queued') AND e.flow_holds IS NOT NULL
          AND e.flow_holds ?| keys AND e.lease_expires_at > p_now AND h.key = ANY (keys)
          AND e.id <> ALL (p_runs)
        GROUP BY h.key
    LOOP
        used[array_position(keys, row.key)] := row.total;
    END LOOP;
    IF 0 < ANY (p_per) THEN  -- rate limits: their keys' starts in their windows
        FOR row IN
            SELECT u.key, count(s.id)::int AS total, min(s.started_at) AS first_start
            FROM (
                SELECT DISTINCT p_keys[n] AS key, p_per[n] AS per
                FROM generate_subscripts(p_keys, 1) AS n WHERE p_per[n] > 0
            ) u
            LEFT JOIN scheduler_app_flowratestart s
              ON s.key = u.key AND s.started_at > p_now - u.per * interval '1 second'
            GROUP BY u.key
        LOOP
            k := array_position(keys, row.key);
            used[k] := row.total;
            oldest[k] := row.first_start;
        END LOOP;
    END IF;
    FOR x IN 1..n_limits LOOP
        IF maxima[x] IS NULL THEN  -- a pool: its size now
            maxima[x] := coalesce((
                SELECT p.slots FROM scheduler_app_pool p
                WHERE p.tenant_id = p_tenants[p_limit_runs[x]] AND p.name = p_shown[x]
            ), 0);
        END IF;
    END LOOP;

    FOR i IN 1..n_runs LOOP
        -- The run's limits are p_keys[first_limit .. j - 1] (runs in due order, their
        -- limits in theirs).
        first_limit := j;
        WHILE j <= n_limits AND p_limit_runs[j] = i LOOP
            j := j + 1;
        END LOOP;
        blocking := NULL;
        FOR x IN first_limit..j - 1 LOOP
            IF used[array_position(keys, p_keys[x])] + p_weights[x] > maxima[x] THEN
                blocking := x;
                EXIT;
            END IF;
        END LOOP;
        IF blocking IS NULL THEN
            holds := NULL;
            FOR x IN first_limit..j - 1 LOOP
                k := array_position(keys, p_keys[x]);
                used[k] := used[k] + p_weights[x];
                IF p_per[x] > 0 THEN
                    start_keys := array_append(start_keys, p_keys[x]);
                    start_runs := array_append(start_runs, p_runs[i]);
                ELSE
                    holds := coalesce(holds, '{}'::jsonb) || jsonb_build_object(p_keys[x], p_weights[x]);
                END IF;
            END LOOP;
            admit_ids := array_append(admit_ids, p_runs[i]);
            admit_tokens := array_append(admit_tokens, p_tokens[i]);
            admit_holds := array_append(admit_holds, holds);
            out_run := i; out_verdict := 'admitted'; out_waiting_for := NULL;
            RETURN NEXT;
            CONTINUE;
        END IF;
        k := array_position(keys, p_keys[blocking]);
        shown := jsonb_build_object(
            'kind', p_kinds[blocking], 'key', p_shown[blocking],
            'running', used[k], 'max', maxima[blocking]
        );
        IF p_per[blocking] > 0 THEN
            shown := shown || jsonb_build_object('per_seconds', p_per[blocking]);
        END IF;
        IF p_strategies[blocking] IN ('skip', 'cancel_newest') THEN
            out_run := i; out_verdict := p_strategies[blocking]; out_waiting_for := shown;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF p_strategies[blocking] = 'cancel_in_progress' THEN
            -- The newest wins: the oldest holders, as many as free the room it needs.
            SELECT coalesce(array_agg(h.id::text ORDER BY h.started_at, h.id), '{}') INTO chosen
            FROM (
                SELECT e.id, e.started_at,
                       sum(held.slots) OVER (
                           ORDER BY e.started_at, e.id
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
                       ) AS freed_before,
                       sum(held.slots) OVER () AS total
                FROM scheduler_app_taskexecution e,
                     LATERAL (SELECT (e.flow_holds ->> p_keys[blocking])::int AS slots) held
                WHERE e.status = 'running' AND e.flow_holds ? p_keys[blocking]
                  AND e.lease_expires_at > p_now
            ) h
            WHERE coalesce(h.freed_before, 0) < h.total + p_weights[blocking] - maxima[blocking];
            shown := shown || jsonb_build_object('cancelling', to_jsonb(chosen));
        END IF;
        wait_ids := array_append(wait_ids, p_runs[i]);
        wait_tokens := array_append(wait_tokens, p_tokens[i]);
        wait_shown := array_append(wait_shown, shown);
        IF p_per[blocking] > 0 THEN  -- the window's opening
            wait_wakes := array_append(
                wait_wakes,
                least(coalesce(oldest[k], p_now), p_now) + p_per[blocking] * interval '1 second'
            );
        ELSE
            wait_wakes := array_append(wait_wakes, p_wakes[i]);
        END IF;
        out_run := i; out_verdict := 'waiting'; out_waiting_for := shown;
        RETURN NEXT;
    END LOOP;

    IF cardinality(admit_ids) > 0 THEN
        UPDATE scheduler_app_taskexecution e
        SET flow_holds = u.holds, waiting_for = NULL, flow_wake_at = NULL
        FROM unnest(admit_ids, admit_tokens, admit_holds) AS u(id, token, holds)
        WHERE e.id = u.id AND e.claim_token = u.token AND e.status = 'running';
    END IF;
    IF cardinality(start_keys) > 0 THEN
        INSERT INTO scheduler_app_flowratestart (key, started_at, execution_id)
        SELECT s.key, p_now, s.run FROM unnest(start_keys, start_runs) AS s(key, run);
    END IF;
    IF cardinality(wait_ids) > 0 THEN
        -- running (claimed, not started) -> pending, keeping its scheduled_at.
        UPDATE scheduler_app_taskexecution e
        SET status = 'pending', queued_at = NULL, started_at = NULL, worker_id = '',
            claim_token = NULL, lease_expires_at = NULL, flow_holds = NULL,
            waiting_for = u.shown, flow_wake_at = u.wake, updated_at = p_now
        FROM unnest(wait_ids, wait_tokens, wait_shown, wait_wakes) AS u(id, token, shown, wake)
        WHERE e.id = u.id AND e.claim_token = u.token AND e.status = 'running';
    END IF;
    RETURN;
END
$$;
"""

HAND_ON_FUNCTION = """
CREATE OR REPLACE FUNCTION scheduler_flow_hand_on(
    p_now timestamptz,
    p_lock_ids bigint[],
    p_tenants uuid[],
    p_kinds text[],
    p_keys text[],
    p_slots int[]
) RETURNS TABLE (id uuid, tenant_id uuid, queue varchar, task_id uuid, traceparent varchar)
LANGUAGE plpgsql AS $$
BEGIN
    -- The keys' locks first, then (a statement of its own, so a snapshot taken after them)
    -- the waiters: an admission that was turning a run away for want of these slots has
    -- committed it as waiting by then, and it is handed its slot instead of missing it.
    PERFORM pg_advisory_xact_lock(l) FROM unnest(p_lock_ids) AS l;
    RETURN QUERY
    UPDATE scheduler_app_taskexecution e
    SET status = 'queued', queued_at = p_now, flow_wake_at = p_now, updated_at = p_now
    FROM (
        SELECT w.id FROM unnest(p_tenants, p_kinds, p_keys, p_slots) AS u(tenant_id, kind, key, slots)
        CROSS JOIN LATERAL (
            SELECT x.id FROM scheduler_app_taskexecution x
            WHERE x.status = 'pending' AND x.waiting_for IS NOT NULL
              AND x.tenant_id = u.tenant_id AND (x.waiting_for ->> 'key') = u.key
              AND (x.waiting_for ->> 'kind') = u.kind
            ORDER BY x.scheduled_at LIMIT u.slots
            FOR UPDATE SKIP LOCKED
        ) w
    ) woken
    WHERE e.id = woken.id AND e.status = 'pending'
    RETURNING e.id, e.tenant_id, e.queue, e.task_id, e.traceparent;
END
$$;
"""

DROP_FUNCTION = """
DROP FUNCTION IF EXISTS scheduler_flow_admit(
    timestamptz, bigint[], uuid[], uuid[], uuid[], timestamptz[], int[], text[], text[],
    text[], int[], int[], int[], text[]
);
DROP FUNCTION IF EXISTS scheduler_flow_hand_on(timestamptz, bigint[], uuid[], text[], text[], int[]);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0035_flow_control_pools_and_limits"),
    ]

    operations = [migrations.RunSQL(ADMIT_FUNCTION + HAND_ON_FUNCTION, DROP_FUNCTION)]
