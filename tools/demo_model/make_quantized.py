#!/usr/bin/python3
"""Quantized Hugging Face checkpoints of a bf16 qwen3_moe model, and their golden.json.

The source (--source) is tests/golden/qwen3_moe (the tiny random-weight fixture;
its outputs tests/golden/qwen3_moe_<format>/ are the committed test fixtures) or
models/demo-fg (default; outputs are ~13-20 MB each and not committed: write
them elsewhere with --out-root, e.g. for benchmarks).

Writes <out-root>/<prefix>_<format>/ for each format below (<prefix>: --fixture-prefix,
by default qwen3_moe for tests/golden/qwen3_moe, qwen3_demo_fg for models/demo-fg): a
complete HF model directory (config.json with the quantization_config the producing
tool writes, model.safetensors with that tool's tensor names / dtypes / packing,
tokenizer files and generation_config.json copied from the source) plus golden.json
(format version 1, see make_fixtures.py; "weights_dtype" is the format name) and
quant_summary.json (sha256 of model.safetensors, the logit differences to the bf16
model, whose golden.json is <source>/golden.json or tests/golden/<prefix>/golden.json).

Formats (quantized modules: every decoder-layer Linear, i.e. self_attn.{q,k,v,o}_proj
and mlp.experts.E.{gate,up,down}_proj; the router mlp.gate, norms, embed_tokens and
lm_head are never quantized):

  fp8_block   quant_method "fp8" (Qwen3-FP8 / DeepSeek-V3 style, transformers
              FineGrainedFP8): weight F8_E4M3 [out, in] + weight_scale_inv F32
              [ceil(out/128), ceil(in/128)]; W = fp8 * scale_inv of its 128x128 block;
              scale_inv = block absmax / 448. Everything else bf16.
  ct_fp8      compressed-tensors "float-quantized" (llm-compressor FP8_DYNAMIC):
              weight F8_E4M3 [out, in] + weight_scale [out, 1] (dtype of the original
              weight, BF16, as compressed-tensors' initialize_qparams makes it);
              W = fp8 * scale; scale = row absmax / 448. Activations dynamic per token
              (nothing stored). Everything else bf16.
  ct_w4a16    compressed-tensors "pack-quantized" (llm-compressor W4A16 with
              group_size 32): weight_packed I32 [out, in/8] (8 signed int4 per int32,
              element k of a row in bits 4*(k%8).., stored as q+8), weight_scale BF16
              [out, in/32], weight_shape I64 [2] = [out, in]; W = q * scale,
              q in [-8, 7], scale = group absmax / 7.5. Everything else bf16.
  gptq_sym    AutoGPTQ checkpoint_format "gptq" (v1): qweight I32 [in/8, out] (packed
  gptq_asym   along the input dim, nibble i of row r = input 8r+i), qzeros I32
              [in/32, out/8] (packed along the output dim, stored zero - 1: the v1
              "zeros minus one" convention), scales F16 [in/32, out], g_idx I32 [in]
              (= k // 32, desc_act false); W = scales[g] * (q - (qzeros_nibble + 1)).
              sym: zero 8 (stored 7), scale = 2*absmax/15; asym: scale =
              (max(x,0)-min(x,0))/15, zero = round(-min/scale). Round-to-nearest, no
              GPTQ error compensation. Non-quantized tensors F16 (AutoGPTQ loads fp16).
  awq         AutoAWQ GEMM: qweight I32 [in, out/8] (packed along the output dim in
              AWQ_ORDER [0,2,4,6,1,3,5,7]: nibble i of word c holds output 8c+ORDER[i]),
              qzeros I32 [in/32, out/8] (same packing, zeros as is), scales F16
              [in/32, out]; W = (q - zero) * scale; scale = (max-min)/15,
              zero = clamp(-round(min/scale), 0, 15). Non-quantized tensors F16.

group_size is 32 for the int4 formats because demo-fg's expert ffn is 96: 96 is not
a multiple of 128 (the usual group), and the down projection's input dim is 96 (the
tiny qwen3_moe: hidden 64, expert ffn 32, both multiples of 32). The fp8 block stays
128x128: in the tiny model every matrix is one partial block.

Reference (golden.json): the weights are DEQUANTIZED from the stored tensors as the
format defines (in fp32: fp8 value * fp32 scale, int * fp16/bf16 scale, no rounding
of the product to bf16), the non-quantized tensors are taken as stored (bf16, or f16
for gptq/awq). The experts' weights are used exactly so; every other weight (the
dequantized attention Linears, and for gptq/awq the F16 tensors) is rounded once to
bf16 (nearest even), as a bf16 engine serves it (moeserve: engine/quant/expert_codec.h,
LoadAsBf16); golden.json's "reference_weights" says so. Without that rounding the tiny
random-weight qwen3_moe differs from a bf16 engine by 2-4e-3 of max|logit| and, in
gptq_asym / awq bos_only, by a router near-tie (margin 1e-5) that flips, 2e-2: too
loose a tolerance to compare its small-margin greedy tokens. --exact-reference keeps
every weight exact (the format's own math; the fixtures of e8e653b). make_fixtures.forward
/ make_golden then run unchanged (fp32 math). The quant_summary.json comparison with
bf16 always uses the exact weights. Self-checks (run every time): the packed integers
unpack to the quantized integers, and dequantizing the tensors read back from the
written model.safetensors gives exactly the exact weights.

Run:  /usr/bin/python3 tools/demo_model/make_quantized.py --source tests/golden/qwen3_moe  (~1 min)
      nice -n 10 /usr/bin/python3 tools/demo_model/make_quantized.py --source models/demo-fg \
          --out-root /tmp/q --threads 2                                     (~11 min)
      --formats fp8_block,awq   only these;  --no-golden   weights + self-check only
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402
import st_io  # noqa: E402

REPO = make_fixtures.REPO
FORMATS = ["fp8_block", "ct_fp8", "ct_w4a16", "gptq_sym", "gptq_asym", "awq"]
GROUP = 32
BLOCK = 128
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
FP8_MAX = 448.0


# ----------------------------------------------------------------------------
# safetensors with any dtype (st_io reads/writes only float types)
# ----------------------------------------------------------------------------
NP_OF = {"F8_E4M3": "<u1", "BF16": "<u2", "F16": "<f2", "F32": "<f4", "I32": "<i4", "I64": "<i8"}


def save_raw(path, tensors, metadata=None):
    """tensors: name -> (dtype string, numpy array already in that dtype's storage)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        raw = np.ascontiguousarray(arr).astype(NP_OF[dt], copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_raw(path):
    """name -> (dtype string, numpy array in storage dtype)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base, out = 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[base + b: base + e], dtype=NP_OF[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], arr.copy())
    return out


def bf16_bits(t):
    return st_io.f32_to_bf16_bits(t.numpy())


def from_bf16_bits(b):
    return torch.from_numpy(st_io.bf16_bits_to_f32(b).reshape(b.shape))


# ----------------------------------------------------------------------------
# float8 e4m3fn (torch 1.13 has no float8 dtype): 1 sign, 4 exponent (bias 7),
# 3 mantissa bits, no infinities, S.1111.111 = NaN, max finite 448 (0x7E)
# ----------------------------------------------------------------------------
def _e4m3_table():
    v = np.zeros(256, dtype=np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 7
        if e == 15 and m == 7:
            v[c] = np.nan
            continue
        mag = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        v[c] = -mag if s else mag
    return v


E4M3 = _e4m3_table()
E4M3_POS = E4M3[:127]  # codes 0x00..0x7E, increasing


def e4m3_decode(codes):
    return torch.from_numpy(E4M3[codes.astype(np.int64)].astype(np.float32))


def e4m3_encode(x):
    """fp32 array (|x| <= 448) -> uint8 codes, round to nearest, ties to even (as a
    cast to torch.float8_e4m3fn does)."""
    x = np.asarray(x, dtype=np.float32)
    assert np.all(np.abs(x) <= FP8_MAX) and not np.isnan(x).any()
    a = np.abs(x).astype(np.float64)
    hi = np.searchsorted(E4M3_POS, a, side="left").clip(0, 126)
    lo = (hi - 1).clip(0, 126)
    dlo, dhi = a - E4M3_POS[lo], E4M3_POS[hi] - a
    code = np.where(dhi < dlo, hi, lo)
    tie = (dhi == dlo) & (hi != lo)
    code = np.where(tie, np.where(hi % 2 == 0, hi, lo), code)
    code = np.where(a == E4M3_POS[hi], hi, code)
    sign = (np.signbit(x)).astype(np.int64) << 7
    return (code | sign).astype(np.uint8)


def check_e4m3_codec():
    assert E4M3[0x7E] == 448.0 and E4M3[0x38] == 1.0 and E4M3[0x01] == 2.0 ** -9 and E4M3[0x08] == 2.0 ** -6
    finite = np.array([c for c in range(256) if not np.isnan(E4M3[c])])
    # every finite code round-trips (except -0 -> 0x80 which is its own code)
    assert np.array_equal(e4m3_encode(E4M3[finite].astype(np.float32)), finite.astype(np.uint8))
    # brute-force nearest-even against random values
    g = np.random.default_rng(0)
    x = (g.standard_normal(200000) * g.choice([1e-3, 0.05, 1, 30, 200], 200000)).clip(-448, 448).astype(np.float32)
    # add exact midpoints between neighbours
    mids = ((E4M3_POS[:-1] + E4M3_POS[1:]) / 2).astype(np.float32)
    x = np.concatenate([x, mids, -mids])
    c = e4m3_encode(x)
    a = np.abs(x).astype(np.float64)[:, None]
    d = np.abs(E4M3_POS[None, :] - a)
    best = d.min(1, keepdims=True)
    cand = np.where(d == best, np.arange(127)[None, :], 10 ** 6)
    even = np.where((cand % 2 == 0) & (cand < 10 ** 6), cand, 10 ** 6).min(1)
    want = np.where(even < 10 ** 6, even, cand.min(1))
    assert np.array_equal(c & 0x7F, want.astype(np.uint8)), "e4m3 encoder"


# ----------------------------------------------------------------------------
# int4 packing into int32 words: 8 nibbles, nibble i in bits [4i, 4i+4)
# ----------------------------------------------------------------------------
def pack_nibbles_last(u, order=None):
    """u: uint [..., C] values 0..15, C % 8 == 0 -> int32 [..., C/8]; nibble i of word c
    holds element 8c + order[i] (order = identity if None)."""
    u = np.asarray(u, dtype=np.uint32)
    assert u.shape[-1] % 8 == 0 and u.max() <= 15
    g = u.reshape(*u.shape[:-1], u.shape[-1] // 8, 8)
    if order is not None:
        g = g[..., order]
    w = np.zeros(g.shape[:-1], dtype=np.uint32)
    for i in range(8):
        w |= g[..., i] << np.uint32(4 * i)
    return w.view(np.int32)


def unpack_nibbles_last(w, order=None):
    w = np.asarray(w).view(np.uint32)
    out = np.zeros(w.shape[:-1] + (w.shape[-1], 8), dtype=np.int64)
    for i in range(8):
        col = order[i] if order is not None else i
        out[..., col] = (w >> np.uint32(4 * i)) & np.uint32(0xF)
    return out.reshape(*w.shape[:-1], w.shape[-1] * 8)


def check_packing():
    g = np.random.default_rng(1)
    u = g.integers(0, 16, size=(24, 96))
    for order in (None, AWQ_ORDER):
        w = pack_nibbles_last(u, order)
        assert w.dtype == np.int32 and w.shape == (24, 12)
        assert np.array_equal(unpack_nibbles_last(w, order), u)
    # fixed examples: first element in the low nibble; AWQ puts output 4 in nibble 1
    w = pack_nibbles_last(np.arange(8)[None, :])
    assert int(w.view(np.uint32)[0, 0]) == 0x76543210
    w = pack_nibbles_last(np.arange(8)[None, :], AWQ_ORDER)
    assert int(w.view(np.uint32)[0, 0]) == 0x75316420


# ----------------------------------------------------------------------------
# quantizers: w fp32 [out, in] -> (stored tensors {suffix: (dtype, array)}, dequantized fp32)
# and dequantizers: stored tensors -> fp32 [out, in], written independently of the packers
# ----------------------------------------------------------------------------
def q_fp8_block(w, stats):
    O, I = w.shape
    bo, bi = math.ceil(O / BLOCK), math.ceil(I / BLOCK)
    s = torch.zeros(bo, bi)
    for r in range(bo):
        for c in range(bi):
            blk = w[r * BLOCK:(r + 1) * BLOCK, c * BLOCK:(c + 1) * BLOCK]
            s[r, c] = blk.abs().max() / FP8_MAX
    s = torch.where(s > 0, s, torch.ones_like(s))
    full = s.repeat_interleave(BLOCK, 0)[:O].repeat_interleave(BLOCK, 1)[:, :I]
    codes = e4m3_encode((w / full).clamp(-FP8_MAX, FP8_MAX).numpy())
    deq = e4m3_decode(codes) * full
    return {"weight": ("F8_E4M3", codes), "weight_scale_inv": ("F32", s.numpy().astype(np.float32))}, deq


def dq_fp8_block(t, shape):
    codes, s = t["weight"][1], torch.from_numpy(t["weight_scale_inv"][1].astype(np.float32))
    O, I = codes.shape
    assert tuple(s.shape) == (math.ceil(O / BLOCK), math.ceil(I / BLOCK))
    full = s.repeat_interleave(BLOCK, 0)[:O].repeat_interleave(BLOCK, 1)[:, :I]
    return e4m3_decode(codes) * full


def q_ct_fp8(w, stats):
    s = from_bf16_bits(bf16_bits(w.abs().amax(1, keepdim=True) / FP8_MAX))
    s = torch.where(s > 0, s, torch.full_like(s, torch.finfo(torch.float32).eps))
    codes = e4m3_encode((w / s).clamp(-FP8_MAX, FP8_MAX).numpy())
    deq = e4m3_decode(codes) * s
    return {"weight": ("F8_E4M3", codes), "weight_scale": ("BF16", bf16_bits(s))}, deq


def dq_ct_fp8(t, shape):
    codes, sb = t["weight"][1], t["weight_scale"][1]
    assert sb.shape == (codes.shape[0], 1)
    return e4m3_decode(codes) * from_bf16_bits(sb)


def q_ct_w4a16(w, stats):
    O, I = w.shape
    G = I // GROUP
    wg = w.view(O, G, GROUP)
    s = from_bf16_bits(bf16_bits(wg.abs().amax(-1) / 7.5))  # [O, G], bf16 like the weight
    s = torch.where(s > 0, s, torch.full_like(s, torch.finfo(torch.float32).eps))
    q = torch.round(wg / s[..., None]).clamp(-8, 7).to(torch.int64)  # [O, G, GROUP]
    deq = (q.float() * s[..., None]).view(O, I)
    q = q.view(O, I).numpy()
    packed = pack_nibbles_last((q + 8).astype(np.uint32))  # compressed-tensors pack_to_int32
    return {"weight_packed": ("I32", packed), "weight_scale": ("BF16", bf16_bits(s)),
            "weight_shape": ("I64", np.array([O, I], dtype=np.int64))}, deq


def dq_ct_w4a16(t, shape):
    O, I = (int(v) for v in t["weight_shape"][1])
    q = unpack_nibbles_last(t["weight_packed"][1])[:, :I] - 8
    s = from_bf16_bits(t["weight_scale"][1])
    gs = I // s.shape[1]
    return torch.from_numpy(q.astype(np.float32)) * s.repeat_interleave(gs, 1)


def _gptq_params(wg, sym, stats):
    """GPTQ Quantizer.find_params per (out row, group): wg [O, G, GROUP] -> scale, zero [O, G]."""
    xmin = torch.minimum(wg.amin(-1), torch.zeros(1))
    xmax = torch.maximum(wg.amax(-1), torch.zeros(1))
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    both0 = (xmin == 0) & (xmax == 0)
    xmin, xmax = torch.where(both0, -torch.ones_like(xmin), xmin), torch.where(both0, torch.ones_like(xmax), xmax)
    scale = (xmax - xmin) / 15
    if sym:
        zero = torch.full_like(scale, 8.0)
    else:
        zero = torch.round(-xmin / scale)
        # v1 stores zero - 1 in a nibble: a zero of 0 would be stored as -1 (AutoGPTQ's
        # pack then ORs 0xFFFFFFFF into the word and corrupts its neighbours). Such a
        # group (min >= -scale/2) gets zero 1 and scale max/14 instead, so the stored
        # nibble is 0 and the group's range is still covered.
        z0 = zero < 1
        stats["gptq_zero0_groups"] = stats.get("gptq_zero0_groups", 0) + int(z0.sum())
        scale = torch.where(z0, xmax / 14, scale)
        zero = torch.where(z0, torch.ones_like(zero), zero)
    return scale, zero


def q_gptq(w, stats, sym):
    O, I = w.shape
    G = I // GROUP
    wg = w.view(O, G, GROUP)
    scale, zero = _gptq_params(wg, sym, stats)
    s16 = scale.half().float()
    assert torch.all(s16 > 0)
    q = (torch.round(wg / s16[..., None]) + zero[..., None]).clamp(0, 15)
    deq = (s16[..., None] * (q - zero[..., None])).view(O, I)
    qi = q.to(torch.int64).view(O, I).numpy()
    zi = zero.to(torch.int64).numpy()  # [O, G]
    assert zi.min() >= 1 and zi.max() <= 15
    qweight = pack_nibbles_last(qi).T  # [O, I/8] packed along the input dim -> [I/8, O]
    qzeros = pack_nibbles_last((zi - 1).T)  # [G, O/8], zero - 1
    g_idx = (np.arange(I) // GROUP).astype(np.int32)
    return {"qweight": ("I32", np.ascontiguousarray(qweight)), "qzeros": ("I32", qzeros),
            "scales": ("F16", s16.T.numpy().astype(np.float16)), "g_idx": ("I32", g_idx)}, deq


def dq_gptq(t, shape):
    qw, qz, sc, gi = t["qweight"][1], t["qzeros"][1], t["scales"][1], t["g_idx"][1]
    I, O = qw.shape[0] * 8, qw.shape[1]
    q = unpack_nibbles_last(qw.T.copy()).T  # [I, O]: nibble i of row r is input 8r+i
    z = unpack_nibbles_last(qz) + 1  # [G, O]
    s = torch.from_numpy(sc.astype(np.float32))  # [G, O]
    W = s[gi] * torch.from_numpy((q - z[gi]).astype(np.float32))  # [I, O]
    return W.T.contiguous()


def q_awq(w, stats):
    O, I = w.shape
    G = I // GROUP
    wg = w.view(O, G, GROUP)
    mx, mn = wg.amax(-1), wg.amin(-1)
    scale = (mx - mn).clamp(min=1e-5) / 15
    zero = (-torch.round(mn / scale)).clamp(0, 15)
    s16 = scale.half().float()
    q = (torch.round(wg / s16[..., None]) + zero[..., None]).clamp(0, 15)
    deq = ((q - zero[..., None]) * s16[..., None]).view(O, I)
    qi = q.to(torch.int64).view(O, I).numpy()
    zi = zero.to(torch.int64).numpy()
    qweight = pack_nibbles_last(qi.T, AWQ_ORDER)  # [I, O/8]
    qzeros = pack_nibbles_last(zi.T, AWQ_ORDER)  # [G, O/8]
    return {"qweight": ("I32", qweight), "qzeros": ("I32", qzeros),
            "scales": ("F16", s16.T.numpy().astype(np.float16))}, deq


def dq_awq(t, shape):
    qw, qz, sc = t["qweight"][1], t["qzeros"][1], t["scales"][1]
    q = unpack_nibbles_last(qw, AWQ_ORDER)  # [I, O]
    z = unpack_nibbles_last(qz, AWQ_ORDER)  # [G, O]
    gs = q.shape[0] // z.shape[0]
    z = np.repeat(z, gs, 0)
    s = torch.from_numpy(np.repeat(sc.astype(np.float32), gs, 0))
    return (torch.from_numpy((q - z).astype(np.float32)) * s).T.contiguous()


QUANT = {
    "fp8_block": (q_fp8_block, dq_fp8_block),
    "ct_fp8": (q_ct_fp8, dq_ct_fp8),
    "ct_w4a16": (q_ct_w4a16, dq_ct_w4a16),
    "gptq_sym": (lambda w, st: q_gptq(w, st, True), dq_gptq),
    "gptq_asym": (lambda w, st: q_gptq(w, st, False), dq_gptq),
    "awq": (q_awq, dq_awq),
}
F16_FORMATS = ("gptq_sym", "gptq_asym", "awq")  # AutoGPTQ / AutoAWQ load and save fp16


# ----------------------------------------------------------------------------
# quantization_config per format
# ----------------------------------------------------------------------------
def quantization_config(fmt, cfg):
    L = cfg["num_hidden_layers"]
    if fmt == "fp8_block":
        # as Qwen3-*-FP8 (2507): the unconverted modules listed; embed_tokens and the
        # final norm are not Linear and need no entry
        keep = ["lm_head"]
        for i in range(L):
            keep += [f"model.layers.{i}.input_layernorm", f"model.layers.{i}.mlp.gate",
                     f"model.layers.{i}.post_attention_layernorm"]
        return {"activation_scheme": "dynamic", "fmt": "e4m3", "modules_to_not_convert": keep,
                "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
    if fmt in ("ct_fp8", "ct_w4a16"):
        # llm-compressor recipe ignore=["lm_head", "re:.*mlp.gate$"]; the saved config
        # lists the unquantized Linear modules by name (QuantizationConfig.from_pretrained)
        ignore = [f"model.layers.{i}.mlp.gate" for i in range(L)] + ["lm_head"]
        args = dict(actorder=None, block_structure=None, dynamic=False, group_size=None, num_bits=8,
                    observer="minmax", observer_kwargs={}, strategy="channel", symmetric=True, type="float")
        if fmt == "ct_fp8":
            form = "float-quantized"
            inp = dict(actorder=None, block_structure=None, dynamic=True, group_size=None, num_bits=8,
                       observer=None, observer_kwargs={}, strategy="token", symmetric=True, type="float")
        else:
            form = "pack-quantized"
            args.update(group_size=GROUP, num_bits=4, strategy="group", type="int")
            inp = None
        return {"config_groups": {"group_0": {"format": form, "input_activations": inp, "output_activations": None,
                                              "targets": ["Linear"], "weights": args}},
                "format": form, "ignore": ignore, "kv_cache_scheme": None, "quant_method": "compressed-tensors",
                "quantization_status": "compressed", "sparsity_config": {}}
    if fmt in ("gptq_sym", "gptq_asym"):
        return {"bits": 4, "group_size": GROUP, "damp_percent": 0.01, "desc_act": False, "static_groups": False,
                "sym": fmt == "gptq_sym", "true_sequential": True, "model_name_or_path": None,
                "model_file_base_name": "model", "quant_method": "gptq", "checkpoint_format": "gptq"}
    if fmt == "awq":
        # AutoAWQ's Qwen3MoE class would also quantize the router; we keep it unquantized
        # (as every other format here) and say so. Loaders match these names as substrings
        # of module names: "mlp.gate" matches only the routers (experts are mlp.experts.E.*).
        return {"quant_method": "awq", "zero_point": True, "group_size": GROUP, "bits": 4, "version": "gemm",
                "modules_to_not_convert": ["mlp.gate"]}
    raise ValueError(fmt)


# ----------------------------------------------------------------------------
def quantized_linears(cfg):
    names = []
    for L in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{L}."
        names += [p + f"self_attn.{x}_proj" for x in "qkvo"]
        for e in range(cfg["num_experts"]):
            names += [p + f"mlp.experts.{e}.{x}_proj" for x in ("gate", "up", "down")]
    return names


def build(fmt, W, cfg):
    """-> (stored tensors for model.safetensors, reference fp32 weights, stats)"""
    qfn, _ = QUANT[fmt]
    lin = set(quantized_linears(cfg))
    stored, ref, stats = {}, {}, {"quantized_linears": len(lin)}
    f16_inexact = 0
    for name, w in W.items():
        mod = name[:-len(".weight")] if name.endswith(".weight") else None
        if mod in lin:
            t, deq = qfn(w, stats)
            for suffix, v in t.items():
                stored[f"{mod}.{suffix}"] = v
            ref[name] = deq
            err = (deq - w).abs().max().item()
            stats["max_abs_weight_err"] = max(stats.get("max_abs_weight_err", 0.0), err)
        elif fmt in F16_FORMATS:
            h = w.numpy().astype(np.float16)
            assert np.isfinite(h).all()
            f16_inexact += int((h.astype(np.float32) != w.numpy()).sum())
            stored[name] = ("F16", h)
            ref[name] = torch.from_numpy(h.astype(np.float32))
        else:
            stored[name] = ("BF16", bf16_bits(w))
            ref[name] = w.clone()
    if fmt in F16_FORMATS:
        stats["bf16_to_f16_inexact_elements"] = f16_inexact
    return stored, ref, stats


def self_check(fmt, path, ref, cfg):
    """Read the written file back and dequantize it with the format's own rules."""
    _, dqfn = QUANT[fmt]
    back = load_raw(path)
    by_mod = {}
    for k, v in back.items():
        mod, suffix = k.rsplit(".", 1)
        by_mod.setdefault(mod, {})[suffix] = v
    lin = quantized_linears(cfg)
    for mod in lin:
        deq = dqfn(by_mod.pop(mod), ref[mod + ".weight"].shape)
        assert torch.equal(deq, ref[mod + ".weight"]), (fmt, mod, "dequantized file != reference weights")
    rest = {f"{m}.{s}": v for m, t in by_mod.items() for s, v in t.items()}
    assert set(rest) | {m + ".weight" for m in lin} == set(ref), (fmt, "tensor names")
    for name, (dt, arr) in rest.items():
        v = from_bf16_bits(arr) if dt == "BF16" else torch.from_numpy(arr.astype(np.float32))
        assert dt == ("F16" if fmt in F16_FORMATS else "BF16"), (fmt, name, dt)
        assert torch.equal(v, ref[name]), (fmt, name)


# ----------------------------------------------------------------------------
def compare_to_bf16(cfg, Wb, Wq, gold_b, gold_q):
    """Per case: last_logits max |diff|, argmax equality, greedy prefix agreement, and
    teacher-forced argmax agreement on the bf16 model's prompt + greedy sequence."""
    out = []
    for cb, cq in zip(gold_b["cases"], gold_q["cases"]):
        assert cb["name"] == cq["name"]
        lb, lq = torch.tensor(cb["last_logits"]), torch.tensor(cq["last_logits"])
        gb, gq = cb["greedy_ids"], cq["greedy_ids"]
        prefix = next((i for i, (a, b) in enumerate(zip(gb, gq)) if a != b), len(gb))
        seq = cb["prompt_ids"] + gb[:-1]
        with torch.no_grad():
            fb, _ = make_fixtures.forward(cfg, Wb, seq)
            fq, _ = make_fixtures.forward(cfg, Wq, seq)
        tf = (fb.argmax(-1) == fq.argmax(-1)).float()
        out.append({"case": cb["name"], "last_logits_max_abs_diff": round((lb - lq).abs().max().item(), 5),
                    "last_argmax_same": bool(lb.argmax() == lq.argmax()),
                    "greedy_same_prefix": prefix, "greedy_same_positions": sum(a == b for a, b in zip(gb, gq)),
                    "teacher_forced_positions": len(seq),
                    "teacher_forced_argmax_agreement": round(tf.mean().item(), 4),
                    "teacher_forced_max_abs_diff": round((fb - fq).abs().max().item(), 5)})
    return out


def default_prefix(src, cfg):
    """The fixture name of a bf16 model directory, as make_fixtures.py names its golden:
    tests/golden/<name> -> <name>; models/<name> -> <model_type without _moe>_<name>
    (models/demo-fg -> qwen3_demo_fg)."""
    src = os.path.abspath(src)
    base = os.path.basename(src.rstrip("/")).replace("-", "_")
    if os.path.dirname(src) == os.path.join(REPO, "tests/golden"):
        return base
    arch = cfg["model_type"]
    arch = arch[:-len("_moe")] if arch.endswith("_moe") else arch
    return f"{arch}_{base}"


def repo_rel(path):
    """path relative to the repo root when inside it (golden.json's model_dir), else absolute."""
    rel = os.path.relpath(os.path.abspath(path), REPO)
    return os.path.abspath(path) if rel.startswith("..") else rel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", "--src", dest="src", default=os.path.join(REPO, "models/demo-fg"),
                    help="bf16 qwen3_moe HF directory to quantize (default models/demo-fg; "
                         "tests/golden/qwen3_moe for the committed test fixtures)")
    ap.add_argument("--fixture-prefix", default=None,
                    help="output directories are <out-root>/<prefix>_<format> (default: derived "
                         "from --source: qwen3_demo_fg, qwen3_moe)")
    ap.add_argument("--bf16-golden", default=None,
                    help="golden.json of the bf16 source for the comparison (default: "
                         "<source>/golden.json, else tests/golden/<derived prefix>/golden.json)")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--out-root", default=os.path.join(REPO, "tests/golden"))
    ap.add_argument("--no-golden", action="store_true", help="weights, configs and self-checks only")
    ap.add_argument("--exact-reference", action="store_true",
                    help="golden.json on the exact dequantized weights everywhere (default: the "
                         "non-expert weights rounded to bf16, as a bf16 engine serves them)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import sentencepiece as spm

    check_e4m3_codec()
    check_packing()
    cfg = json.load(open(os.path.join(args.src, "config.json")))
    assert cfg["model_type"] == "qwen3_moe", cfg["model_type"]
    W = st_io.load(os.path.join(args.src, "model.safetensors"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.src, "tokenizer.model"))
    prefix = args.fixture_prefix or default_prefix(args.src, cfg)
    gold_path = args.bf16_golden
    if gold_path is None:
        gold_path = os.path.join(args.src, "golden.json")
        if not os.path.exists(gold_path):
            gold_path = os.path.join(REPO, "tests/golden", default_prefix(args.src, cfg), "golden.json")
    gold_b = None if args.no_golden else json.load(open(gold_path))
    print(f"source {repo_rel(args.src)} -> {repo_rel(args.out_root)}/{prefix}_<format>; "
          f"bf16 golden {repo_rel(gold_path)}", flush=True)
    for fmt in args.formats.split(","):
        d = os.path.join(args.out_root, f"{prefix}_{fmt}")
        rel = repo_rel(d)
        os.makedirs(d, exist_ok=True)
        stored, ref, stats = build(fmt, W, cfg)
        qcfg = dict(cfg)
        qcfg["quantization_config"] = quantization_config(fmt, cfg)
        if fmt in F16_FORMATS:
            qcfg["torch_dtype"] = "float16"
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(qcfg, f, indent=2, sort_keys=True)
            f.write("\n")
        if fmt.startswith("gptq"):  # AutoGPTQ also writes its own quantize_config.json
            with open(os.path.join(d, "quantize_config.json"), "w") as f:
                json.dump(qcfg["quantization_config"], f, indent=2)
                f.write("\n")
        # tokenizer.model and generation_config.json always; the HF tokenizer files where
        # the source has them (the random-weight fixtures have none)
        for fn in ("tokenizer.model", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json"):
            if fn in ("tokenizer.model", "generation_config.json") or os.path.exists(os.path.join(args.src, fn)):
                shutil.copy(os.path.join(args.src, fn), os.path.join(d, fn))
        st_path = os.path.join(d, "model.safetensors")
        save_raw(st_path, stored, {"format": "pt"})
        self_check(fmt, st_path, ref, cfg)
        sha = hashlib.sha256(open(st_path, "rb").read()).hexdigest()
        size = os.path.getsize(st_path)
        print(f"{fmt}: {len(stored)} tensors, {size} bytes, sha256 {sha[:16]}..., stats {stats}; "
              "self-check ok (file dequantizes to the reference weights exactly)", flush=True)
        summary = {"format": fmt, "source": repo_rel(args.src), "model_safetensors_bytes": size,
                   "golden_reference_weights": None if args.no_golden else
                   ("exact dequantized" if args.exact_reference else
                    "experts exact dequantized; other weights rounded to bf16"),
                   "model_safetensors_sha256": sha, "generator": "tools/demo_model/make_quantized.py", **stats}
        if not args.no_golden:
            served = ref if args.exact_reference else {
                k: (v if ".mlp.experts." in k else from_bf16_bits(bf16_bits(v))) for k, v in ref.items()}
            gpath = os.path.join(d, "golden.json")
            with tempfile.TemporaryDirectory() as tmp:  # fp32 copies of the reference weights
                def golden_of(weights, out_path):
                    shutil.copy(os.path.join(d, "config.json"), os.path.join(tmp, "config.json"))
                    save_raw(os.path.join(tmp, "model.safetensors"),
                             {k: ("F32", v.numpy().astype(np.float32)) for k, v in weights.items()})
                    return make_fixtures.make_golden(tmp, rel, sp, out_path)
                g = golden_of(served, gpath)
                # the format's loss against bf16 is measured on the exact weights
                g_exact = g if args.exact_reference else golden_of(ref, os.path.join(tmp, "exact.json"))
            g["weights_dtype"] = fmt
            g["reference_weights"] = ("exact dequantized" if args.exact_reference else
                                      "experts exact dequantized; other weights rounded to bf16")
            with open(gpath, "w") as f:
                json.dump(g, f, separators=(",", ":"))
                f.write("\n")
            cmp = compare_to_bf16(cfg, W, ref, gold_b, g_exact)
            summary["vs_bf16"] = cmp
            summary["vs_bf16_max_last_logits_diff"] = max(c["last_logits_max_abs_diff"] for c in cmp)
            summary["vs_bf16_teacher_forced_agreement"] = round(
                sum(c["teacher_forced_argmax_agreement"] * c["teacher_forced_positions"] for c in cmp)
                / sum(c["teacher_forced_positions"] for c in cmp), 4)
            for c in cmp:
                print(f"  {fmt} vs bf16 {c}", flush=True)
        else:
            old = os.path.join(d, "quant_summary.json")
            if os.path.exists(old):
                prev = json.load(open(old))
                if prev.get("model_safetensors_sha256") != sha:
                    print(f"  WARNING {fmt}: sha256 differs from quant_summary.json", flush=True)
                summary = {**prev, **summary}
        with open(os.path.join(d, "quant_summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
