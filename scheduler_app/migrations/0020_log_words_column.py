"""Log search reads a stored tsvector (`execution_logs.words`) instead of parsing each
candidate log's text again: a search over 800 logs of 256 KB spent its 34 to 77 s in
`to_tsvector`, recomputed per row for every log the word index returned.

Why a trigger and not a generated column: adding a STORED generated column rewrites the
whole table under an ACCESS EXCLUSIVE lock (every finish blocked for as long as it takes to
parse every log). Here the column is added empty (a catalog change), the trigger fills it on
every write of the text from then on, whoever writes (a finish, a batch of finishes, the
ORM, a web process of the previous release during a rolling deploy), and the rows stored
before the trigger are filled in batches of BATCH_ROWS, one short transaction each, walking
the primary key (row locks on one batch at a time; nothing else is locked). The GIN index is
built CONCURRENTLY once the column is full, and the expression index it replaces is dropped
the same way. Logs are not partitioned (only task_executions is): one table to fill.

Every step can run again: a migration stopped half-way (a lock timeout, a deploy killed)
is finished by running `migrate` again.
"""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import migrations

LOG_TABLE = "scheduler_app_executionlog"
# scheduler_app.selectors.log_search.SEARCHABLE_CHARS: PostgreSQL caps a tsvector at 1 MB.
SEARCHABLE_CHARS = 262_144
BATCH_ROWS = 500
NEW_INDEX = "idx_log_search_words"
OLD_INDEX = "idx_log_words"

WORDS_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION scheduler_log_words(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT to_tsvector('simple'::regconfig, left(body, {SEARCHABLE_CHARS})) $$;

-- The words are always the text's: a write that changes the text, or that would set the
-- words to anything but the text's (NULL included), gets them derived again; a write that
-- touches neither (a size or flag update) costs nothing.
CREATE OR REPLACE FUNCTION scheduler_log_words_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.words IS NULL
     OR NEW.text IS DISTINCT FROM OLD.text OR NEW.words IS DISTINCT FROM OLD.words THEN
    NEW.words := scheduler_log_words(NEW.text);
  END IF;
  RETURN NEW;
END
$$;
"""

FIRST_BATCH = "WITH batch AS (SELECT execution_id FROM {table} ORDER BY execution_id LIMIT %s)"
NEXT_BATCH = (
    "WITH batch AS (SELECT execution_id FROM {table} WHERE execution_id > %s "
    "ORDER BY execution_id LIMIT %s)"
)
# Setting the words to NULL has the trigger derive them (see scheduler_log_words_write).
FILL_BATCH = (
    ", filled AS (UPDATE {table} AS log SET words = NULL FROM batch "
    "WHERE log.execution_id = batch.execution_id AND log.words IS NULL RETURNING 1) "
    "SELECT (SELECT execution_id FROM batch ORDER BY execution_id DESC LIMIT 1), "
    "(SELECT count(*) FROM filled)"
)


def _ddl(cursor, sql: str) -> None:
    # A catalog change waits for the table's lock behind any long statement, and every
    # finish would queue behind it: give up after a few seconds instead (run migrate again).
    cursor.execute("SET lock_timeout = '5s'")
    try:
        cursor.execute(sql)
    finally:
        cursor.execute("RESET lock_timeout")


def log_words_backfill(cursor, *, batch_rows: int = BATCH_ROWS, table: str = LOG_TABLE) -> int:
    """Fill the words of every log stored before the trigger, a batch per transaction (the
    connection is in autocommit). Returns how many logs it filled. (`table`: the bench
    measures it on a copy.)"""
    filled_total, last = 0, None
    first, following = (FIRST_BATCH + FILL_BATCH, NEXT_BATCH + FILL_BATCH)
    while True:
        if last is None:
            cursor.execute(first.format(table=table), [batch_rows])
        else:
            cursor.execute(following.format(table=table), [last, batch_rows])
        last, filled = cursor.fetchone()
        if last is None:
            return filled_total
        filled_total += filled


def _index_concurrently(cursor) -> None:
    # A concurrent build that failed leaves an invalid index behind, which IF NOT EXISTS
    # would keep: drop it first.
    cursor.execute(
        "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE c.relname = %s",
        [NEW_INDEX],
    )
    row = cursor.fetchone()
    if row and row[0]:
        cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{NEW_INDEX}"')
    cursor.execute(
        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{NEW_INDEX}" ON {LOG_TABLE} USING gin (words)'
    )


def forwards(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        _ddl(cursor, f"ALTER TABLE {LOG_TABLE} ADD COLUMN IF NOT EXISTS words tsvector NULL")
        cursor.execute(WORDS_FUNCTIONS)
        _ddl(
            cursor,
            f"DROP TRIGGER IF EXISTS execution_log_words ON {LOG_TABLE}; "
            f"CREATE TRIGGER execution_log_words BEFORE INSERT OR UPDATE ON {LOG_TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION scheduler_log_words_write()",
        )
        log_words_backfill(cursor)
        _index_concurrently(cursor)
        cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{OLD_INDEX}"')
        # The search reads the words' statistics (most common lexemes) from the column.
        cursor.execute(f"ANALYZE {LOG_TABLE}")


def backwards(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{OLD_INDEX}" ON {LOG_TABLE} '
            f"USING gin (to_tsvector('simple'::regconfig, left(text, {SEARCHABLE_CHARS})))"
        )
        cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{NEW_INDEX}"')
        _ddl(cursor, f"DROP TRIGGER IF EXISTS execution_log_words ON {LOG_TABLE}")
        cursor.execute(
            "DROP FUNCTION IF EXISTS scheduler_log_words_write(); "
            "DROP FUNCTION IF EXISTS scheduler_log_words(text)"
        )
        _ddl(cursor, f"ALTER TABLE {LOG_TABLE} DROP COLUMN IF EXISTS words")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler_app", "0019_invitation_tokens"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="executionlog",
                    name="words",
                    field=SearchVectorField(editable=False, null=True),
                ),
                migrations.RemoveIndex(model_name="executionlog", name=OLD_INDEX),
                migrations.AddIndex(
                    model_name="executionlog",
                    index=GinIndex(fields=["words"], name=NEW_INDEX),
                ),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
