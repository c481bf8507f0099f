#!/usr/bin/python3
"""Runs the all-policy offload matrix of issue 14 and renders it.

Every registered policy (the four baselines, self_spec, quant_draft, cutoff,
utility, throughput) on both trained MoE models (models/demo, models/demo-fg)
at fast-tier ratios 0.25 and 0.5 and concurrency 1, 4 and 16 (throughput, and
on_demand as its baseline, also at 64), over an emulated 2 GB/s + 10 us link,
each policy with its own drafter. moeserve_bench runs every (model,
concurrency set) once; its JSON (kept in --out_dir) carries the Belady
oracle's hit rate per cell. This script only runs the bench and formats what
it measured: the markdown table (--table) and the plot (--plot, matplotlib
from Debian: python3-matplotlib).

    bazel build --config=opt //tools/bench:moeserve_bench
    tools/bench/policy_matrix.py            # from the workspace root

Options: --bench (binary), --models, --threads, --num_requests,
--max_new_tokens, --repeats; --from_json to re-render earlier JSON without
running anything.
"""

import argparse
import json
import os
import subprocess
import sys
import time

POLICIES = [
    "on_demand", "lru", "lfu_static", "overlap", "self_spec", "quant_draft",
    "cutoff", "utility", "throughput"
]
LARGE_BATCH_POLICIES = ["on_demand", "throughput"]


def run_bench(args, model, policies, concurrency, num_requests, json_path):
    cmd = [
        args.bench, f"--model_dir={model}", f"--policies={','.join(policies)}",
        "--expert_cache_ratio=0.25,0.5", "--link_gbps=2",
        "--link_latency_us=10", f"--num_requests={num_requests}",
        f"--concurrency={concurrency}",
        f"--max_new_tokens={args.max_new_tokens}", f"--threads={args.threads}",
        f"--policy_repeats={args.repeats}", f"--json_out={json_path}"
    ]
    print("+", " ".join(cmd), flush=True)
    start = time.time()
    log_path = json_path[:-len(".json")] + ".log"
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    print(f"  {time.time() - start:.0f} s, exit {rc}, log {log_path}",
          flush=True)
    if rc != 0:
        sys.exit(f"moeserve_bench failed (exit {rc}); see {log_path}")


def load_rows(json_paths, overlay_paths=()):
    """Rows of every cell. Rows of `overlay_paths` (later runs of some
    policies) replace the same (model, ratio, concurrency, policy) cells and
    are marked; an overlay's own on_demand row only served as the baseline
    of its `vs on_demand` and is not shown."""
    rows, meta = _load(json_paths)
    if overlay_paths:
        extra, _ = _load(overlay_paths)
        key = lambda r: (r["model"], r["expert_cache_ratio"], r["concurrency"],
                         r["policy"])
        extra = [r for r in extra if r["policy"] != "on_demand"]
        replaced = {key(r) for r in extra}
        rows = [r for r in rows if key(r) not in replaced]
        for r in extra:
            r["overlay"] = True
        rows += extra
    return rows, meta


def _load(json_paths):
    rows = []
    meta = {}
    for path in json_paths:
        with open(path) as f:
            j = json.load(f)
        model = os.path.basename(j["model"]["dir"].rstrip("/")) if isinstance(
            j.get("model"), dict) and "dir" in j["model"] else str(
                j.get("model"))
        meta[model] = {
            "machine": j.get("machine", {}),
            "threads": j.get("threads"),
            "outputs_identical": j.get("outputs_identical"),
            "backend": j.get("backend"),
        }
        for r in j["results"]:
            r = dict(r)
            r["model"] = model
            rows.append(r)
    return rows, meta


def fmt(v, spec, none="n/a"):
    if v is None or (isinstance(v, (int, float)) and v < 0):
        return none
    return format(v, spec)


def drafter_label(r):
    d = r.get("drafter", "none")
    if d == "none":
        return "none"
    k = r.get("num_speculative_tokens", 0)
    return f"{d} k={'adaptive' if k == 0 else k}"


def write_table(rows, meta, path):
    order = {p: i for i, p in enumerate(POLICIES)}
    rows = sorted(rows,
                  key=lambda r: (r["model"], r["expert_cache_ratio"],
                                 r["concurrency"], order.get(r["policy"], 99)))
    out = []
    for model, m in sorted(meta.items()):
        mach = m["machine"]
        out.append(
            f"- `{model}`: backend {m['backend']}, {m['threads']} thread(s), "
            f"{mach.get('cpu_model', '?')}, {mach.get('logical_cpus', '?')} "
            f"logical CPUs, SIMD {mach.get('simd', '?')}; greedy outputs "
            f"identical across policies: "
            f"{'yes' if m['outputs_identical'] else 'NO'}")
    out.append("")
    out.append("| model | ratio | conc | policy | drafter | slots | tok/s | "
               "vs on_demand | hit rate | oracle hit | in place | link "
               "KiB/tok | stall share | acceptance | TPOT p50/p99 ms |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        out.append("| " + " | ".join([
            r["model"],
            f"{r['expert_cache_ratio']:.2f}",
            str(r["concurrency"]),
            r["policy"] + (" (2nd run)" if r.get("overlay") else ""),
            drafter_label(r),
            str(r["slots"]),
            f"{r['tokens_per_s']:.1f}",
            fmt(r.get("speedup_vs_on_demand"), ".2f") + "x"
            if r.get("speedup_vs_on_demand") else "n/a",
            f"{r['hit_rate']:.3f}",
            f"{r['oracle_hit_rate']:.3f}",
            f"{r.get('inplace_share', 0):.3f}",
            f"{r['link_bytes_per_token'] / 1024:.1f}",
            f"{100 * r['stall_share']:.1f}%",
            fmt(r.get("acceptance_rate"), ".3f", "-"),
            f"{r['tpot_p50_ms']:.2f} / {r['tpot_p99_ms']:.2f}",
        ]) + " |")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"table: {path}")


def write_plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({r["model"] for r in rows})
    ratios = sorted({r["expert_cache_ratio"] for r in rows})
    concs = sorted({r["concurrency"] for r in rows})
    panels = [(m, q) for m in models for q in ratios]
    fig, axes = plt.subplots(2,
                             len(panels),
                             figsize=(4.6 * len(panels), 8),
                             squeeze=False)
    width = 0.8 / len(concs)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]
    for col, (model, ratio) in enumerate(panels):
        for row, (key, scale, label) in enumerate([
            ("tokens_per_s", 1.0, "tokens/s"),
            ("link_bytes_per_token", 1 / 1024, "link KiB / token"),
        ]):
            ax = axes[row][col]
            for ci, c in enumerate(concs):
                xs, ys = [], []
                for pi, p in enumerate(POLICIES):
                    cell = [
                        r for r in rows
                        if r["model"] == model and r["policy"] == p and
                        r["expert_cache_ratio"] == ratio and
                        r["concurrency"] == c
                    ]
                    if cell:
                        xs.append(pi + (ci - (len(concs) - 1) / 2) * width)
                        ys.append(cell[0][key] * scale)
                ax.bar(xs,
                       ys,
                       width,
                       label=f"concurrency {c}",
                       color=colors[ci % len(colors)])
            ax.set_xticks(range(len(POLICIES)))
            ax.set_xticklabels(POLICIES, rotation=55, ha="right", fontsize=8)
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"{model}, fast tier {ratio:.2f}")
            ax.grid(axis="y", alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.suptitle("moeserve_bench --policies, emulated link 2 GB/s + 10 us "
                 "(CPU backend; each policy with its own drafter)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="bazel-bin/tools/bench/moeserve_bench")
    ap.add_argument("--models", default="models/demo,models/demo-fg")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--num_requests", type=int, default=16)
    ap.add_argument("--max_new_tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out_dir", default="/tmp/moeserve_policy_matrix")
    ap.add_argument("--table", default="tools/bench/policy_matrix.md")
    ap.add_argument("--plot", default="tools/bench/policy_matrix.png")
    ap.add_argument("--from_json",
                    default="",
                    help="comma-separated JSON files: render only")
    ap.add_argument("--overlay_json",
                    default="",
                    help="comma-separated JSON files of later runs whose "
                    "cells replace the same cells of --from_json")
    args = ap.parse_args()

    if args.from_json:
        paths = args.from_json.split(",")
    else:
        os.makedirs(args.out_dir, exist_ok=True)
        paths = []
        for model in args.models.split(","):
            name = os.path.basename(model.rstrip("/"))
            small = os.path.join(args.out_dir, f"{name}_c1_4_16.json")
            policies = args.policies.split(",")
            run_bench(args, model, policies, "1,4,16", args.num_requests,
                      small)
            paths.append(small)
            large_batch = [p for p in LARGE_BATCH_POLICIES if p in policies]
            if "throughput" in large_batch:
                large = os.path.join(args.out_dir, f"{name}_c64.json")
                run_bench(args, model, large_batch, "64", 64, large)
                paths.append(large)
    overlays = args.overlay_json.split(",") if args.overlay_json else []
    rows, meta = load_rows(paths, overlays)
    write_table(rows, meta, args.table)
    write_plot(rows, args.plot)


if __name__ == "__main__":
    main()
