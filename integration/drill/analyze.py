#!/usr/bin/env python3
"""Reads the JSON logs of the entries drill's replicas and reports, for the slots due
in [--from, --to), how many ran once, twice or not at all, with the claim lag."""
import argparse, collections, datetime, json, re

p = argparse.ArgumentParser()
p.add_argument("--entries", type=int, required=True)
p.add_argument("--every", required=True)
p.add_argument("--from", dest="frm", type=float, required=True)
p.add_argument("--to", type=float, required=True)
p.add_argument("--restart", type=float, nargs=2, default=None)
p.add_argument("logs", nargs="+")
a = p.parse_args()

def seconds(d):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", d)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]

every = seconds(a.every)
frm, to = int(a.frm), int(a.to)

def slots(i):
    """The slots of entry i in [frm, to), as examples/service's spreadSpec gives them."""
    if every % 60 == 0 and 3600 % every == 0:
        k = every // 60
        first = (frm // 3600) * 3600 + ((i // 60) % k) * 60 + i % 60
        step = every
    elif every < 60 and 60 % every == 0:
        first = (frm // 60) * 60 + i % every
        step = every
    else:
        first, step = 0, every
    t = first
    if t < frm:
        t += ((frm - t + step - 1) // step) * step
    out = []
    while t < to:
        out.append(t)
        t += step
    return out

expected = set()
for i in range(1, a.entries + 1):
    for t in slots(i):
        expected.add((f"tenant-{i:07d}", t))

def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

starts = collections.Counter()
firsts = collections.defaultdict(list)
by_minute = collections.defaultdict(lambda: [0, 0, []])  # minute → late, runs, lags
lags, late, warns = [], collections.Counter(), collections.Counter()
for f in a.logs:
    for line in open(f, errors="replace"):
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("level") in ("WARN", "ERROR"):
            warns[e.get("msg", "")] += 1
        if e.get("job") != "tenants" or "slot" not in e:
            continue
        slot = ts(e["slot"])
        if not (frm <= slot < to):
            continue
        key = (e.get("entry"), round(slot))
        if e.get("msg") == "run started":
            starts[(key, e.get("attempt"))] += 1
            if e.get("attempt") == 1:
                firsts[key].append(e.get("instance"))
                lags.append(e.get("lag", 0) / 1e9)
                by_minute[int(slot) // 60][1] += 1
                by_minute[int(slot) // 60][2].append(e.get("lag", 0) / 1e9)
        elif e.get("msg", "").startswith("slot late"):
            late[key] += 1
            by_minute[int(slot) // 60][0] += 1

ran = {k for (k, _a) in starts}
dups = sum(1 for v in starts.values() if v > 1) + sum(1 for v in firsts.values() if len(v) > 1)
missed = expected - ran
lags.sort()
q = lambda x: lags[min(len(lags) - 1, int(x * len(lags)))] if lags else float("nan")
print(f"slots due {len(expected)} in {to - frm} s ({len(expected) / max(1, to - frm):.0f}/s): ran {len(ran & expected)}, "
      f"missed {len(missed)} (recorded late {sum(1 for k in missed if k in late)}), started twice {dups}, "
      f"takeovers {sum(1 for (k, att) in starts if att and att > 1)}, unexpected {len(ran - expected)}")
print(f"lag p50 {q(.5):.3f} s, p99 {q(.99):.3f} s, max {lags[-1] if lags else 0:.3f} s")
if a.restart:
    r0, r1 = a.restart
    inwin = [k for k in expected if r0 <= k[1] < r1 + 5]
    print(f"slots due while replica c restarted: {len(inwin)}, missed {sum(1 for k in inwin if k in missed)}")
for m, c in warns.most_common(6):
    print(f"  WARN/ERROR x{c}: {m}")
print("by minute (UTC): late slots, runs, lag p99")
for m in sorted(by_minute):
    n_late, runs, ls = by_minute[m]
    ls.sort()
    p99 = ls[min(len(ls) - 1, int(.99 * len(ls)))] if ls else float("nan")
    print(f"  {datetime.datetime.fromtimestamp(m * 60, datetime.timezone.utc):%H:%M}  {n_late:6d} {runs:7d}  {p99:.3f} s")
