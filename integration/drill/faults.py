#!/usr/bin/env python3
"""The analysis of the faults drill (faults.sh).

  faults.py holder WORK JOB [--entry ID] [--active FILE] [--min-attempt N] [--min-age S] [--max-age S]
      prints "INSTANCE SLOT ATTEMPT STARTED" of a run of JOB going on now, started between
      min-age and max-age seconds ago on a replica that is up: the holder is the one
      `anarchon active JOB --json` (FILE) names, its start time is its replica's log line;
      an entry's runs (not in `active`) are read from the logs alone.
  faults.py analyze WORK
      reads WORK/timeline, the history snapshots (WORK/hist) and the replicas' JSON logs,
      prints each fault's window slot by slot and the findings.
"""
import argparse, collections, datetime, glob, json, os, re, sys, time

REPLICAS = ("a", "b", "c")
# The jobs of examples/service and their periods in intervals (report: -cron */10 s).
PERIODS = {"tick": 1, "flaky": 1, "compact": 1, "warmup": 1, "retried": 6, "refresh": 4, "digest": 2}
LEASE = 30.0  # scheduler.DefaultLease: the jobs of examples/service keep it


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def seconds(d):
    m = re.fullmatch(r"([\d.]+)(ms|s|m|h)", d)
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def hms(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def hm(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S")


def key_slot(t):
    return round(t * 1000)


def read_logs(work):
    """Every JSON line of every replica's log, with its file's replica name."""
    out = []
    for r in REPLICAS:
        path = os.path.join(work, r + ".log")
        if not os.path.exists(path):
            continue
        for line in open(path, errors="replace"):
            if not line.startswith("{"):
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            e["_replica"] = r
            e["_t"] = ts(e["time"])
            out.append(e)
    out.sort(key=lambda e: e["_t"])
    return out


def runs_of(logs):
    """starts[(job, entry, slot)] = [(t, instance, attempt)], ends[(job, entry, slot, instance, attempt)] = (t, status, err)."""
    starts, ends = collections.defaultdict(list), {}
    for e in logs:
        if "slot" not in e or "job" not in e:
            continue
        k = (e["job"], e.get("entry", ""), key_slot(ts(e["slot"])))
        if e["msg"] == "run started":
            starts[k].append((e["_t"], e.get("instance", e["_replica"]), e.get("attempt")))
        elif e["msg"] == "run finished":
            ends[k + (e.get("instance", e["_replica"]), e.get("attempt"))] = (e["_t"], e.get("status"), e.get("err", ""))
    return starts, ends


def holder(a):
    now = time.time()
    since = {}
    for r in REPLICAS:
        p = os.path.join(a.work, r + ".since")
        if os.path.exists(p):
            since[r] = float(open(p).read())
    starts, ends = runs_of(read_logs(a.work))
    cands = []
    if a.active:
        try:
            act = json.load(open(a.active))
        except (OSError, ValueError):
            return
        for r in act.get("runs") or []:
            if not r.get("live") or r.get("buffered") or r.get("cancel_by") or r.get("retry_at"):
                continue
            if r["attempt"] < a.min_attempt:
                continue
            cands.append((r["instance"], key_slot(ts(r["slot"])), r["attempt"]))
    else:
        for (job, entry, slot), ss in starts.items():
            if job != a.job or entry != (a.entry or ""):
                continue
            for (_t, inst, att) in ss:
                if att >= a.min_attempt and (job, entry, slot, inst, att) not in ends:
                    cands.append((inst, slot, att))
    for inst, slot, att in cands:
        for (t, i2, a2) in starts.get((a.job, a.entry or "", slot), []):
            if i2 != inst or a2 != att or (a.job, a.entry or "", slot, inst, att) in ends:
                continue
            if t < since.get(inst, 0) or not (a.min_age <= now - t <= a.max_age):
                continue
            print(inst, datetime.datetime.fromtimestamp(slot / 1000, datetime.timezone.utc).isoformat(), att, f"{t:.3f}")
            return


def read_timeline(work):
    out = []
    for line in open(os.path.join(work, "timeline")):
        parts = line.split()
        if not parts or not re.fullmatch(r"\d+\.\d+", parts[0]):
            continue
        kv = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
        out.append((float(parts[0]), parts[1], kv))
    return out


def read_history(work, timeline):
    """The records of every snapshot, merged: terminal records once each, running ones
    from the newest snapshot that still holds their slot. name -> slot -> [record]."""
    snaps = sorted(glob.glob(os.path.join(work, "hist", "*.json")))
    terminal = collections.defaultdict(dict)
    running = collections.defaultdict(dict)
    oldest = {}
    for path in snaps:
        name = os.path.basename(path)[4:-5]  # NNN-<name>.json
        try:
            h = json.load(open(path))
        except ValueError:
            continue
        runs = h.get("runs") or []
        if runs:
            oldest[name] = min(key_slot(ts(r["slot"])) for r in runs)
        for r in runs:
            s = key_slot(ts(r["slot"]))
            k = (s, r.get("attempt"), r.get("token"), r.get("status"), r.get("instance"), r.get("error", ""), r.get("finished_at", ""))
            if r.get("status") == "running":
                running[name][(s, r.get("attempt"), r.get("token"))] = r
            else:
                terminal[name][k] = r
        # Running records of slots this snapshot holds are replaced by what it says.
        for k in list(running[name]):
            if runs and k[0] >= oldest[name] and not any(
                    key_slot(ts(r["slot"])) == k[0] and r.get("token") == k[2] and r.get("status") == "running" for r in runs):
                del running[name][k]
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    for name in set(terminal) | set(running):
        done = {(k[0], k[1], k[2]) for k in terminal[name]}
        for k, r in terminal[name].items():
            out[name][k[0]].append(r)
        for k, r in running[name].items():
            if k not in done:
                out[name][k[0]].append(r)
        for s in out[name]:
            out[name][s].sort(key=lambda r: (r.get("attempt") or 0, r.get("finished_at", "")))
    return out


def cell(r):
    err = (r.get("error") or "").replace("\n", " ")
    if len(err) > 70:
        err = err[:67] + "..."
    s = f"a{r.get('attempt')} {r.get('instance') or '-'} {r.get('status')}"
    return s + (f" ({err})" if err else "")


def analyze(a):
    work = a.work
    tl = read_timeline(work)
    steps = collections.defaultdict(list)
    for t, step, kv in tl:
        steps[step].append((t, kv))
    interval = seconds(steps["start"][0][1]["interval"])
    logs = read_logs(work)
    starts, ends = runs_of(logs)
    hist = read_history(work, tl)
    up = steps["up"][0][0]
    end = steps["final"][0][0]
    kills = collections.defaultdict(list)  # instance -> kill times
    for t, kv in steps["kill"]:
        kills[kv["instance"]].append(t)
    findings = []

    # The slots each schedule makes, and the entry's incarnations.
    periods = {j: p * interval for j, p in PERIODS.items()}
    periods["report"] = 10.0
    entry_name = "tenants@" + steps["entry"][0][1]["id"]
    entry_every = seconds(steps["entry"][0][1]["every"])
    incarnations = [(steps["entry"][0][0], None)]
    for t, kv in steps["readd"]:
        incarnations[-1] = (incarnations[-1][0], float(kv["rm"]))
        incarnations.append((float(kv["add"]), None))

    def grid(name, lo, hi):
        if name == entry_name:
            out = []
            for (a0, a1) in incarnations:
                for s in grid_every(entry_every, max(lo, a0 + entry_every), min(hi, a1 if a1 else hi)):
                    out.append(s)
            return out
        if name not in periods:
            return []
        return grid_every(periods[name], lo, hi)

    def grid_every(p, lo, hi):
        s = (int(lo // p) + 1) * p
        out = []
        while s < hi:
            out.append(key_slot(s))
            s += p
        return out

    def starts_of(name, s):
        job, _, entry = name.partition("@")
        return sorted(starts.get((job, entry, s), []))

    def slot_rows(name, lo, hi):
        slots = set(grid(name, lo, hi)) | {s for s in hist.get(name, {}) if lo * 1000 <= s < hi * 1000}
        rows = []
        for s in sorted(slots):
            recs = hist.get(name, {}).get(s, [])
            st = " ".join(f"a{att}@{inst}+{t - s / 1000:.1f}s" for (t, inst, att) in starts_of(name, s))
            rows.append((s, " / ".join(cell(r) for r in recs) or "NO RECORD", st or "-"))
        return rows

    def table(name, lo, hi, mark=None):
        print(f"  {name}: slots {hm(lo)}..{hm(hi)} (history: attempt instance status (error); handler starts from the logs: attempt@instance+seconds after the slot)")
        for s, recs, st in slot_rows(name, lo, hi):
            m = " <- killed" if mark and s == mark else ""
            print(f"    {hms(s / 1000)[:-4]}  {recs}   | started: {st}{m}")

    limits = [s for s, rs in hist.get("warmup", {}).items() if any(r["status"] == "limit" for r in rs)]
    warmup_end = min(limits) if limits else float("inf")

    print("== timeline (UTC)")
    for t, step, kv in tl:
        print(f"  {hms(t)}  {step:9s} " + " ".join(f"{k}={v}" for k, v in kv.items()))

    # Each kill: the takeover, and what history holds for the slot and its window.
    print("\n== faults")
    for t, kv in steps["kill"]:
        job, inst, att = kv["job"], kv["instance"], int(kv["attempt"])
        entry = kv.get("entry", "")
        name = job + ("@" + entry if entry else "")
        s = key_slot(ts(kv["slot"]))
        print(f"\n-- {hms(t)}: SIGKILL of {inst} (pid {kv.get('pid')}), holder of {name} slot {hms(s / 1000)} attempt {att} ({kv.get('why', '')})")
        later = [(t2, i2, a2) for (t2, i2, a2) in starts_of(name, s) if t2 > t]
        if later:
            for (t2, i2, a2) in later:
                print(f"   handler started again: attempt {a2} on {i2}, {t2 - t:.1f} s after the kill")
        else:
            print("   no handler started for this slot after the kill")
        recs = hist.get(name, {}).get(s, [])
        print("   history of the slot: " + (" / ".join(cell(r) for r in recs) or "NO RECORD"))
        for r in recs:
            if r.get("attempt") == att and r.get("finished_at"):
                print(f"   the killed attempt was recorded {r['status']} {ts(r['finished_at']) - t:.1f} s after the kill, "
                      f"{ts(r['finished_at']) - float(kv['started']):.1f} s after it started (lease {LEASE:.0f} s)")
        nxt = [t2 for t2, k2 in steps["snapshot"] if t2 > t]
        table(name, t - 2 * periods.get(job, entry_every), nxt[0] if nxt else end, mark=s)
        if job == "tenants":
            rm = incarnations[0][1]
            again = [(t2, i2, a2) for (t2, i2, a2) in starts_of(name, s) if t2 > rm]
            if again:
                findings.append(f"entry {entry}: slot {hms(s / 1000)} of the removed incarnation ran again after the re-add: "
                                + ", ".join(f"attempt {a2} on {i2} at {hms(t2)}" for (t2, i2, a2) in again))

    for t, kv in steps["server-stop"]:
        t = float(kv.get("sent", t))
        back = [t2 for t2, k2 in steps["server-up"] if t2 > t][0]
        print(f"\n-- {hms(t)}: SIGTERM to nats-server {kv['server']} ({kv.get('why', '')}); exited {float(kv.get('exited', t)) - t:.1f} s later, "
              f"started again on its store, healthy at {hms(back)}")
        lo, hi = t - 10, back + 30
        for e in logs:
            if lo <= e["_t"] <= hi and (e.get("level") in ("WARN", "ERROR") or "connect" in e["msg"]) and e["msg"] != "run failed":
                print(f"   {hms(e['_t'])} {e['_replica']} {e['level']} {e['msg']}" + (f": {e.get('err')}" if e.get("err") else ""))
        for name in sorted(set(periods) | {entry_name}):
            if name == "warmup" and warmup_end < lo * 1000:
                print(f"  warmup: ended by its run limit (slot {hms(warmup_end / 1000)} recorded limit): no slot due")
                continue
            table(name, lo, hi)

    # Checks over every slot of the drill.
    lo, hi = up + 2 * interval, end - LEASE - 15
    for name in sorted(set(periods) | {entry_name}):
        for s in grid(name, lo, hi):
            if name == "warmup" and s > warmup_end:
                continue
            if not hist.get(name, {}).get(s):
                findings.append(f"{name}: slot {hms(s / 1000)} due while the replicas were up has no record in history")
    for name, slots in hist.items():
        for s, recs in slots.items():
            by_att = collections.defaultdict(list)
            for r in recs:
                if r["status"] != "running":
                    by_att[r.get("attempt")].append(r)
                elif s / 1000 < end - 2 * LEASE:
                    findings.append(f"{name}: slot {hms(s / 1000)} attempt {r.get('attempt')} on {r.get('instance')} is still `running` "
                                    f"{end - s / 1000:.0f} s after its slot")
            for att, rs in by_att.items():
                if len(rs) > 1:
                    findings.append(f"{name}: slot {hms(s / 1000)} has {len(rs)} terminal records for attempt {att}: " + " / ".join(cell(r) for r in rs))
    for (job, entry, s), ss in starts.items():
        name = job + ("@" + entry if entry else "")
        seen = {}
        for (t, inst, att) in sorted(ss):
            if att in seen:
                findings.append(f"{name}: slot {hms(s / 1000)} attempt {att} started twice: on {seen[att]} and on {inst} at {hms(t)}")
            seen[att] = inst
            for (t0, i0, a0) in sorted(ss):
                if t0 >= t or a0 == att and i0 == inst:
                    continue
                end0 = ends.get((job, entry, s, i0, a0))
                killed = any(t0 < k < t for k in kills.get(i0, []))
                if end0 and end0[0] <= t and end0[1] in ("error", "timeout", "lost"):
                    continue
                if killed and not end0:
                    continue
                why = f"ended {end0[1]} at {hms(end0[0])}" if end0 and end0[0] <= t else "still running there"
                findings.append(f"{name}: slot {hms(s / 1000)} handler started again: attempt {att} on {inst} at {hms(t)}, "
                                f"while attempt {a0} on {i0} (started {hms(t0)}) {why}")

    print("\n== findings")
    for f in findings or ["none"]:
        print("  " + f)
    st = steps.get("stop")
    if st:
        print("\n== SIGTERM to every replica after every nats-server was killed")
        t0 = st[0][0]
        for t, kv in steps["stopped"]:
            r = kv["instance"]
            print(f"  {r}: " + (f"exited {float(kv['after']):.1f} s after SIGTERM" if kv.get("after") != "-" else f"still running after {float(kv['waited']):.1f} s: {kv.get('then', '')}"))
            for e in logs:
                if e["_replica"] == r and e["_t"] >= t0 - 1 and e["msg"] in (
                        "shutting down", "stop the fleet service", "scheduler stopped", "running jobs did not finish in time: cancelled, and their leases released for another replica",
                        "records that complete a slot were not stored before Stop returned", "run finished"):
                    what = e["msg"] + (f" ({e.get('job')} {hm(ts(e['slot']))} {e.get('status')})" if e["msg"] == "run finished" else "")
                    print(f"     +{e['_t'] - t0:5.1f} s  {what}")
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("holder")
    h.add_argument("work")
    h.add_argument("job")
    h.add_argument("--entry", default="")
    h.add_argument("--active")
    h.add_argument("--min-attempt", type=int, default=1)
    h.add_argument("--min-age", type=float, default=1)
    h.add_argument("--max-age", type=float, default=5)
    z = sub.add_parser("analyze")
    z.add_argument("work")
    a = p.parse_args()
    if a.cmd == "holder":
        holder(a)
    else:
        sys.exit(analyze(a))


if __name__ == "__main__":
    main()
