#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on a free 127.0.0.1 port (trust auth, data in a temp dir) for the
# labeling app's PostgreSQL tests; installs Debian's postgresql first when it is missing.
# Prints the SQLAlchemy URL to use as NLHF_LABEL_TEST_DB_URL.
set -euo pipefail
PORT=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
fi
BIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")
DATA=$(mktemp -d /tmp/nlhf-pg.XXXXXX)
chown postgres "$DATA"
su postgres -s /bin/sh -c "$BIN/initdb -D $DATA -A trust -U postgres >/dev/null"
su postgres -s /bin/sh -c "$BIN/pg_ctl -D $DATA -l $DATA/log -o '-p $PORT -k $DATA -c listen_addresses=127.0.0.1' -w start >/dev/null"
echo "postgresql+psycopg://postgres@127.0.0.1:$PORT/postgres"
