#!/bin/sh
# The hot standby (docker-compose.yml, service postgres-standby): on first start, a base
# backup of the primary streamed into the empty data folder, written as a standby
# (standby.signal, primary_conninfo naming it `standby`, the name the primary's
# synchronous_standby_names waits for); then the server as the image runs it.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  until pg_isready -h postgres -U replicator; do sleep 1; done
  mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 0700 "$PGDATA"
  # As the server's own account (the image's gosu): the files must be its own.
  PGPASSWORD="$POSTGRES_REPLICATION_PASSWORD" gosu postgres pg_basebackup -h postgres \
    -U replicator -D "$PGDATA" -X stream -R --checkpoint=fast -d "application_name=standby"
fi
exec docker-entrypoint.sh postgres -c hot_standby=on -c synchronous_standby_names=''
