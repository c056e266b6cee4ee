#!/usr/bin/env bash
# `--net allow`'s proxy against a direct connection and against tinyproxy
# (Debian's package, configured as an allowlist of the same one name):
#
#   latency: N (default 1000) sequential new connections, one small request
#            each, as a plain `GET http://…` through the proxy and as a
#            CONNECT tunnel; direct, through runws's proxy (the client inside
#            `runws run --sandbox --net allow=localhost:PORT`), and through
#            tinyproxy (the client on the host's loopback). Reported: the
#            added time per connection against direct, and runws against
#            tinyproxy.
#   bulk:    1 GiB (BULK_MB) over a CONNECT tunnel through runws's proxy,
#            through tinyproxy and through bench/egress_relay.py (the floor:
#            a bare CONNECT relay that only splices, no policy or record),
#            against the same download directly; throughput ratios (each
#            repeat pairs the four).
#
#   bench/egress.sh            (REPEATS, default 5; N, 0 skips latency; BULK_MB)
#
# Each repeat runs every variant once, in a rotating order, so a noisy
# neighbour hits them alike; the clients time only their own loop (no
# interpreter or runws start-up). The origin is bench/egress_server.py,
# which sends the bulk file with sendfile. Needs: python3, tinyproxy.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${REPEATS:-5}
N=${N:-1000}
BULK_MB=${BULK_MB:-1024}
command -v tinyproxy >/dev/null || { echo "needs tinyproxy (apt-get install tinyproxy)" >&2; exit 1; }
. bench/lib.sh
BIN=$(built --bin runws)
WORK=$(mktemp -d /tmp/runws-egress-bench.XXXXXX)
chmod 755 "$WORK"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

BIG=/dev/shm/runws-egress-bench-big
head -c "$((BULK_MB * 1024 * 1024))" /dev/zero >"$BIG"
python3 bench/egress_server.py "$BIG" >"$WORK/port" &
pids+=($!)
until [ -s "$WORK/port" ]; do sleep 0.05; done
PORT=$(cat "$WORK/port")

TP_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo '^localhost$' >"$WORK/filter"
mkdir -m 777 "$WORK/tp"
cat >"$WORK/tinyproxy.conf" <<CONF
User nobody
Group nogroup
Port $TP_PORT
Listen 127.0.0.1
Timeout 600
MaxClients 1024
Allow 127.0.0.1
LogFile "$WORK/tp/tinyproxy.log"
LogLevel Info
Filter "$WORK/filter"
FilterDefaultDeny Yes
FilterType ere
CONF
tinyproxy -d -c "$WORK/tinyproxy.conf" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $TP_PORT))" 2>/dev/null && break
  sleep 0.05
done

python3 bench/egress_relay.py >"$WORK/relay-port" &
pids+=($!)
until [ -s "$WORK/relay-port" ]; do sleep 0.05; done
RELAY_PORT=$(cat "$WORK/relay-port")

CLIENT=$PWD/bench/egress_client.py
export RUNWS_ROOT=$WORK/root
inside() { # MODE ARGS…: the client inside a sandbox whose only way out is runws's proxy
  "$BIN" run --sandbox --net "allow=localhost:$PORT" --resolve localhost=127.0.0.1 -- \
    sh -c "exec python3 $CLIENT $1 \"\$HTTP_PROXY\" localhost $PORT ${2:-}"
}

echo "machine: $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
echo "latency: $N new connections; bulk: $BULK_MB MiB; $REPEATS repeats"
: >"$WORK/results"
for r in $(seq "$REPEATS"); do
  variants=(direct runws-get tiny-get runws-connect tiny-connect)
  shift_by=$((r % ${#variants[@]}))
  order=("${variants[@]:$shift_by}" "${variants[@]:0:$shift_by}")
  [ "$N" -gt 0 ] || order=()
  for v in "${order[@]}"; do
    case $v in
      direct) t=$(python3 "$CLIENT" latency none localhost "$PORT" "$N" get) ;;
      runws-get) t=$(inside latency "$N get") ;;
      runws-connect) t=$(inside latency "$N connect") ;;
      tiny-get) t=$(python3 "$CLIENT" latency "http://127.0.0.1:$TP_PORT" localhost "$PORT" "$N" get) ;;
      tiny-connect) t=$(python3 "$CLIENT" latency "http://127.0.0.1:$TP_PORT" localhost "$PORT" "$N" connect) ;;
    esac
    echo "latency $v $t" >>"$WORK/results"
  done
  bulks=(direct runws tiny floor)
  shift_by=$((r % ${#bulks[@]}))
  for v in "${bulks[@]:$shift_by}" "${bulks[@]:0:$shift_by}"; do
    case $v in
      direct) t=$(python3 "$CLIENT" bulk none 127.0.0.1 "$PORT") ;;
      runws) t=$(inside bulk) ;;
      tiny) t=$(python3 "$CLIENT" bulk "http://127.0.0.1:$TP_PORT" localhost "$PORT") ;;
      floor) t=$(python3 "$CLIENT" bulk "http://127.0.0.1:$RELAY_PORT" localhost "$PORT") ;;
    esac
    echo "bulk $v $t" >>"$WORK/results"
  done
done
rm -f "$BIG"

python3 - "$WORK/results" "$N" "$BULK_MB" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    kind, v, t = line.split()
    rows[(kind, v)].append(float(t))
n, mb = int(sys.argv[2]), int(sys.argv[3])
med = {k: statistics.median(v) for k, v in rows.items()}
span = lambda k: f"[{min(rows[k]):.3f}, {max(rows[k]):.3f}]"
def latency_part():
    print("latency (seconds for all connections: median [min, max]; added µs per connection against direct)")
    d = med[("latency", "direct")]
    for v in ["direct", "runws-get", "tiny-get", "runws-connect", "tiny-connect"]:
        k = ("latency", v)
        print(f"  {v:14s} {med[k]:8.3f} {span(k)}  +{(med[k]-d)/n*1e6:7.1f} µs")
    for mode in ["get", "connect"]:
        r, t = med[("latency", "runws-" + mode)], med[("latency", "tiny-" + mode)]
        per_repeat = [a / b for a, b in zip(rows[("latency", "runws-" + mode)], rows[("latency", "tiny-" + mode)])]
        print(f"  runws/tinyproxy ({mode}): {r/t:.2f} [{min(per_repeat):.2f}, {max(per_repeat):.2f}]; added time: {(r-d)/(t-d):.2f}")
if ("latency", "direct") in rows:
    latency_part()
print("bulk (seconds: median [min, max]; MiB/s)")
for v in ["direct", "runws", "tiny", "floor"]:
    k = ("bulk", v)
    print(f"  {v:14s} {med[k]:8.3f} {span(k)}  {mb/med[k]:8.0f} MiB/s")
def through(v, name):
    rs = [a / b for a, b in zip(rows[("bulk", "direct")], rows[("bulk", v)])]
    print(f"  throughput through {name} / direct: {med[('bulk','direct')]/med[('bulk',v)]:.2f} [{min(rs):.2f}, {max(rs):.2f}]")
through("runws", "runws")
through("tiny", "tinyproxy")
through("floor", "the bare relay")
rs = [a / b for a, b in zip(rows[("bulk", "floor")], rows[("bulk", "runws")])]
print(f"  throughput through runws / the bare relay: {med[('bulk','floor')]/med[('bulk','runws')]:.2f} [{min(rs):.2f}, {max(rs):.2f}]")
PY
