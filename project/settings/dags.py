"""DAG settings: where DAG files are read from, the caps on a definition, sensor pokes,
expression budgets and node continuation. Read here once; `base` takes them as they are."""

from pathlib import Path

from project.settings.env import env_float, env_int, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# Where `manage.py sync_dags` reads DAG files, and the tenant of files that name none.
DAG_FILES_DIR = env_str("DAG_FILES_DIR", str(BASE_DIR / "dags" / "definitions"))
DAG_FILES_TENANT = env_str("DAG_FILES_TENANT", "demo")
# A definition is tenant input: past these it is refused with a 400 before any graph work
# (validation is linear in nodes plus edges; dags/spec.py).
DAG_MAX_NODES = env_int("DAG_MAX_NODES", 5000)
DAG_MAX_EDGES = env_int("DAG_MAX_EDGES", 50_000)
# A map_over node fans out to at most this many shards, whether its list is written in the
# definition (a 400 when saved) or comes from an upstream result (the node fails at dispatch).
DAG_MAX_MAP_ITEMS = env_int("DAG_MAX_MAP_ITEMS", 10_000)
# Sensor nodes (dags/services/sensor_rounds.py): the beat leader pokes them off its firing
# loop. Each poke has a timeout; one round pokes at most TENANT_POKES of a tenant's due
# sensors, for at most TENANT_SECONDS of that tenant's time, tenants side by side on THREADS.
DAG_SENSORS = {
    "POKE_TIMEOUT_SECONDS": env_float("DAG_SENSOR_POKE_TIMEOUT_SECONDS", 10.0),
    "TENANT_POKES": env_int("DAG_SENSOR_TENANT_POKES", 20),
    "TENANT_SECONDS": env_float("DAG_SENSOR_TENANT_SECONDS", 15.0),
    "THREADS": env_int("DAG_SENSOR_THREADS", 4),
    "BATCH": env_int("DAG_SENSOR_BATCH", 200),
}
# A definition's document (YAML or JSON: API body, dashboard editor, sync_dags file) and the
# JSON stored from it; past either it is refused before anything is saved.
DEFINITION_MAX_DOCUMENT_BYTES = env_int("DEFINITION_MAX_DOCUMENT_BYTES", 1024 * 1024)
DEFINITION_MAX_STORED_BYTES = env_int("DEFINITION_MAX_STORED_BYTES", 1024 * 1024)
# Backfills: how many may run at once per tenant (one more is a 409), and how many one
# housekeeping round advances, taken round-robin across tenants.
BACKFILL_MAX_RUNNING_PER_TENANT = env_int("BACKFILL_MAX_RUNNING_PER_TENANT", 20)
BACKFILL_ADVANCE_BATCH = env_int("BACKFILL_ADVANCE_BATCH", 200)
# The budget of every path and template a tenant writes (budgets/limits.py): a JSONPath
# condition, a map_over field, an idempotency key. The text limits are checked when it is
# saved and again when it is evaluated; the evaluation stops past MAX_NODES nodes visited or
# CPU_SECONDS of CPU, and the node it decides fails naming the budget.
EXPRESSION_BUDGET = {
    "MAX_CHARS": env_int("EXPRESSION_MAX_CHARS", 512),
    "MAX_SEGMENTS": env_int("EXPRESSION_MAX_SEGMENTS", 16),
    "MAX_NODES": env_int("EXPRESSION_MAX_NODES", 100_000),
    "CPU_SECONDS": env_float("EXPRESSION_CPU_SECONDS", 0.5),
    "MAX_OUTPUT_CHARS": env_int("EXPRESSION_MAX_OUTPUT_CHARS", 1024 * 1024),
}
# A worker that finishes a DAG node runs one ready successor itself (no broker round trip)
# for up to this many seconds from the message that started it; 0 turns it off.
DAG_CONTINUATION_SECONDS = env_float("DAG_CONTINUATION_SECONDS", 10.0)
