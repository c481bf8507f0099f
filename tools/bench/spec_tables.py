#!/usr/bin/python3
"""Joins moeserve_bench policy-mode JSON reports (--json_out) into the two
tables of tools/bench/README.md: the speculative summary (each speculative
cell against lru and lru + the same drafter of its own run) and every cell.

usage: spec_tables.py RUN.json... > tables.md
"""
import json
import sys


def tok_s(cell):
    r = cell["repeat_tokens_per_s"]
    return "%d (%d-%d)" % (round(cell["tokens_per_s"]), round(min(r)),
                           round(max(r)))


def drafter(cell):
    if cell["drafter"] == "none":
        return "none"
    k = cell["num_speculative_tokens"]
    label = cell["drafter"] + (" k=%d" % k if k > 0 else " k=adaptive")
    return label + (" " + cell["draft_budget"] if cell.get("draft_budget") else "")


def link_gbps(report):
    link = report["link"]
    return "%g" % link["gbps"] if link.get("emulated") else "-"


def main(paths):
    reports = [json.load(open(p)) for p in paths]
    print("| run | model | link GB/s | conc | policy | drafter | "
          "tok/s (repeats min-max) | TPOT ms | lru tok/s | x lru | "
          "TPOT gain vs lru | lru + drafter tok/s | x lru + drafter | "
          "TPOT gain vs lru + drafter |")
    print("|" + "---|" * 14)
    for j in reports:
        gbps = link_gbps(j)
        for s in j["spec_summary"]:
            p, lru, same = s["policy"], s["lru"], s["lru_same_drafter"]
            if lru is None or same is None:
                continue  # a baseline that did not run: never from elsewhere
            print(f"| {s['run_id']} | {j['model']['name']} | {gbps} | "
                  f"{s['concurrency']} | {p['policy']} | {drafter(p)} | "
                  f"{tok_s(p)} | {p['tpot_mean_ms']:.2f} | {tok_s(lru)} | "
                  f"{s['speedup_vs_lru']:.2f}x | "
                  f"{s['tpot_speedup_vs_lru']:.2f}x | {tok_s(same)} | "
                  f"{s['speedup_vs_lru_same_drafter']:.2f}x | "
                  f"{s['tpot_speedup_vs_lru_same_drafter']:.2f}x |")
    print()
    print("| run | model | link GB/s | conc | policy | drafter | "
          "tok/s (min-max) | TPOT ms | hit rate | acceptance | mean k | "
          "vs on_demand |")
    print("|" + "---|" * 12)
    for j in reports:
        gbps = link_gbps(j)
        for r in j["results"]:
            spec = r["drafter"] != "none"
            acc = "%.3f" % r["acceptance_rate"] if spec else "-"
            mean_k = "%.2f" % r["mean_k"] if spec else "-"
            print(f"| {j['run']['id']} | {j['model']['name']} | {gbps} | "
                  f"{r['concurrency']} | {r['policy']} | {drafter(r)} | "
                  f"{tok_s(r)} | {r['tpot_mean_ms']:.2f} | "
                  f"{r['hit_rate']:.3f} | {acc} | {mean_k} | "
                  f"{r['speedup_vs_on_demand']:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
