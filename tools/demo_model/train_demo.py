#!/usr/bin/python3
"""Train and export the moeserve demo model (Mixtral architecture, tiny).

Steps (all deterministic given --seed and the installed Debian packages):
  1. build the corpus: fortunes + fortunes-min (BSD) and the King James Bible
     dumped with the `bible` program of bible-kjv (public domain text);
  2. train a SentencePiece BPE tokenizer (Llama-style: identity normalisation,
     no whitespace collapsing, dummy prefix, byte fallback, unk=0 bos=1 eos=2);
  3. train a Mixtral-architecture decoder (RMSNorm, rotate-half RoPE, GQA,
     top-2 softmax router, SwiGLU experts, Switch/HF load-balancing loss);
  4. export a Hugging Face directory (config.json, model.safetensors in bf16,
     tokenizer.model, generation_config.json, tokenizer_config.json).

Run:  nice -n 19 /usr/bin/python3 tools/demo_model/train_demo.py --out models/demo
Quick smoke run: add --steps 20 --out /tmp/demo_smoke
"""
import argparse
import glob
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

FORTUNE_DIR = "/usr/share/games/fortunes"


# ----------------------------------------------------------------------------
# corpus
# ----------------------------------------------------------------------------
def load_fortunes():
    docs = []
    for path in sorted(glob.glob(os.path.join(FORTUNE_DIR, "*"))):
        if os.path.isdir(path) or "." in os.path.basename(path):
            continue  # skip *.dat / *.u8 / directories
        with open(path, "rb") as f:
            txt = f.read().decode("utf-8", errors="replace")
        for d in re.split(r"\n%\n", txt):
            d = d.strip("\n")
            if d.strip():
                docs.append(d)
    return docs


def load_bible():
    out = subprocess.run(["bible", "-m", "16384", "Gen1:1-Rev22:21"],
                         capture_output=True, check=True).stdout.decode("utf-8", "replace")
    # Join the 80-column wrapped lines back into one line per verse; one doc per chapter.
    docs, cur, chapter = [], [], None
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            cur.append(f"{m.group(1)} {m.group(2).strip()}")
        elif line.startswith(" ") or (cur and not re.match(r"^[1-3]?\s?[A-Z][A-Za-z ]+ \d+$", line)):
            cur[-1] += " " + line.strip()
        else:  # chapter heading like "Genesis 1"
            if chapter is not None and cur:
                docs.append(chapter + "\n\n" + "\n".join(cur))
            chapter, cur = line.strip(), []
    if chapter is not None and cur:
        docs.append(chapter + "\n\n" + "\n".join(cur))
    return docs


# ----------------------------------------------------------------------------
# tokenizer
# ----------------------------------------------------------------------------
def train_tokenizer(docs, prefix, vocab_size, seed):
    import sentencepiece as spm
    lines = [l for d in docs for l in d.split("\n") if l.strip()]
    random.Random(seed).shuffle(lines)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.9995,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        input_sentence_size=2_000_000,
        shuffle_input_sentence=False,
        num_threads=2,
        max_sentence_length=16384,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    for s in ["hello\nworld", "a\n\nb  c", "Ünïcödé ✓ 日本語 \t tab", "\n", "The LORD said"]:
        ids = sp.encode(s)
        back = sp.decode(ids)
        assert back == s, (s, back, ids)
    print(f"tokenizer ok: vocab={sp.get_piece_size()} bos={sp.bos_id()} eos={sp.eos_id()} "
          f"'\\n' -> {sp.encode(chr(10), out_type=str)}", flush=True)
    return sp


# ----------------------------------------------------------------------------
# model (Hugging Face Mixtral semantics)
# ----------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_cos_sin(seq, head_dim, theta, device=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    t = torch.arange(seq, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        H = c["hidden_size"]
        self.q_proj = nn.Linear(H, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)

    def norm_qk(self, q, k):
        """Per-head q/k normalisation on [B, T, heads, hd]: none in Mixtral."""
        return q, k

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k = self.norm_qk(self.q_proj(x).view(B, T, self.nh, self.hd),
                            self.k_proj(x).view(B, T, self.nkv, self.hd))
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        mask = torch.full((T, T), float("-inf")).triu(1)
        att = torch.softmax((att + mask).float(), dim=-1).to(q.dtype)
        y = (att @ v).transpose(1, 2).reshape(B, T, self.nh * self.hd)
        return self.o_proj(y)


class Expert(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.w1 = nn.Linear(H, I, bias=False)  # gate
        self.w2 = nn.Linear(I, H, bias=False)  # down
        self.w3 = nn.Linear(H, I, bias=False)  # up

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoe(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.E, self.k = c["num_local_experts"], c["num_experts_per_tok"]
        self.gate = nn.Linear(c["hidden_size"], self.E, bias=False)
        self.experts = nn.ModuleList([Expert(c["hidden_size"], c["intermediate_size"]) for _ in range(self.E)])

    def forward(self, x):
        B, T, H = x.shape
        h = x.reshape(-1, H)
        logits = self.gate(h)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        w, sel = torch.topk(probs, self.k, dim=-1)
        w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(self.E):
            tok, slot = torch.where(sel == e)
            if tok.numel() == 0:
                continue
            y = self.experts[e](h[tok]) * w[tok, slot, None]
            out.index_add_(0, tok, y)
        return out.view(B, T, H), logits, sel


class Layer(nn.Module):
    """A decoder layer; subclasses swap the attention and MoE classes and the
    MoE's Hugging Face attribute name."""
    ATTENTION, MOE, MOE_NAME = Attention, SparseMoe, "block_sparse_moe"

    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = self.ATTENTION(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        setattr(self, self.MOE_NAME, self.MOE(c))

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        y, logits, sel = getattr(self, self.MOE_NAME)(self.post_attention_layernorm(x))
        return x + y, logits, sel


class Inner(nn.Module):
    def __init__(self, c, layer):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class MixtralForCausalLM(nn.Module):
    LAYER = Layer

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Inner(c, self.LAYER)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        std = c["initializer_range"]
        for n, p in self.named_parameters():
            if n.endswith("norm.weight"):
                continue
            nn.init.normal_(p, 0.0, std)
        # scaled init for residual-branch outputs (GPT-2 style)
        for l in self.model.layers:
            nn.init.normal_(l.self_attn.o_proj.weight, 0.0, std / math.sqrt(2 * c["num_hidden_layers"]))
            self.init_ffn_outputs(l, std / math.sqrt(2 * c["num_hidden_layers"]))

    def init_ffn_outputs(self, layer, std):
        for e in layer.block_sparse_moe.experts:
            nn.init.normal_(e.w2.weight, 0.0, std)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = rope_cos_sin(T, self.c["head_dim"], self.c["rope_theta"])
        x = self.model.embed_tokens(ids)
        all_logits, all_sel = [], []
        for l in self.model.layers:
            x, rl, sel = l(x, cos, sin)
            all_logits.append(rl)
            all_sel.append(sel)
        return self.lm_head(self.model.norm(x)), all_logits, all_sel


def load_balancing_loss(gate_logits, num_experts, top_k):
    """HF transformers load_balancing_loss_func (no attention mask)."""
    cat = torch.cat(gate_logits, dim=0)
    rw = torch.softmax(cat, dim=-1)
    _, sel = torch.topk(rw, top_k, dim=-1)
    mask = F.one_hot(sel, num_experts).float()  # [N, k, E]
    tokens_per_expert = mask.mean(0)  # [k, E]
    prob_per_expert = rw.mean(0)  # [E]
    return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * num_experts


# ----------------------------------------------------------------------------
# model (Hugging Face Qwen3-MoE semantics): per-head q/k RMSNorm before RoPE,
# routed experts only, softmax router with top-k renormalised (norm_topk_prob).
# The experts of a layer are stacked parameters ([E, I, H] / [E, H, I]) so that
# the forward pass is one sort + E small matmuls; hf_state_dict() /
# load_hf_state_dict() convert to / from the Hugging Face per-expert names.
# ----------------------------------------------------------------------------
class Qwen3Attention(Attention):
    def __init__(self, c):
        super().__init__(c)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def norm_qk(self, q, k):
        return self.q_norm(q), self.k_norm(k)


class StackedMoe(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.E, self.k = c["num_experts"], c["num_experts_per_tok"]
        self.norm_topk = bool(c["norm_topk_prob"])
        H, I = c["hidden_size"], c["moe_intermediate_size"]
        self.gate = nn.Linear(H, self.E, bias=False)
        self.gate_proj = nn.Parameter(torch.empty(self.E, I, H))
        self.up_proj = nn.Parameter(torch.empty(self.E, I, H))
        self.down_proj = nn.Parameter(torch.empty(self.E, H, I))

    def forward(self, x):
        B, T, H = x.shape
        h = x.reshape(-1, H)
        logits = self.gate(h)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        w, sel = torch.topk(probs, self.k, dim=-1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        w = w.to(h.dtype)
        flat = sel.reshape(-1)
        order = torch.sort(flat, stable=True).indices
        tok = order // self.k
        counts = torch.bincount(flat, minlength=self.E).tolist()
        xs = h[tok].split(counts)
        ys = []
        for e in range(self.E):
            if counts[e] == 0:
                continue
            xe = xs[e]
            ys.append(F.linear(F.silu(F.linear(xe, self.gate_proj[e])) * F.linear(xe, self.up_proj[e]),
                               self.down_proj[e]))
        y = torch.cat(ys) * w.reshape(-1)[order, None]
        out = torch.zeros_like(h).index_add_(0, tok, y)
        return out.view(B, T, H), logits, sel


class Qwen3Layer(Layer):
    ATTENTION, MOE, MOE_NAME = Qwen3Attention, StackedMoe, "mlp"


EXPERT_STACKS = ("gate_proj", "up_proj", "down_proj")


class Qwen3MoeForCausalLM(MixtralForCausalLM):
    LAYER = Qwen3Layer

    def init_ffn_outputs(self, layer, std):
        nn.init.normal_(layer.mlp.down_proj, 0.0, std)

    def hf_state_dict(self):
        out = {}
        for k, v in self.state_dict().items():
            m = re.match(r"^(model\.layers\.\d+\.mlp\.)(gate_proj|up_proj|down_proj)$", k)
            if m:
                for e in range(v.shape[0]):
                    out[f"{m.group(1)}experts.{e}.{m.group(2)}.weight"] = v[e].clone()
            else:
                out[k] = v
        return out

    def load_hf_state_dict(self, W):
        sd = {}
        for L in range(self.c["num_hidden_layers"]):
            p = f"model.layers.{L}.mlp."
            for s in EXPERT_STACKS:
                sd[p + s] = torch.stack([W[f"{p}experts.{e}.{s}.weight"]
                                         for e in range(self.c["num_experts"])])
        sd.update({k: v for k, v in W.items() if ".mlp.experts." not in k})
        self.load_state_dict(sd)


def build_model(c):
    return Qwen3MoeForCausalLM(c) if c["model_type"] == "qwen3_moe" else MixtralForCausalLM(c)


def hf_state_dict(model):
    return model.hf_state_dict() if hasattr(model, "hf_state_dict") else dict(model.state_dict())


def load_hf(model, W):
    if hasattr(model, "load_hf_state_dict"):
        model.load_hf_state_dict(W)
    else:
        model.load_state_dict(W)


def load_corpus_split(seed):
    """Documents and the seeded 98/2 train/held-out split (same split for every model)."""
    fort = load_fortunes()
    bib = load_bible()
    docs = fort + bib
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_held = max(1, len(docs) // 50)
    return docs, order[n_held:], order[:n_held], len(fort), len(bib)


def encode_docs(sp, docs, idx):
    ids = []
    for i in idx:
        ids.append(sp.bos_id())
        ids.extend(sp.encode(docs[i]))
        ids.append(sp.eos_id())
    return torch.tensor(ids, dtype=torch.long)


def write_hf_side_files(out, c, tokenizer_path):
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": c["bos_token_id"],
                   "eos_token_id": c["eos_token_id"], "transformers_version": c["transformers_version"]},
                  f, indent=2)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                   "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
                   "model_max_length": c["max_position_embeddings"], "legacy": True,
                   "clean_up_tokenization_spaces": False}, f, indent=2)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=2)
    if os.path.abspath(tokenizer_path) != os.path.abspath(os.path.join(out, "tokenizer.model")):
        shutil.copy(tokenizer_path, os.path.join(out, "tokenizer.model"))


def routing_skew(counts):
    """counts [layers, E] -> per layer: (top-10% share, top-25% share, n10, n25)."""
    E = counts.shape[1]
    n10, n25 = max(1, round(E * 0.10)), max(1, E // 4)
    r10, r25 = [], []
    for li in range(counts.shape[0]):
        share = (counts[li] / counts[li].sum()).sort(descending=True).values
        r10.append(share[:n10].sum().item())
        r25.append(share[:n25].sum().item())
    return r10, r25, n10, n25


# ----------------------------------------------------------------------------
def adamw(model, lr):
    """AdamW with weight decay on matrices only (not on norms)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": nodecay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def cosine_lr(base_lr, warm, steps):
    """lr_at(step, progress): linear warmup over `warm` steps, then cosine to
    10% of `base_lr` over the run's progress (0..1)."""
    def lr_at(s, progress):
        if s < warm:
            return base_lr * (s + 1) / warm
        p0 = warm / steps
        p = min(1.0, max(0.0, (progress - p0) / max(1e-9, 1 - p0)))
        return base_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
    return lr_at


class TimeBudget:
    """Progress through a run of `steps` steps within `max_seconds`: step-based
    (deterministic) unless the wall clock runs ahead, then time-based, so the
    cosine schedule still anneals. `time_limited` says whether the clock ever
    led; `progress(step) >= 1` means the budget is spent. (The clock leads at
    step 0 by the moments since start, so `time_limited` is true for every run
    as it always was; only the stop at `--max-seconds` tells a cut run.)"""

    def __init__(self, steps, max_seconds):
        self.steps, self.max_seconds = steps, max_seconds
        self.t0 = time.time()
        self.time_limited = False

    def elapsed(self):
        return time.time() - self.t0

    def progress(self, step):
        clock = self.elapsed() / self.max_seconds
        if clock > step / self.steps:
            self.time_limited = True
        return max(step / self.steps, clock)


def sample_batch(src, n, seq, gen):
    """`n` random windows of `seq` tokens of `src` and their next tokens."""
    ix = torch.randint(0, len(src) - seq - 1, (n,), generator=gen)
    x = torch.stack([src[i:i + seq] for i in ix])
    y = torch.stack([src[i + 1:i + 1 + seq] for i in ix])
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/demo")
    ap.add_argument("--arch", choices=["mixtral", "qwen3_moe"], default="mixtral")
    ap.add_argument("--tokenizer", default=None,
                    help="reuse this SentencePiece model (e.g. models/demo/tokenizer.model) instead of "
                         "training one; --vocab is then ignored")
    ap.add_argument("--rope-theta", type=float, default=None,
                    help="default: 1e4 for mixtral, 1e6 for qwen3_moe (as Qwen3)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--aux-coef", type=float, default=0.002)
    ap.add_argument("--max-seconds", type=float, default=1560.0,
                    help="wall-clock budget of the training loop; if the step-based schedule would "
                         "overrun it, the LR schedule follows elapsed time instead (not deterministic)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/moeserve_demo_work")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    # 2% of documents held out
    docs, train_idx, held_idx, n_fort, n_bib = load_corpus_split(args.seed)
    print(f"corpus: {n_fort} fortunes, {n_bib} bible chapters, "
          f"{sum(len(d) for d in docs) / 1e6:.2f} M chars", flush=True)

    if args.tokenizer:
        import sentencepiece as spm
        tok_path = args.tokenizer
        sp = spm.SentencePieceProcessor(model_file=tok_path)
        print(f"tokenizer reused from {tok_path}: vocab={sp.get_piece_size()}", flush=True)
    else:
        prefix = os.path.join(args.workdir, "tok")
        sp = train_tokenizer([docs[i] for i in train_idx], prefix, args.vocab, args.seed)
        tok_path = prefix + ".model"
        print(f"tokenizer trained in {time.time() - t_start:.0f}s", flush=True)

    def encode(idx):
        ids = []
        for i in idx:
            ids.append(sp.bos_id())
            ids.extend(sp.encode(docs[i]))
            ids.append(sp.eos_id())
        return torch.tensor(ids, dtype=torch.long)

    train_ids, held_ids = encode(train_idx), encode(held_idx)
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)} (encoded at {time.time() - t_start:.0f}s)",
          flush=True)

    if args.arch == "qwen3_moe":
        c = dict(
            architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
            vocab_size=sp.get_piece_size(), hidden_size=args.hidden,
            intermediate_size=args.ffn * args.topk,  # unused (no dense MLP layers); HF requires it
            moe_intermediate_size=args.ffn, num_experts=args.experts, num_experts_per_tok=args.topk,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
            num_hidden_layers=args.layers, num_attention_heads=args.heads,
            num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
            hidden_act="silu", max_position_embeddings=2048, initializer_range=0.02,
            rms_norm_eps=1e-6, use_cache=True, tie_word_embeddings=False,
            rope_theta=args.rope_theta or 1000000.0, rope_scaling=None, attention_bias=False,
            attention_dropout=0.0, use_sliding_window=False, sliding_window=None,
            max_window_layers=args.layers, bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(),
            output_router_logits=False, router_aux_loss_coef=args.aux_coef,
            torch_dtype="bfloat16", transformers_version="4.51.0",
        )
    else:
      c = dict(
        architectures=["MixtralForCausalLM"], model_type="mixtral",
        vocab_size=sp.get_piece_size(), hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
        hidden_act="silu", max_position_embeddings=2048, initializer_range=0.02,
        rms_norm_eps=1e-5, use_cache=True, pad_token_id=None,
        bos_token_id=sp.bos_id(), eos_token_id=sp.eos_id(), tie_word_embeddings=False,
        rope_theta=args.rope_theta or 10000.0, sliding_window=None, attention_dropout=0.0,
        num_experts_per_tok=args.topk, num_local_experts=args.experts,
        output_router_logits=False, router_aux_loss_coef=args.aux_coef, router_jitter_noise=0.0,
        torch_dtype="bfloat16", transformers_version="4.40.0",
    )
    model = build_model(c)
    nparam = sum(p.numel() for p in model.parameters())
    expert_params = sum(p.numel() for n, p in model.named_parameters()
                        if ".experts." in n or n.split(".")[-1] in EXPERT_STACKS)
    active = nparam - expert_params + expert_params * args.topk // args.experts
    print(f"model: {nparam / 1e6:.2f} M params ({active / 1e6:.2f} M active/token)", flush=True)

    opt = adamw(model, args.lr)
    lr_at = cosine_lr(args.lr, max(1, min(50, args.steps // 10)), args.steps)

    g = torch.Generator().manual_seed(args.seed)

    def batch(src, n, gen):
        return sample_batch(src, n, args.seq, gen)

    # fixed held-out eval set
    eg = torch.Generator().manual_seed(args.seed + 1)
    held_batches = [batch(held_ids, 8, eg) for _ in range(4)]

    def evaluate(m):
        m.eval()
        tot = 0.0
        with torch.no_grad():
            for x, y in held_batches:
                lo, _, _ = m(x)
                tot += F.cross_entropy(lo.view(-1, lo.shape[-1]), y.view(-1)).item()
        m.train()
        return tot / len(held_batches)

    budget = TimeBudget(args.steps, args.max_seconds)
    tokens = 0
    ema = None
    step = 0
    log = []
    for step in range(args.steps):
        progress = budget.progress(step)
        if progress >= 1.0:
            print(f"!! --max-seconds reached at step {step}; stopping (schedule was time-driven)", flush=True)
            step -= 1
            break
        cur_lr = lr_at(step, progress)
        for gr in opt.param_groups:
            gr["lr"] = cur_lr
        x, y = batch(train_ids, args.batch, g)
        logits, rl, _ = model(x)
        ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        aux = load_balancing_loss(rl, args.experts, args.topk)
        loss = ce + args.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += x.numel()
        ema = ce.item() if ema is None else 0.95 * ema + 0.05 * ce.item()
        el = budget.elapsed()
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step} ce {ce.item():.3f} ema {ema:.3f} aux {aux.item():.3f} "
                  f"lr {cur_lr:.2e} tok/s {tokens / el:.0f} elapsed {el:.0f}s", flush=True)
        if step % 200 == 0 and step > 0:
            hl = evaluate(model)
            print(f"  held-out loss {hl:.3f}", flush=True)
            log.append({"step": step, "train_ema": ema, "held_out": hl})
    train_time = budget.elapsed()

    # ------------------------------------------------------------------ export
    sd = hf_state_dict(model)
    st_io.save_bf16(os.path.join(args.out, "model.safetensors"), sd, {"format": "pt"})
    back = st_io.load(os.path.join(args.out, "model.safetensors"))
    assert set(back) == set(sd), set(back) ^ set(sd)
    for k, v in sd.items():
        assert torch.equal(back[k], st_io.bf16_round(v)), k
    # bf16-rounded model for the final numbers
    load_hf(model, back)
    final_held = evaluate(model)
    write_hf_side_files(args.out, c, tok_path)

    # ------------------------------------------------------------------ routing skew
    model.eval()
    counts = torch.zeros(args.layers, args.experts)
    with torch.no_grad():
        for x, _ in held_batches:
            _, _, sels = model(x)
            for li, s in enumerate(sels):
                counts[li] += torch.bincount(s.flatten(), minlength=args.experts).float()
    skew10, skew, n10, q = routing_skew(counts)
    for li in range(args.layers):
        share = counts[li] / counts[li].sum()
        print(f"layer {li}: top-10% ({n10} of {args.experts}) experts' share of routings = {skew10[li]:.3f} "
              f"(uniform {n10 / args.experts:.3f}); top-25% ({q}) = {skew[li]:.3f} "
              f"(uniform {q / args.experts:.3f}); shares {[round(v, 3) for v in share.tolist()]}", flush=True)

    # ------------------------------------------------------------------ sample
    with torch.no_grad():
        ids = [sp.bos_id()] + sp.encode("The LORD")
        for _ in range(48):
            lo, _, _ = model(torch.tensor([ids]))
            ids.append(int(lo[0, -1].argmax()))
    sample = sp.decode(ids)
    print("greedy sample:", repr(sample), flush=True)

    summary = {
        "params": nparam, "active_params_per_token": active, "steps": step + 1,
        "schedule_time_limited": budget.time_limited,
        "tokens_trained": tokens, "train_seconds": round(train_time, 1),
        "tokens_per_second": round(tokens / train_time, 1), "final_train_ce_ema": ema,
        "final_held_out_loss_bf16": final_held, "eval_log": log,
        "routing_top25pct_share_per_layer": skew,
        "routing_top10pct_share_per_layer": skew10, "routing_top10pct_experts": n10,
        "routing_counts_held_out": counts.long().tolist(),
        "tokenizer": args.tokenizer or "trained (this run)",
        "data": "all fortunes of the Debian fortunes + fortunes-min packages and the KJV Bible "
                "(bible-kjv, one document per chapter); documents shuffled with the seed, 2% held out",
        "command": " ".join(sys.argv), "seed": args.seed, "args": vars(args),
        "corpus_train_tokens": len(train_ids), "corpus_heldout_tokens": len(held_ids),
        "greedy_sample_The_LORD": sample,
    }
    with open(os.path.join(args.out, "training_summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps({k: v for k, v in summary.items() if k != "eval_log"}, indent=1), flush=True)
    print(f"total wall {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
