#!/usr/bin/python3
"""Distil the dense draft model models/demo-draft from models/demo-fg.

The draft is a qwen3_moe model with ONE expert and top-1 routing (the router
softmax over one expert is 1.0 and norm_topk_prob renormalises to exactly 1.0,
so every layer is a plain dense SwiGLU FFN); it loads in the C++ engine with no
new code. qwen3_moe rather than mixtral because the target's attention uses
per-head q/k RMSNorm, which mixtral has no place for.

Initialisation from the target: embed_tokens, lm_head, final norm, and for each
kept target layer (--keep-layers) its input/post-attention norms and attention
(q/k/v/o and q/k norms); the layer's FFN is the target layer's hottest expert
(most routings on held-out text, from the target's training_summary.json).
Training: KL(target || draft) on the target's full next-token distribution over
the same corpus and train split as the target (seeded), AdamW, cosine LR.
Reports greedy agreement (share of held-out positions where the draft's argmax
equals the target's) against every model in --agreement-targets.

Run:  OMP_WAIT_POLICY=PASSIVE nice -n 10 /usr/bin/python3 tools/demo_model/distill_draft.py --threads 2
Smoke: --steps 5 --out /tmp/draft_smoke
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402
import train_demo as td  # noqa: E402


def load_model(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    m = td.build_model(cfg)
    td.load_hf(m, st_io.load(os.path.join(model_dir, "model.safetensors")))
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return cfg, m


def hottest_experts(target_dir, cfg, target, held_batches):
    path = os.path.join(target_dir, "training_summary.json")
    if os.path.exists(path):
        s = json.load(open(path))
        if "routing_counts_held_out" in s:
            return [int(np.argmax(row)) for row in s["routing_counts_held_out"]]
    E = cfg["num_experts"] if "num_experts" in cfg else cfg["num_local_experts"]
    counts = torch.zeros(cfg["num_hidden_layers"], E)
    with torch.no_grad():
        for x, _ in held_batches:
            for li, s in enumerate(target(x)[2]):
                counts[li] += torch.bincount(s.flatten(), minlength=E).float()
    return counts.argmax(-1).tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/demo-fg")
    ap.add_argument("--out", default="models/demo-draft")
    ap.add_argument("--keep-layers", default="0,2,5",
                    help="target layers the draft's layers are initialised from, in order")
    ap.add_argument("--agreement-targets", default="models/demo,models/demo-fg")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-seconds", type=float, default=600.0,
                    help="wall-clock budget; past it the cosine schedule follows elapsed time")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    import sentencepiece as spm
    tok_path = os.path.join(args.target, "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    docs, train_idx, held_idx, n_fort, n_bib = td.load_corpus_split(args.seed)
    train_ids, held_ids = td.encode_docs(sp, docs, train_idx), td.encode_docs(sp, docs, held_idx)
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)}", flush=True)

    def batch(src, n, gen):
        return td.sample_batch(src, n, args.seq, gen)

    # Same fixed held-out windows as train_demo.py's evaluation.
    eg = torch.Generator().manual_seed(args.seed + 1)
    held_batches = [batch(held_ids, 8, eg) for _ in range(4)]

    tcfg, target = load_model(args.target)
    assert tcfg["model_type"] == "qwen3_moe", "the draft copies qwen3_moe attention (q/k norms)"
    keep = [int(v) for v in args.keep_layers.split(",")]
    hot = hottest_experts(args.target, tcfg, target, held_batches)
    print(f"hottest expert per target layer: {hot}; draft layers from target layers {keep}", flush=True)

    c = dict(tcfg)
    c.update(num_hidden_layers=len(keep), num_experts=1, num_experts_per_tok=1,
             intermediate_size=tcfg["moe_intermediate_size"], max_window_layers=len(keep),
             norm_topk_prob=True, mlp_only_layers=[], decoder_sparse_step=1)
    draft = td.build_model(c)
    TW = td.hf_state_dict(target)
    DW = {k: TW[k].clone() for k in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")}
    for i, L in enumerate(keep):
        for k, v in TW.items():
            p = f"model.layers.{L}."
            if not k.startswith(p):
                continue
            rest = k[len(p):]
            if rest.startswith("mlp."):
                continue
            DW[f"model.layers.{i}.{rest}"] = v.clone()
        for s in td.EXPERT_STACKS:
            DW[f"model.layers.{i}.mlp.experts.0.{s}.weight"] = TW[f"model.layers.{L}.mlp.experts.{hot[L]}.{s}.weight"].clone()
        DW[f"model.layers.{i}.mlp.gate.weight"] = torch.zeros(1, c["hidden_size"])
    td.load_hf(draft, DW)
    nparam = sum(p.numel() for p in draft.parameters())
    print(f"draft: {nparam / 1e6:.2f} M params", flush=True)

    agree_targets = {}
    for d in args.agreement_targets.split(","):
        agree_targets[d] = target if os.path.abspath(d) == os.path.abspath(args.target) else load_model(d)[1]
    # target argmax / log-probs on the held-out windows, computed once
    held_ref = {}
    with torch.no_grad():
        for d, m in agree_targets.items():
            held_ref[d] = [m(x)[0] for x, _ in held_batches]

    def evaluate(m):
        m.eval()
        ce, kl, agree = 0.0, 0.0, {d: 0.0 for d in agree_targets}
        with torch.no_grad():
            for bi, (x, y) in enumerate(held_batches):
                lo = m(x)[0]
                V = lo.shape[-1]
                ce += F.cross_entropy(lo.view(-1, V), y.view(-1)).item()
                tl = held_ref[args.target][bi] if args.target in held_ref else target(x)[0]
                kl += F.kl_div(F.log_softmax(lo.view(-1, V), -1), F.log_softmax(tl.view(-1, V), -1),
                               log_target=True, reduction="batchmean").item()
                am = lo.argmax(-1)
                for d in agree_targets:
                    agree[d] += (am == held_ref[d][bi].argmax(-1)).float().mean().item()
        m.train()
        n = len(held_batches)
        return ce / n, kl / n, {d: v / n for d, v in agree.items()}

    init_ce, init_kl, init_agree = evaluate(draft)
    print(f"init: held-out CE {init_ce:.3f} KL {init_kl:.3f} agreement {init_agree}", flush=True)

    opt = td.adamw(draft, args.lr)
    lr_at = td.cosine_lr(args.lr, max(1, min(30, args.steps // 10)), args.steps)

    g = torch.Generator().manual_seed(args.seed + 7)
    budget = td.TimeBudget(args.steps, args.max_seconds)
    tokens, ema, step, log = 0, None, 0, []
    draft.train()
    for step in range(args.steps):
        progress = budget.progress(step)
        if progress >= 1.0:
            print(f"!! --max-seconds reached at step {step}; stopping", flush=True)
            step -= 1
            break
        lr = lr_at(step, progress)
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, _ = batch(train_ids, args.batch, g)
        with torch.no_grad():
            tl = target(x)[0]
        lo = draft(x)[0]
        V = lo.shape[-1]
        loss = F.kl_div(F.log_softmax(lo.view(-1, V), -1), F.log_softmax(tl.view(-1, V), -1),
                        log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        tokens += x.numel()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        el = budget.elapsed()
        if step % 25 == 0:
            print(f"step {step} kl {loss.item():.3f} ema {ema:.3f} lr {lr:.2e} tok/s {tokens / el:.0f} "
                  f"elapsed {el:.0f}s", flush=True)
        if step % 150 == 0 and step > 0:
            ce, kl, ag = evaluate(draft)
            print(f"  held-out CE {ce:.3f} KL {kl:.3f} agreement {ag}", flush=True)
            log.append({"step": step, "train_kl_ema": ema, "held_out_ce": ce, "held_out_kl": kl,
                        "agreement": ag})
    train_time = budget.elapsed()

    sd = td.hf_state_dict(draft)
    path = os.path.join(args.out, "model.safetensors")
    st_io.save_bf16(path, sd, {"format": "pt"})
    back = st_io.load(path)
    assert set(back) == set(sd)
    td.load_hf(draft, back)
    td.write_hf_side_files(args.out, c, tok_path)
    ce, kl, agree = evaluate(draft)
    print(f"final (bf16): held-out CE {ce:.3f} KL {kl:.3f} agreement {agree}", flush=True)

    draft.eval()
    with torch.no_grad():
        ids = [sp.bos_id()] + sp.encode("The LORD")
        for _ in range(48):
            ids.append(int(draft(torch.tensor([ids]))[0][0, -1].argmax()))
    sample = sp.decode(ids)
    print("greedy sample:", repr(sample), flush=True)

    summary = {
        "params": nparam, "file_bytes": os.path.getsize(path), "target": args.target,
        "init": {"from": args.target, "target_layers": keep,
                 "ffn_from_hottest_expert_of_target_layer": {str(L): hot[L] for L in keep},
                 "copied": "embed_tokens, lm_head, final norm; per layer input/post-attention norms, "
                           "q/k/v/o projections, q/k norms; FFN = the layer's hottest expert"},
        "loss": "KL(target || draft) over the full vocabulary, temperature 1",
        "steps": step + 1, "schedule_time_limited": budget.time_limited, "tokens_trained": tokens,
        "train_seconds": round(train_time, 1), "tokens_per_second": round(tokens / train_time, 1),
        "init_held_out": {"ce": init_ce, "kl": init_kl, "greedy_agreement": init_agree},
        "final_held_out_loss_bf16": ce, "final_held_out_kl_bf16": kl,
        "greedy_agreement_held_out": agree,
        "greedy_agreement_positions": sum(x.numel() for x, _ in held_batches),
        "eval_log": log, "seed": args.seed, "args": vars(args), "command": " ".join(sys.argv),
        "data": "same corpus and seeded train/held-out split as the target (fortunes + fortunes-min, "
                "KJV Bible); held-out windows as train_demo.py's evaluation (4 x 8 x 256 tokens)",
        "corpus_train_tokens": len(train_ids), "corpus_heldout_tokens": len(held_ids),
        "greedy_sample_The_LORD": sample,
    }
    with open(os.path.join(args.out, "training_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "eval_log"}, indent=1), flush=True)
    print(f"total wall {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
