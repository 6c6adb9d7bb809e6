#!/usr/bin/env bash
# Runs cmd/pgsize, the pool over real PostgreSQL connections, against a
# server of its own that lives as long as the run:
#
#   bench/pg.sh                                 # the fixed-size sweep (cmd/pgsize's defaults)
#   bench/pg.sh -sizes 4,8,16 -duration 10s     # any cmd/pgsize flags, passed through
#
# It builds cmd/pgsize, initdb's a cluster in a temporary directory, starts
# it on 127.0.0.1 (the first free port from PGSIZE_PORT, default 55432,
# and a Unix socket in that directory only, so nothing outside it is
# touched), creates the schema, runs cmd/pgsize with -dsn pointing at it
# and the flags given here, then stops the server and removes the
# directory, also on failure or Ctrl-C. Its exit status is cmd/pgsize's.
#
# The server: PostgreSQL's defaults but synchronous_commit=off, so a commit
# returns without waiting for its WAL flush. fsync stays on and the WAL is
# written as always (by the WAL writer, within wal_writer_delay), so a
# statement still takes and holds its row lock as it would on a production
# server; what it no longer holds the lock for is the flush, which on this
# VM's disk would swamp the lock and the pool with the disk's latency.
# max_connections is 200: the clients' connections (up to -clients) and
# the script's.
#
# initdb and postgres refuse to run as root. As root, the server runs as
# PGSIZE_USER, default the postgres user the distribution's package made,
# or nobody when there is none (its data directory is its own, in the
# temporary directory); cmd/pgsize runs as the caller either way.
#
# Environment: PGBIN, the server's binaries (default: pg_config --bindir,
# else the newest /usr/lib/postgresql/*/bin); PGSIZE_PORT; PGSIZE_USER;
# TMPDIR. Needs Go and PostgreSQL (15 here); not run by CI.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ -z "${PGBIN:-}" ]; then
	if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
		PGBIN=$(pg_config --bindir)
	else
		PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	fi
fi
[ -x "$PGBIN/initdb" ] && [ -x "$PGBIN/pg_ctl" ] && [ -x "$PGBIN/psql" ] || {
	echo "pg.sh: no PostgreSQL binaries in '${PGBIN}' (set PGBIN)" >&2
	exit 1
}

as=() # the prefix that runs a server command as its user
if [ "$(id -u)" -eq 0 ]; then
	user=${PGSIZE_USER:-}
	if [ -z "$user" ]; then
		if id postgres >/dev/null 2>&1; then user=postgres; else user=nobody; fi
	fi
	as=(runuser -u "$user" --)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pgsize.XXXXXX")
data=$tmp/data
started= child=
cleanup() {
	status=$?
	if [ -n "$child" ]; then
		kill "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	if [ -n "$started" ]; then
		"${as[@]}" "$PGBIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 ||
			"${as[@]}" "$PGBIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "==> go build ./cmd/pgsize" >&2
(cd "$here" && go build -o "$tmp/pgsize" ./cmd/pgsize)

[ ${#as[@]} -eq 0 ] || chown "$user" "$tmp"

port=${PGSIZE_PORT:-55432}
while (: </dev/tcp/127.0.0.1/"$port") 2>/dev/null; do # something listens there
	port=$((port + 1))
done

echo "==> initdb in $data (${as[*]:+as ${as[2]}, }$("$PGBIN/postgres" --version))" >&2
"${as[@]}" "$PGBIN/initdb" -D "$data" -U bench --auth=trust -E UTF8 --locale=C >"$tmp/initdb.log" 2>&1 || {
	cat "$tmp/initdb.log" >&2
	exit 1
}
cat >>"$data/postgresql.conf" <<EOF

# pg.sh
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$tmp'
max_connections = 200
synchronous_commit = off
EOF

echo "==> starting the server on 127.0.0.1:$port" >&2
started=1
"${as[@]}" "$PGBIN/pg_ctl" -D "$data" -l "$tmp/server.log" -w -t 60 start >/dev/null || {
	cat "$tmp/server.log" >&2
	exit 1
}

# The hot rows: cmd/pgsize's -rows picks from the first N, up to 64.
"$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U bench -d postgres <<'EOF'
CREATE DATABASE pgsize;
\c pgsize
CREATE TABLE hot (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
INSERT INTO hot (id) SELECT generate_series(1, 64);
VACUUM ANALYZE hot;
EOF

# In the background, so that a TERM runs the trap at once, not after the run.
"$tmp/pgsize" -dsn "host=127.0.0.1 port=$port user=bench dbname=pgsize sslmode=disable" "$@" &
child=$!
status=0
wait "$child" || status=$?
child=
exit "$status"
