#!/usr/bin/env bash
# Benchmarks of the fleet view (a PostgreSQL store):
#   1. `runws run -- /bin/true` with the file store against the same with a
#      PostgreSQL store (its start and end recorded), TLS and plaintext,
#      interleaved (bench/interleave.py);
#   2. `ls --fleet` with 100,000 runs recorded: the newest 20, one job's
#      newest 20, and all of them as JSON.
# Starts (and stops) its own throw-away server with ci/postgres.sh.
#
#   bench/fleet.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
. bench/lib.sh
BIN=$(built --bin runws)
eval "$(ci/postgres.sh start)"
SHM=$(mktemp -d /dev/shm/runws-bench-fleet.XXXXXX)
trap 'rm -rf "$SHM"; ci/postgres.sh stop >/dev/null 2>&1 || true' EXIT
PG=$RUNWS_TEST_PG_URL
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== run -- /bin/true: file store, PostgreSQL over TLS (prefer), PostgreSQL plaintext ($rounds rounds, interleaved, ROOT on tmpfs, server on loopback)"
python3 bench/interleave.py "$rounds" \
  "$BIN run --root $SHM/file --ports 1 -- /bin/true" \
  "$BIN --store $PG run --root $SHM/tls --ports 1 -- /bin/true" \
  "$BIN --store $PG?sslmode=disable run --root $SHM/plain --ports 1 -- /bin/true"

echo "== ls --fleet with 100,000 runs recorded"
psql "$PG" -q -v ON_ERROR_STOP=1 <<'SQL'
INSERT INTO runws_runs_v1 (host, run_id, job, status, started_at, record)
SELECT 'bench-' || (i % 20), 'bench-run-' || i, 'bench-job-' || (i % 100), 'succeeded',
       now() - i * interval '1 second',
       jsonb_build_object('run_id', 'bench-run-' || i, 'host', 'bench-' || (i % 20), 'root', '/r',
                          'job', 'bench-job-' || (i % 100), 'status', 'succeeded',
                          'started_at', to_char(now() - i * interval '1 second', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                          'input_fingerprint', 'sha256:00', 'outputs', '[]'::jsonb, 'exit_code', 0)
FROM generate_series(1, 100000) AS i
ON CONFLICT DO NOTHING;
ANALYZE runws_runs_v1;
SQL
hyperfine -N --warmup 3 --runs 30 \
  "$BIN --store $PG ls --fleet --limit 20" \
  "$BIN --store $PG ls --fleet --job bench-job-7 --limit 20" \
  "$BIN --store $PG ls --fleet --json" 2>&1 | grep -E "Benchmark|Time|Range"
