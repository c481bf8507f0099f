#!/usr/bin/python3
"""Golden fixtures for parity tests of the moeserve C++ engine.

Writes
  tests/golden/mixtral_tiny/   random-weight Mixtral       (full HF dir + golden.json)
  tests/golden/qwen2_moe/      random-weight Qwen1.5-MoE   (shared expert, qkv bias)
  tests/golden/qwen3_moe/      random-weight Qwen3-MoE     (per-head q/k RMSNorm, explicit head_dim)
  tests/golden/olmoe/          random-weight OLMoE         (whole-projection q/k RMSNorm)
  tests/golden/mixtral_demo/golden.json   for the trained demo model in models/demo/
  tests/golden/qwen3_demo_fg/golden.json  for the fine-grained qwen3_moe model in models/demo-fg/
  tests/golden/qwen3_demo_draft/golden.json  for the dense draft (qwen3_moe, 1 expert) in models/demo-draft/
Every fixture directory is a complete Hugging Face model directory: config.json,
model.safetensors (bf16), tokenizer.model (a copy of the demo tokenizer),
generation_config.json, plus golden.json.

golden.json format (version 1)
------------------------------
{
  "format_version": 1,
  "arch": "mixtral" | "qwen2_moe" | "qwen3_moe" | "olmoe",   # config.json model_type
  "model_dir": "tests/golden/olmoe",         # HF directory, relative to the repo root
  "weights_dtype": "bfloat16",               # weights as stored in model.safetensors
  "compute_dtype": "float32",                # reference math: fp32 on the bf16 weights
  "vocab_size": 4096, "bos_token_id": 1, "eos_token_id": 2,
  "greedy_new_tokens": 32,
  "generator": "tools/demo_model/make_fixtures.py",
  "cases": [
    {
      "name": "shepherd",
      "prompt": "The LORD is my shepherd",     # text (for tokenizer tests)
      "prompt_ids": [1, ...],                  # BOS + SentencePiece encode(prompt); the model input
      "last_logits": [float x vocab_size],     # fp32 logits at the last prompt position
      "last_logits_top5": [[id, logit], ...],  # convenience: 5 largest, descending
      "greedy_ids": [32 ints],                 # argmax decoding (lowest id wins ties), each
                                               # token fed back; EOS is NOT treated as a stop
      "greedy_margins": [32 floats],           # top1 - top2 logit at each greedy step (a tiny
                                               # margin means that step may legitimately flip)
      "greedy_text": "...",                    # sp.decode(greedy_ids)
      "full_text": "...",                      # sp.decode(prompt_ids + greedy_ids)
      "prompt_router_topk": [[[e, ...] x pos] x layer],   # selected experts per prompt position,
                                                          # in descending router-probability order
      "prompt_router_weights": [[[w, ...] x pos] x layer] # their mixing weights (after the
                                                          # renormalisation if the arch does it)
    }, ...
  ]
}
Suggested tolerances for a bf16-weight engine computing in fp32: last_logits max abs
diff <= 1e-2 (CPU fp32) and identical argmax; greedy_ids identical for the first tokens
(small-margin ties can flip late tokens on GPU/bf16 activations).

Run:  nice -n 19 /usr/bin/python3 tools/demo_model/make_fixtures.py          (~2 min)
      --only arch fixtures: --skip-demo ; trained models only: --only-demo
      (--trained demo,demo-fg,demo-draft picks which trained models' goldens are rewritten)
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

PROMPTS = [
    ("bos_only", ""),
    ("the_lord", "The LORD"),
    ("shepherd", "The LORD is my shepherd"),
    ("genesis", "Genesis 1\n\n1 In the beginning"),
    ("newlines", "Hello, world!\nHow are you?\n"),
    ("fortune", "A computer program does what you tell it to do, not what you want it to do."
                " Q: How many programmers does it take to change a light bulb?\nA:"),
]


# ----------------------------------------------------------------------------
# reference forward (fp32 math, full recompute, Hugging Face semantics)
# ----------------------------------------------------------------------------
def rms(x, w, eps):
    x = x.float()
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, theta):
    # x: [heads, T, hd]
    T, hd = x.shape[1], x.shape[2]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def swiglu(x, g, u, d):
    return (torch.nn.functional.silu(x @ g.T) * (x @ u.T)) @ d.T


def forward(cfg, W, ids):
    """Returns (logits [T, V], router list per layer of (topk ids [T,k], weights [T,k]))."""
    arch = cfg["model_type"]
    H = cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", 10000.0)
    T = len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids)]
    routers = []
    mask = torch.full((T, T), float("-inf")).triu(1)
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        a = p + "self_attn."
        q = h @ W[a + "q_proj.weight"].T
        k = h @ W[a + "k_proj.weight"].T
        v = h @ W[a + "v_proj.weight"].T
        if a + "q_proj.bias" in W:
            q = q + W[a + "q_proj.bias"]
            k = k + W[a + "k_proj.bias"]
            v = v + W[a + "v_proj.bias"]
        if arch == "olmoe":  # norm over the whole projection, before the head split
            q = rms(q, W[a + "q_norm.weight"], eps)
            k = rms(k, W[a + "k_norm.weight"], eps)
            if cfg.get("clip_qkv") is not None:
                c = cfg["clip_qkv"]
                q, k, v = q.clamp(-c, c), k.clamp(-c, c), v.clamp(-c, c)
        q = q.view(T, nh, hd).transpose(0, 1)
        k = k.view(T, nkv, hd).transpose(0, 1)
        v = v.view(T, nkv, hd).transpose(0, 1)
        if arch == "qwen3_moe":  # per-head norm, before RoPE
            q = rms(q, W[a + "q_norm.weight"], eps)
            k = rms(k, W[a + "k_norm.weight"], eps)
        q, k = rope(q, theta), rope(k, theta)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1)
        o = (att @ v).transpose(0, 1).reshape(T, nh * hd)
        x = x + o @ W[a + "o_proj.weight"].T

        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        if arch == "mixtral":
            m = p + "block_sparse_moe."
            gname, names, k_ = m + "gate.weight", ("w1", "w3", "w2"), cfg["num_experts_per_tok"]
            E, renorm = cfg["num_local_experts"], True
        else:
            m = p + "mlp."
            if arch in ("qwen2_moe", "qwen3_moe"):
                sparse = (L not in cfg.get("mlp_only_layers", [])) and cfg["num_experts"] > 0 and \
                    (L + 1) % cfg.get("decoder_sparse_step", 1) == 0
                assert sparse, "dense MLP layers not used by these fixtures"
            gname, names, k_ = m + "gate.weight", ("gate_proj", "up_proj", "down_proj"), cfg["num_experts_per_tok"]
            E, renorm = cfg["num_experts"], bool(cfg.get("norm_topk_prob", False))
        probs = torch.softmax(h @ W[gname].T, dim=-1)
        w, sel = torch.topk(probs, k_, dim=-1)
        if renorm:
            w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(E):
            tok, slot = torch.where(sel == e)
            if tok.numel() == 0:
                continue
            ep = f"{m}experts.{e}."
            y = swiglu(h[tok], W[ep + names[0] + ".weight"], W[ep + names[1] + ".weight"],
                       W[ep + names[2] + ".weight"])
            out.index_add_(0, tok, y * w[tok, slot, None])
        if arch == "qwen2_moe":
            s = m + "shared_expert."
            sh = swiglu(h, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"])
            out = out + torch.sigmoid(h @ W[m + "shared_expert_gate.weight"].T) * sh
        routers.append((sel, w))
        x = x + out
    x = rms(x, W["model.norm.weight"], eps)
    lm = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ lm.T, routers


def fmt(v):
    return float(f"{v:.7g}")


def make_golden(model_dir, rel_dir, sp, out_path, n_new=32):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    W = st_io.load(os.path.join(model_dir, "model.safetensors"))
    cases = []
    for name, text in PROMPTS:
        ids = [sp.bos_id()] + sp.encode(text)
        with torch.no_grad():
            logits, routers = forward(cfg, W, ids)
            last = logits[-1]
            seq = list(ids)
            gen, margins = [], []
            cur = last
            for i in range(n_new):
                t2 = torch.topk(cur, 2)
                nxt = int(torch.argmax(cur))
                gen.append(nxt)
                margins.append(fmt(t2.values[0] - t2.values[1]))
                seq.append(nxt)
                if i + 1 < n_new:
                    lo, _ = forward(cfg, W, seq)
                    cur = lo[-1]
        top = torch.topk(last, 5)
        cases.append({
            "name": name, "prompt": text, "prompt_ids": ids,
            "last_logits": [fmt(v) for v in last.tolist()],
            "last_logits_top5": [[int(i), fmt(v)] for v, i in zip(top.values.tolist(), top.indices.tolist())],
            "greedy_ids": gen, "greedy_margins": margins, "greedy_text": sp.decode(gen), "full_text": sp.decode(ids + gen),
            "prompt_router_topk": [s.tolist() for s, _ in routers],
            "prompt_router_weights": [[[fmt(v) for v in row] for row in w.tolist()] for _, w in routers],
        })
        print(f"  [{cfg['model_type']}:{name}] {len(ids)} prompt tokens; logits std {last.std():.3f}; "
              f"distinct greedy {len(set(gen))}; {sp.decode(ids + gen)!r}", flush=True)
    g = {
        "format_version": 1, "arch": cfg["model_type"], "model_dir": rel_dir,
        "weights_dtype": "bfloat16", "compute_dtype": "float32",
        "vocab_size": cfg["vocab_size"], "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"], "greedy_new_tokens": n_new,
        "generator": "tools/demo_model/make_fixtures.py", "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    return g


# ----------------------------------------------------------------------------
# random-weight architecture fixtures
# ----------------------------------------------------------------------------
TINY = dict(layers=2, hidden=64, heads=4, kv=2, experts=8, ffn=32, topk=2)


def base_cfg(arch, vocab, bos, eos):
    t = TINY
    c = dict(vocab_size=vocab, hidden_size=t["hidden"], num_hidden_layers=t["layers"],
             num_attention_heads=t["heads"], num_key_value_heads=t["kv"], hidden_act="silu",
             max_position_embeddings=2048, initializer_range=0.02, rms_norm_eps=1e-6,
             use_cache=True, tie_word_embeddings=False, rope_theta=10000.0,
             attention_dropout=0.0, bos_token_id=bos, eos_token_id=eos, num_experts_per_tok=t["topk"],
             output_router_logits=False, router_aux_loss_coef=0.001, torch_dtype="bfloat16",
             transformers_version="4.51.0", model_type=arch)
    if arch == "mixtral":
        c.update(architectures=["MixtralForCausalLM"], intermediate_size=t["ffn"], num_local_experts=t["experts"],
                 head_dim=t["hidden"] // t["heads"], sliding_window=None, router_jitter_noise=0.0,
                 rms_norm_eps=1e-5, router_aux_loss_coef=0.02, pad_token_id=None)
    elif arch == "qwen2_moe":
        c.update(architectures=["Qwen2MoeForCausalLM"], intermediate_size=96, moe_intermediate_size=t["ffn"],
                 shared_expert_intermediate_size=64, num_experts=t["experts"], decoder_sparse_step=1,
                 mlp_only_layers=[], norm_topk_prob=False, use_sliding_window=False, sliding_window=None,
                 max_window_layers=t["layers"], rope_theta=1000000.0)
    elif arch == "qwen3_moe":
        # explicit head_dim (32) != hidden/heads (16), as in the real Qwen3-MoE models
        c.update(architectures=["Qwen3MoeForCausalLM"], head_dim=32, intermediate_size=96,
                 moe_intermediate_size=t["ffn"], num_experts=t["experts"], decoder_sparse_step=1,
                 mlp_only_layers=[], norm_topk_prob=True, attention_bias=False, use_sliding_window=False,
                 sliding_window=None, max_window_layers=t["layers"], rope_scaling=None, rope_theta=1000000.0)
    elif arch == "olmoe":
        c.update(architectures=["OlmoeForCausalLM"], intermediate_size=t["ffn"], num_experts=t["experts"],
                 norm_topk_prob=False, clip_qkv=None, attention_bias=False, rope_scaling=None,
                 rms_norm_eps=1e-5, pad_token_id=None, router_aux_loss_coef=0.01)
    return c


def random_weights(c, seed):
    g = torch.Generator().manual_seed(seed)

    def n(*shape, std=0.1):
        return torch.randn(*shape, generator=g) * std

    def norm(d):
        return 1.0 + n(d, std=0.1)

    arch = c["model_type"]
    H, V = c["hidden_size"], c["vocab_size"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or H // nh
    W = {"model.embed_tokens.weight": n(V, H, std=0.5), "model.norm.weight": norm(H),
         "lm_head.weight": n(V, H, std=0.4)}
    for L in range(c["num_hidden_layers"]):
        p = f"model.layers.{L}."
        a = p + "self_attn."
        W[p + "input_layernorm.weight"] = norm(H)
        W[p + "post_attention_layernorm.weight"] = norm(H)
        W[a + "q_proj.weight"] = n(nh * hd, H)
        W[a + "k_proj.weight"] = n(nkv * hd, H)
        W[a + "v_proj.weight"] = n(nkv * hd, H)
        W[a + "o_proj.weight"] = n(H, nh * hd)
        if arch == "qwen2_moe":
            W[a + "q_proj.bias"] = n(nh * hd)
            W[a + "k_proj.bias"] = n(nkv * hd)
            W[a + "v_proj.bias"] = n(nkv * hd)
        if arch == "qwen3_moe":
            W[a + "q_norm.weight"] = norm(hd)
            W[a + "k_norm.weight"] = norm(hd)
        if arch == "olmoe":
            W[a + "q_norm.weight"] = norm(nh * hd)
            W[a + "k_norm.weight"] = norm(nkv * hd)
        if arch == "mixtral":
            m, E, I = p + "block_sparse_moe.", c["num_local_experts"], c["intermediate_size"]
            W[m + "gate.weight"] = n(E, H, std=0.2)
            for e in range(E):
                W[f"{m}experts.{e}.w1.weight"] = n(I, H)
                W[f"{m}experts.{e}.w3.weight"] = n(I, H)
                W[f"{m}experts.{e}.w2.weight"] = n(H, I)
        else:
            m, E = p + "mlp.", c["num_experts"]
            I = c.get("moe_intermediate_size", c["intermediate_size"])
            W[m + "gate.weight"] = n(E, H, std=0.2)
            for e in range(E):
                W[f"{m}experts.{e}.gate_proj.weight"] = n(I, H)
                W[f"{m}experts.{e}.up_proj.weight"] = n(I, H)
                W[f"{m}experts.{e}.down_proj.weight"] = n(H, I)
            if arch == "qwen2_moe":
                S = c["shared_expert_intermediate_size"]
                W[m + "shared_expert.gate_proj.weight"] = n(S, H)
                W[m + "shared_expert.up_proj.weight"] = n(S, H)
                W[m + "shared_expert.down_proj.weight"] = n(H, S)
                W[m + "shared_expert_gate.weight"] = n(1, H, std=0.3)
    return W


def write_arch_fixture(arch, dirname, seed, sp, tok_path):
    rel = f"tests/golden/{dirname}"
    d = os.path.join(REPO, rel)
    os.makedirs(d, exist_ok=True)
    c = base_cfg(arch, sp.get_piece_size(), sp.bos_id(), sp.eos_id())
    W = random_weights(c, seed)
    st_io.save_bf16(os.path.join(d, "model.safetensors"), W, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": c["bos_token_id"],
                   "eos_token_id": c["eos_token_id"], "transformers_version": c["transformers_version"]},
                  f, indent=2)
    shutil.copy(tok_path, os.path.join(d, "tokenizer.model"))
    # round-trip check of the writer/reader
    back = st_io.load(os.path.join(d, "model.safetensors"))
    assert set(back) == set(W)
    for k in W:
        assert torch.equal(back[k], st_io.bf16_round(W[k])), k
    print(f"{arch}: {sum(v.numel() for v in W.values())} params, "
          f"{os.path.getsize(os.path.join(d, 'model.safetensors'))} bytes", flush=True)
    g = make_golden(d, rel, sp, os.path.join(d, "golden.json"))
    for case in g["cases"]:
        assert len(set(case["greedy_ids"])) > 1, (arch, case["name"], "degenerate greedy output")


def check_demo_against_training_module(model_dir):
    """Cross-check: the nn.Module used for training vs the functional reference above."""
    import train_demo
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    W = st_io.load(os.path.join(model_dir, "model.safetensors"))
    m = train_demo.build_model(cfg)
    train_demo.load_hf(m, W)
    m.eval()
    ids = list(range(3, 60))
    with torch.no_grad():
        a = m(torch.tensor([ids]))[0][0]
        b = forward(cfg, W, ids)[0]
    diff = (a - b).abs().max().item()
    print(f"{model_dir}: training module vs functional reference max |dlogit| = {diff:.2e}", flush=True)
    assert diff < 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo-dir", default=os.path.join(REPO, "models/demo"))
    ap.add_argument("--fg-dir", default=os.path.join(REPO, "models/demo-fg"))
    ap.add_argument("--draft-dir", default=os.path.join(REPO, "models/demo-draft"))
    ap.add_argument("--trained", default="demo,demo-fg,demo-draft",
                    help="trained models whose goldens are written (comma list; a missing model "
                         "directory is skipped with a note)")
    ap.add_argument("--tokenizer", default=None, help="default: <demo-dir>/tokenizer.model")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--only-demo", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import sentencepiece as spm
    tok = args.tokenizer or os.path.join(args.demo_dir, "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=tok)
    if not args.only_demo:
        for i, (arch, dirname) in enumerate([("mixtral", "mixtral_tiny"), ("qwen2_moe", "qwen2_moe"),
                                             ("qwen3_moe", "qwen3_moe"), ("olmoe", "olmoe")]):
            write_arch_fixture(arch, dirname, 1000 + i, sp, tok)
    if not args.skip_demo:
        trained = {"demo": (args.demo_dir, "mixtral_demo"), "demo-fg": (args.fg_dir, "qwen3_demo_fg"),
                   "demo-draft": (args.draft_dir, "qwen3_demo_draft")}
        for name in args.trained.split(","):
            model_dir, fixture = trained[name]
            if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
                print(f"{name}: {model_dir} has no model.safetensors; skipped", flush=True)
                continue
            check_demo_against_training_module(model_dir)
            d = os.path.join(REPO, "tests/golden", fixture)
            os.makedirs(d, exist_ok=True)
            rel = os.path.relpath(os.path.abspath(model_dir), REPO)
            make_golden(model_dir, rel, sp, os.path.join(d, "golden.json"))


if __name__ == "__main__":
    main()
