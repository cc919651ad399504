#!/usr/bin/env python3
"""Turns bench_format's JSON output into the ratio table of docs/performance.md (number formats section).

Usage: bench_format --benchmark_format=json --benchmark_min_time=0.2 --benchmark_repetitions=3 \
         --benchmark_enable_random_interleaving=true > out.json; python3 ratios.py out.json
Every ratio divides two throughputs (elements/s) measured in the same run, on the same size and data set.
"""
import json
import sys


def main(path):
    runs = json.load(open(path))["benchmarks"]
    rate = {}
    have_medians = any(r.get("aggregate_name") == "median" for r in runs)
    for r in runs:
        if have_medians and r.get("aggregate_name") != "median":
            continue  # with --benchmark_repetitions, use the median of the repetitions
        name, n, wide = r["run_name"].split("/")[:3] if "run_name" in r else r["name"].split("/")
        rate[(name, n.split(":")[1], wide.split(":")[1])] = r["items_per_second"]
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
    main(sys.argv[1])
