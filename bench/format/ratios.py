#!/usr/bin/env python3
"""Turns bench_format's JSON output into the ratio table of docs/performance.md (number formats section).

Usage: bench_format --benchmark_format=json --benchmark_min_time=0.2 --benchmark_repetitions=3 \
         --benchmark_enable_random_interleaving=true > out.json; python3 ratios.py out.json
       python3 ratios.py --issue18 out.json [more.json ...]
       python3 ratios.py --issue18 a_r1.json,a_r2.json,a_r3.json b_r1.json,b_r2.json,b_r3.json
Every ratio divides two throughputs (elements/s) measured in the same run, on the same size and data set.
--issue18 prints, for each file (one run: one build and one kernel path), the rows of docs/performance.md's
issue-18 tables (fp16 / bf16 / E4M3 / E5M2 in each cell), one column per file, or per comma-separated list of
files (rounds of one build and path: each benchmark's median over them).
"""
import json
import statistics
import sys


def rates(path):
    """(benchmark name, n, wide) -> items per second: the median where the run has repetitions. A path of
    comma-separated files (rounds of one build and kernel path, run in turn with other builds) gives each
    benchmark's median over the rounds."""
    if "," in path:
        rounds = [rates(p) for p in path.split(",")]
        keys = set().union(*rounds)
        return {k: statistics.median([r[k] for r in rounds if k in r]) for k in keys}
    runs = json.load(open(path))["benchmarks"]
    rate = {}
    have_medians = any(r.get("aggregate_name") == "median" for r in runs)
    for r in runs:
        if have_medians and r.get("aggregate_name") != "median":
            continue  # with --benchmark_repetitions, use the median of the repetitions
        name, n, wide = r["run_name"].split("/")[:3] if "run_name" in r else r["name"].split("/")
        rate[(name, n.split(":")[1], wide.split(":")[1])] = r["items_per_second"]
    return rate


def issue18(paths):
    """The issue-18 target rows, one column per run; a cell the run lacks is '-'."""
    formats = ["fp16", "bf16", "e4m3", "e5m2"]
    directed = ["toward_zero", "toward_pos_inf", "toward_neg_inf"]
    runs = [rates(p) for p in paths]

    def cell(rate, values):
        return " / ".join("-" if v is None else f"{v:.2f}" for v in values)

    def over(rate, name, n, w, base, bn=None, bw=None):
        a = rate.get((name, n, w))
        b = rate.get((base, bn or n, bw or w))
        return a / b if a and b else None

    big, small = "67108864", "65536"
    rows = []
    for w, label in (("0", "N(0,1)"), ("1", "wide")):
        rows.append((f"64 Mi nearest / memcpy, {label}", ">= 0.9",
                     lambda r, w=w: [over(r, f"round_{f}_nearest_even", big, w, "bm_memcpy") for f in formats]))
    for w, label in (("0", "N(0,1)"), ("1", "wide")):
        def lowest(r, w=w):
            out = []
            for f in formats:
                vals = [over(r, f"round_{f}_{m}", big, w, "bm_memcpy") for m in directed]
                out.append(None if None in vals else min(vals))
            return out
        rows.append((f"64 Mi directed / memcpy, {label}, lowest mode", ">= 0.7", lowest))
    rows.append(("64 Ki nearest / memcpy, N(0,1)", "-",
                 lambda r: [over(r, f"round_{f}_nearest_even", small, "0", "bm_memcpy") for f in formats]))
    for n, nlabel in ((small, "64 Ki"), (big, "64 Mi")):
        for w, label in (("0", "N(0,1)"), ("1", "wide")):
            rows.append((f"stochastic / bm_philox_words, {nlabel} {label}", ">= 0.85",
                         lambda r, n=n, w=w: [over(r, f"round_{f}_stochastic", n, w, "bm_philox_words", small, "0")
                                              for f in formats]))
    print("| fp16 / bf16 / E4M3 / E5M2 | " + " | ".join(paths) + " | target |")
    print("|---|" + "---|" * len(paths) + "---|")
    for label, target, fn in rows:
        print(f"| {label} | " + " | ".join(cell(r, fn(r)) for r in runs) + f" | {target} |")
    f16c = []
    for r in runs:
        wide = over(r, "round_fp16_nearest_even", small, "1", "bm_f16c_round_trip")
        normal = over(r, "round_fp16_nearest_even", small, "0", "bm_f16c_round_trip")
        f16c.append("-" if wide is None or normal is None else f"{wide:.2f} ({normal:.2f})")
    print("| 64 Ki fp16 nearest / F16C round trip, wide (N(0,1)) | " + " | ".join(f16c) + " | >= 0.6 |")
    for p, r in zip(paths, runs):
        mem = r.get(("bm_memcpy", big, "0"))
        words = r.get(("bm_philox_words", small, "0"))
        print(f"- {p}: memcpy 64 Mi {mem / 1e9 if mem else float('nan'):.2f} G elements/s, "
              f"bm_philox_words {words / 1e9 if words else float('nan'):.2f} G words/s")


def main(path):
    rate = rates(path)
    formats = ["fp16", "bf16", "e4m3", "e5m2"]
    modes = ["nearest_even", "toward_zero", "toward_pos_inf", "toward_neg_inf", "stochastic"]
    cases = [("67108864", "0", "64 Mi N(0,1)"), ("67108864", "1", "64 Mi wide"),
             ("65536", "0", "64 Ki N(0,1)"), ("65536", "1", "64 Ki wide")]
    print("| kernel | " + " | ".join(c[2] for c in cases) + " |")
    print("|---|" + "---|" * len(cases))
    for base in ["bm_memcpy", "bm_f16c_round_trip", "bm_eigen_half", "bm_eigen_bfloat16"]:
        cells = [f"{rate[(base, n, w)] / 1e9:.2f} G/s" if (base, n, w) in rate else "-" for n, w, _ in cases]
        print(f"| {base} (baseline) | " + " | ".join(cells) + " |")
    for f in formats:
        for m in modes:
            name = f"round_{f}_{m}"
            cells = []
            for n, w, _ in cases:
                v = rate.get((name, n, w))
                mem = rate.get(("bm_memcpy", n, w))
                cells.append(f"{v / 1e9:.2f} G/s ({v / mem:.2f}x memcpy)" if v and mem else "-")
            print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    print("Targets (ratio to the same-run baseline):")
    def ratio(a, b):
        return rate[a] / rate[b]
    for n, w, label in cases[:2]:
        for f in formats:
            r = ratio((f"round_{f}_nearest_even", n, w), ("bm_memcpy", n, w))
            print(f"- {label}: {f} nearest-even / memcpy = {r:.2f} (target >= 0.9) {'MET' if r >= 0.9 else 'MISSED'}")
            r = ratio((f"round_{f}_stochastic", n, w), ("bm_memcpy", n, w))
            print(f"- {label}: {f} stochastic / memcpy = {r:.2f} (target >= 0.5) {'MET' if r >= 0.5 else 'MISSED'}")
    for n, w, label in cases[2:]:
        if ("bm_f16c_round_trip", n, w) in rate:
            r = ratio(("round_fp16_nearest_even", n, w), ("bm_f16c_round_trip", n, w))
            print(f"- {label}: fp16 nearest-even / F16C round trip = {r:.2f} (target >= 0.6) {'MET' if r >= 0.6 else 'MISSED'}")
        r = ratio(("round_bf16_nearest_even", n, w), ("bm_memcpy", n, w))
        print(f"- {label}: bf16 nearest-even / memcpy = {r:.2f} (target >= 0.6) {'MET' if r >= 0.6 else 'MISSED'}")
    if ("bm_philox_words", "65536", "0") in rate:
        words = rate[("bm_philox_words", "65536", "0")]
        print(f"- Philox words alone (the ceiling of stochastic rounding, one word per element): {words / 1e9:.2f} G/s"
              f" = {words / rate[('bm_memcpy', '67108864', '0')]:.2f}x the 64 Mi memcpy rate")
    for n, w, label in cases:
        if ("bm_eigen_half", n, w) in rate:
            r = ratio(("round_fp16_nearest_even", n, w), ("bm_eigen_half", n, w))
            print(f"- {label}: fp16 nearest-even / Eigen::half cast = {r:.2f} (target >= 5) {'MET' if r >= 5 else 'MISSED'}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--issue18":
        issue18(sys.argv[2:])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: ratios.py out.json | ratios.py --issue18 out.json [more.json ...]")
