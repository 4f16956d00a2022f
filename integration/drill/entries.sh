#!/usr/bin/env bash
# Schedule entries on a 3-node R3 cluster of real nats-server processes, with three
# replicas of examples/service: loads ENTRIES entries of the tenants job (each every
# EVERY, spread over it), runs SOAK, restarts one replica, and reports every due
# slot's fate (ran once, twice, or not at all), the claim lag, the load and restart
# times and the memory of servers and replicas.
#
#   integration/drill/entries.sh                      # 100,000 entries, 15 minutes
#   ENTRIES=10000 SOAK=120 integration/drill/entries.sh
#
# Needs go and python3; installs nats-server v2.15.3 into the work directory when
# NATS_SERVER is not set. Ports 14222-14224 (clients), 16222-16224 (routes),
# 18222-18224 (monitoring). Everything is left in WORK (default: a new temp dir).
set -euo pipefail

ENTRIES=${ENTRIES:-100000}
EVERY=${EVERY:-10m}
SOAK=${SOAK:-900}
WORK=${WORK:-$(mktemp -d /tmp/anarchon-drill.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$WORK"
echo "drill: $ENTRIES entries every $EVERY, soak ${SOAK}s, in $WORK"

if [ -z "${NATS_SERVER:-}" ]; then
	GOBIN="$WORK/bin" go install github.com/nats-io/nats-server/v2@v2.15.3
	NATS_SERVER="$WORK/bin/nats-server"
fi
go build -C "$ROOT/examples/service" -o "$WORK/service" .

routes="nats://127.0.0.1:16222,nats://127.0.0.1:16223,nats://127.0.0.1:16224"
for i in 0 1 2; do
	cat > "$WORK/n$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:1422$i
http: 127.0.0.1:1822$i
jetstream { store_dir: "$WORK/store$i" }
cluster { name: drill, listen: 127.0.0.1:1622$i, routes: [$routes] }
CONF
done

cleanup() {
	pkill -INT -f "^$WORK/service" 2>/dev/null || true
	sleep 2
	pkill -f "$NATS_SERVER -c $WORK" 2>/dev/null || true
}
trap cleanup EXIT

for i in 0 1 2; do "$NATS_SERVER" -c "$WORK/n$i.conf" > "n$i.log" 2>&1 & done
for _ in $(seq 1 120); do
	curl -s 127.0.0.1:18220/jsz | grep -q '"leader"' && break
	sleep 0.5
done

now() { python3 -c 'import time; print(f"{time.time():.3f}")'; }
rss() { ps -o rss= -p "$1" | tr -d ' '; }
servers() { pgrep -d, -f "$NATS_SERVER -c $WORK"; }
replica() { # replica NAME CLIENT-INDEX [flags...]
	local name=$1 i=$2
	shift 2
	"$WORK/service" -instance "$name" -url "nats://127.0.0.1:1422$i" -replicas 3 -log-format json \
		-metrics-addr "" -history 0 -interval 10s "$@" >> "$name.out" 2>> "$name.log" &
	echo $! > "$name.pid"
}
waitlog() { # waitlog FILE MESSAGE: waits until the JSON log FILE has a line with "msg":MESSAGE
	until grep -q "\"msg\":\"$2\"" "$1" 2>/dev/null; do
		if grep -q '"level":"ERROR"' "$1" 2>/dev/null && ! kill -0 "$(cat "${1%.log}.pid")" 2>/dev/null; then
			echo "drill: $1 failed:"; tail -5 "$1"; exit 1
		fi
		sleep 0.2
	done
}

echo "servers before: $(ps -o rss= -p "$(servers)" | paste -sd' ') KiB" | tee timeline
t0=$(now)
replica a 0 -seed-entries "$ENTRIES" -entry-every "$EVERY"
waitlog a.log "entries seeded"
t1=$(now)
replica b 1
replica c 2
waitlog b.log "schedule entries loaded"
waitlog c.log "schedule entries loaded"
t2=$(now)
echo "load: $ENTRIES entries stored in $(python3 -c "print(round($t1-$t0,1))") s; replicas b, c followed them $(python3 -c "print(round($t2-$t1,1))") s later" | tee -a timeline
from=$(python3 -c "import math; print(math.ceil($t2) + 5)")
sleep $(( SOAK / 2 ))
kill -INT "$(cat c.pid)"
while kill -0 "$(cat c.pid)" 2>/dev/null; do sleep 0.2; done
t3=$(now)
replica c 2
waitlog c.log "scheduler started"
sleep 0.1
until [ "$(grep -c '"msg":"schedule entries loaded"' c.log)" -ge 2 ]; do sleep 0.2; done
t4=$(now)
echo "restart: replica c stopped, started again and followed every entry in $(python3 -c "print(round($t4-$t3,1))") s" | tee -a timeline
sleep $(( SOAK - SOAK / 2 ))
to=$(python3 -c "import time; print(int(time.time()) - 10)")
echo "rss at the end (KiB): servers $(ps -o rss= -p "$(servers)" | paste -sd' '); replicas $(for r in a b c; do rss "$(cat $r.pid)"; done | paste -sd' ')" | tee -a timeline
echo "streams on the cluster: $(curl -s 127.0.0.1:18220/jsz | python3 -c 'import sys, json; print(json.load(sys.stdin)["streams"])') (the declared jobs' and the two buckets)" | tee -a timeline
echo "dropped API requests: $(cat n*.log | grep -c 'dropping' || true)" | tee -a timeline
python3 "$ROOT/integration/drill/analyze.py" --entries "$ENTRIES" --every "$EVERY" --from "$from" --to "$to" --restart "$t3" "$t4" a.log b.log c.log | tee -a timeline
