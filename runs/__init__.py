"""A run's end, settled: the core's state transition (scheduler_app.services.executions) and,
in the same transaction, what depends on it in the domain apps: the DAG node it ran, its
alerts and counters. The runtime (worker, beat's housekeeping, the API's actions) ends runs
through here, so the core never calls up into `dags` or `alerting` (Zulip's actions style:
the calls are explicit, in one place)."""
