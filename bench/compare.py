#!/usr/bin/env python3
"""Differences run by run between workloads of bench/run.sh's raw lines.

    bench/compare.py [--base chat] [--target gatehouse] FILE.jsonl...

For each repeat (`run`) of each file, every workload is compared with the
base workload of the same repeat (interleaved runs measure them moments
apart), in microseconds of CPU per request:

- cpu: the gateway's CPU (user + system);
- user, sys: its two parts;
- db: its SQLite threads (`proxy_db_s`: the usage records' and the limit
  counters' writes), and rest: everything else (the request path);
- stub: the stub upstream's, which does the same work for every workload:
  a difference there is the load's shape, not the gateway's work.

Printed per workload and figure: the median difference, its 95 % interval
(a bootstrap of the median, 10,000 resamples, fixed seed) and the base's
median. Lines of runs that fell short of BENCH_RATE are left out and
counted.

Side by side (bench/side_by_side.sh: lines name their `gateway`), the two
gateways are not quite alike (one started first, the kernel places them
differently), and the workloads swap gateways every repeat. A difference
there is the mean of two consecutive repeats' (1 and 2, 3 and 4...), one
with each workload on each gateway, so the gateways' own difference
cancels; that difference is printed below the table.
"""

import argparse
import json
import random
import signal
import statistics


def per_request(row, figure):
    n = row["requests"]
    cpu, sys_s = row["proxy_cpu_s"], row.get("proxy_sys_s")
    db = row.get("proxy_db_s")
    value = {
        "cpu": cpu,
        "user": None if sys_s is None else cpu - sys_s,
        "sys": sys_s,
        "db": db,
        "rest": None if db is None else cpu - db,
        "stub": row.get("stub_cpu_s"),
    }[figure]
    return None if value is None or n == 0 else value / n * 1e6


def balanced(pairs, on_first):
    """Side by side: each two consecutive repeats (runs 2k-1 and 2k of a
    file) as one (workload, base) pair, the means of the two, so each
    workload counts once on each gateway. Also the median of how much more
    gateway 0 costs than gateway 1: half the difference between the repeat
    with the workload on gateway 0 and the one with it on gateway 1.
    `on_first`: per repeat, whether the workload ran on gateway 0."""
    out, halves = {}, []
    for (i, run), (a, b) in pairs.items():
        second = (i, run + 1)
        if run % 2 == 0 or second not in pairs or on_first[(i, run)] == on_first[second]:
            continue
        a2, b2 = pairs[second]
        out[(i, run)] = ((a + a2) / 2, (b + b2) / 2)
        half = ((a - b) - (a2 - b2)) / 2
        halves.append(half if on_first[(i, run)] else -half)
    return out, (statistics.median(halves) if halves else None)


def main():
    # Piped into `head`: stop quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--base", default="chat")
    ap.add_argument("--target", default="gatehouse")
    args = ap.parse_args()

    repeats = {}
    short = 0
    for i, path in enumerate(args.files):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("target") != args.target:
                    continue
                rate = row.get("rate")
                if rate and row["rps"] < 0.97 * rate:
                    short += 1
                    continue
                repeats.setdefault((i, row["run"]), {})[row["workload"]] = row

    rng = random.Random(34)
    side_by_side = bool(repeats) and all(
        "gateway" in row for r in repeats.values() for row in r.values()
    )
    positions = []
    workloads = sorted({w for r in repeats.values() for w in r} - {args.base})
    print(f"| workload | figure | pairs | median difference µs | 95 % interval | {args.base} µs |")
    print("|---|---|---:|---:|---:|---:|")
    for w in workloads:
        for figure in ("cpu", "user", "sys", "db", "rest", "stub"):
            pairs = {
                key: (per_request(r[w], figure), per_request(r[args.base], figure))
                for key, r in repeats.items()
                if w in r and args.base in r
            }
            pairs = {k: (a, b) for k, (a, b) in pairs.items() if a is not None and b is not None}
            if side_by_side:
                on_first = {k: r[w]["gateway"] == 0 for k, r in repeats.items() if w in r}
                pairs, position = balanced(pairs, on_first)
                if figure == "cpu" and position is not None:
                    positions.append((w, position))
            pairs = list(pairs.values())
            if len(pairs) < 2:
                continue
            diffs = [a - b for a, b in pairs]
            medians = sorted(
                statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(10_000)
            )
            lo, hi = medians[249], medians[9_749]
            base = statistics.median(b for _, b in pairs)
            print(
                f"| {w} | {figure} | {len(diffs)} | {statistics.median(diffs):+.2f} "
                f"| {lo:+.2f} to {hi:+.2f} | {base:.1f} |"
            )
    if side_by_side:
        print("\nEach difference: the mean of two consecutive repeats, the workloads on swapped gateways.")
        for w, p in positions:
            print(f"Gateway 0 against gateway 1 ({w} runs): {p:+.2f} µs at the median (cancelled above).")
    if short:
        print(f"\n{short} run(s) short of their BENCH_RATE left out.")


if __name__ == "__main__":
    main()
