#!/usr/bin/env bash
# Faults on a 3-node R3 cluster of real nats-server processes, with three replicas of
# examples/service, driven through the anarchon CLI (NATS_URL) as an operator would.
# In turn, each step's wall time in WORK/timeline:
#   1. SIGKILL the holder of a running refresh (cancel-other) slot, restart it RESTART s later;
#   2. the same for a digest (buffer-one) holder and a retried holder of attempt >= 2;
#   3. SIGTERM one nats-server (the lease bucket's leader) and start it again on its store;
#   4. SIGKILL the holder of a slot of the tenants entry ENTRY, then at once
#      `anarchon schedule rm` and `add` it again with the same ID;
#   5. read `anarchon history` of every job and the entry after each fault, and print
#      every slot of each fault's window with its records and handler starts, and the
#      findings: two terminal records for one attempt, a due slot with no record, an
#      attempt still running once settled, a handler started twice for one slot;
# then kill every nats-server, SIGTERM the replicas and measure how long they take to
# exit (a goroutine dump by SIGQUIT of one still running after DUMP s).
#
#   integration/drill/faults.sh                       # about 7 minutes
#   INTERVAL=2s SETTLE=45 NATS_SERVER=/tmp/bin/nats-server integration/drill/faults.sh
#
# Needs go and python3; installs nats-server v2.15.3 into the work directory when
# NATS_SERVER is not set. Ports PORT+0..2 (clients, default 14240), PORT+2000..
# (routes), PORT+4000.. (monitoring). Everything is left in WORK (default: a new temp
# dir): timeline, the logs, hist/ (the snapshots) and report.
set -euo pipefail

INTERVAL=${INTERVAL:-2s}
SETTLE=${SETTLE:-45}   # after a kill, seconds before the next step (the lease is 30 s)
RESTART=${RESTART:-8}  # seconds between a replica's SIGKILL and its restart
DUMP=${DUMP:-25}
ENTRY=${ENTRY:-drill}
PORT=${PORT:-14240}
WORK=${WORK:-$(mktemp -d /tmp/anarchon-faults.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY="$ROOT/integration/drill/faults.py"
cd "$WORK"
mkdir -p hist
echo "faults drill: interval $INTERVAL, in $WORK"

if [ -z "${NATS_SERVER:-}" ]; then
	GOBIN="$WORK/bin" go install github.com/nats-io/nats-server/v2@v2.15.3
	NATS_SERVER="$WORK/bin/nats-server"
fi
go build -C "$ROOT/examples/service" -o "$WORK/service" .
go build -C "$ROOT/cmd/anarchon" -o "$WORK/anarchon" .

routes="nats://127.0.0.1:$((PORT + 2000)),nats://127.0.0.1:$((PORT + 2001)),nats://127.0.0.1:$((PORT + 2002))"
export NATS_URL="nats://127.0.0.1:$PORT,nats://127.0.0.1:$((PORT + 1)),nats://127.0.0.1:$((PORT + 2))"
for i in 0 1 2; do
	cat > "$WORK/n$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:$((PORT + i))
http: 127.0.0.1:$((PORT + 4000 + i))
jetstream { store_dir: "$WORK/store$i" }
cluster { name: faults, listen: 127.0.0.1:$((PORT + 2000 + i)), routes: [$routes] }
CONF
done

now() { date +%s.%N | cut -c1-14; }
mark() { echo "$(now) $*" | tee -a timeline; } # mark STEP key=value...
alive() { kill -0 "$1" 2>/dev/null; }
server() { # server I: starts nats-server nI on its store
	"$NATS_SERVER" -c "$WORK/n$1.conf" >> "n$1.log" 2>&1 &
	echo $! > "n$1.pid"
}
replica() { # replica NAME CLIENT-INDEX: starts (again) a replica, logging JSON to NAME.log
	now > "$1.since"
	GOTRACEBACK=all "$WORK/service" -instance "$1" -url "nats://127.0.0.1:$((PORT + $2))" -replicas 3 \
		-log-format json -metrics-addr "" -history 0 -interval "$INTERVAL" -retried-run "$INTERVAL" \
		-tenant-run 4s >> "$1.out" 2>> "$1.log" &
	echo $! > "$1.pid"
}
cleanup() {
	for p in a b c n0 n1 n2; do
		[ -f "$p.pid" ] && kill -KILL "$(cat "$p.pid")" 2>/dev/null || true
	done
}
trap cleanup EXIT
healthy() { curl -sf "127.0.0.1:$((PORT + 4000 + $1))/healthz" > /dev/null; }
started() { # started NAME: the number of "scheduler started" lines in NAME.log
	grep -c '"msg":"scheduler started"' "$1.log" 2>/dev/null || true
}
waitstart() { # waitstart NAME N: waits until NAME.log says "scheduler started" N times
	for _ in $(seq 1 300); do
		[ "$(started "$1")" -ge "$2" ] && return 0
		alive "$(cat "$1.pid")" || { echo "faults: replica $1 exited:"; tail -5 "$1.log"; exit 1; }
		sleep 0.2
	done
	echo "faults: replica $1 did not start"; exit 1
}
cli() { "$WORK/anarchon" "$@"; }
snap=0
snapshot() { # snapshot: reads every job's and the entry's history and active runs
	snap=$((snap + 1))
	local n
	n=$(printf %03d $snap)
	for job in tick report flaky retried compact refresh digest warmup tenants; do
		cli history "$job" --json -n 1000 > "hist/$n-$job.json" 2>> cli.err || true
		cli active "$job" --json > "hist/active-$n-$job" 2>> cli.err || true
	done
	cli history tenants --entry "$ENTRY" --json -n 1000 > "hist/$n-tenants@$ENTRY.json" 2>> cli.err || true
	mark snapshot n="$n"
}
catch() { # catch JOB [holder flags]: waits (up to 3 minutes) for a run to kill; prints INSTANCE SLOT ATTEMPT STARTED
	local job=$1
	shift
	for _ in $(seq 1 400); do
		local r
		if [ "$job" = tenants ]; then
			r=$(python3 "$PY" holder "$WORK" tenants "$@")
		else
			cli active "$job" --json > active.json 2>> cli.err || true
			r=$(python3 "$PY" holder "$WORK" "$job" --active active.json "$@")
		fi
		[ -n "$r" ] && { echo "$r"; return 0; }
		sleep 0.3
	done
	return 1
}
killholder() { # killholder JOB WHY [holder flags]: SIGKILLs the holder, restarts it RESTART s later
	local job=$1 why=$2
	shift 2
	local r inst slot att t0 pid idx
	if ! r=$(catch "$job" "$@"); then
		mark miss job="$job" why=no-run-caught
		return 0
	fi
	read -r inst slot att t0 <<< "$r"
	pid=$(cat "$inst.pid")
	kill -KILL "$pid"
	mark kill job="$job" instance="$inst" pid="$pid" slot="$slot" attempt="$att" started="$t0" why="$why"
	idx=$(( $(printf %d "'$inst") - 97 ))
	local n
	n=$(started "$inst")
	sleep "$RESTART"
	replica "$inst" "$idx"
	waitstart "$inst" $((n + 1))
	mark restart instance="$inst" pid="$(cat "$inst.pid")"
}

# The cluster, and three replicas, each on its own server.
for i in 0 1 2; do server "$i"; done
for _ in $(seq 1 120); do
	curl -s "127.0.0.1:$((PORT + 4000))/jsz" | grep -q '"leader"' && break
	sleep 0.5
done
mark start interval="$INTERVAL" servers="$(cat n0.pid),$(cat n1.pid),$(cat n2.pid)"
replica a 0
waitstart a 1
replica b 1
replica c 2
waitstart b 1
waitstart c 1
cli schedule add tenants "$ENTRY" --every 5s --payload v1 > /dev/null
mark entry id="$ENTRY" every=5s
mark up replicas="$(cat a.pid),$(cat b.pid),$(cat c.pid)"
sleep 20
snapshot

# 1, 2: the holders of a cancel-other, a buffer-one and a retried attempt >= 2.
killholder refresh cancel-other --min-age 1 --max-age 5
sleep "$SETTLE"
snapshot
killholder digest buffer-one --min-age 1 --max-age 4
sleep "$SETTLE"
snapshot
killholder retried retry-holder --min-attempt 2 --min-age 0.3 --max-age 1.6
sleep "$SETTLE"
snapshot

# 3: one nats-server restarts: the leader of the lease bucket's stream.
leader=$(curl -s "127.0.0.1:$((PORT + 4000))/jsz?accounts=true&streams=true" | python3 -c '
import json, sys
j = json.load(sys.stdin)
for a in j.get("account_details", []):
    for s in a.get("stream_detail", []):
        if s["name"] == "KV_anarchon_leases":
            print(s.get("cluster", {}).get("leader", ""))')
i=${leader#n}
case "$i" in 0|1|2) ;; *) i=1 ;; esac
pid=$(cat "n$i.pid")
kill -TERM "$pid"
t=$(now)
while alive "$pid"; do sleep 0.1; done
mark server-stop server="n$i" pid="$pid" why="leader-of-KV_anarchon_leases:${leader:-unknown}" exited="$(now)" sent="$t"
sleep 5
server "$i"
until healthy "$i"; do sleep 0.2; done
mark server-up server="n$i" pid="$(cat "n$i.pid")"
sleep 30
snapshot

# 4: the holder of the entry's slot dies; the entry is removed and added again at once.
if r=$(catch tenants --entry "$ENTRY" --min-age 1 --max-age 3); then
	read -r inst slot att t0 <<< "$r"
	pid=$(cat "$inst.pid")
	kill -KILL "$pid"
	mark kill job=tenants entry="$ENTRY" instance="$inst" pid="$pid" slot="$slot" attempt="$att" started="$t0" why="entry-holder"
	t=$(now)
	cli schedule rm tenants "$ENTRY" > /dev/null
	cli schedule add tenants "$ENTRY" --every 5s --payload v2 > /dev/null
	mark readd id="$ENTRY" rm="$t" add="$(now)"
	n=$(started "$inst")
	sleep "$RESTART"
	replica "$inst" $(( $(printf %d "'$inst") - 97 ))
	waitstart "$inst" $((n + 1))
	mark restart instance="$inst" pid="$(cat "$inst.pid")"
else
	mark miss job=tenants why=no-run-caught
	t=$(now)
	cli schedule rm tenants "$ENTRY" > /dev/null
	cli schedule add tenants "$ENTRY" --every 5s --payload v2 > /dev/null
	mark readd id="$ENTRY" rm="$t" add="$(now)"
fi
sleep "$SETTLE"
sleep 30 # the last window settles: leases end, takeovers and buffered slots run
snapshot
mark final

# Replicas given SIGTERM once every nats-server died: how long Stop takes.
for i in 0 1 2; do kill -KILL "$(cat "n$i.pid")"; done
sleep 2
ms() { echo $(( $(date +%s%N) / 1000000 )); }
m0=$(ms)
for r in a b c; do kill -TERM "$(cat "$r.pid")"; done
mark stop
declare -A done_at=()
left() { # left: the replicas still running, by name
	for r in a b c; do [ -z "${done_at[$r]:-}" ] && echo "$r"; done; true
}
while [ -n "$(left)" ]; do
	for r in $(left); do
		if ! alive "$(cat "$r.pid")"; then
			done_at[$r]=1
			mark stopped instance="$r" after="$(( $(ms) - m0 ))e-3"
		fi
	done
	el=$(( $(ms) - m0 ))
	# After DUMP s the first replica still running gives a goroutine dump (into its
	# log); after 120 s every one still running does.
	for r in $(left); do
		if [ "$el" -ge 120000 ] || { [ "$el" -ge $((DUMP * 1000)) ] && [ -z "${dumped:-}" ]; }; then
			kill -QUIT "$(cat "$r.pid")"
			done_at[$r]=1
			dumped=$r
			mark stopped instance="$r" after=- waited="${el}e-3" then="SIGQUIT:goroutine-dump-in-$r.log"
			[ "$el" -lt 120000 ] && break
		fi
	done
	sleep 0.1
done
python3 "$PY" analyze "$WORK" | tee report
