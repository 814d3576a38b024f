#!/bin/sh
# The primary's first start (postgres image, /docker-entrypoint-initdb.d): a replication
# role for the standby and the pg_hba line that lets it stream. Synchronous replication and
# the WAL settings are the server's command line (docker-compose.yml).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '${POSTGRES_REPLICATION_PASSWORD}';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
