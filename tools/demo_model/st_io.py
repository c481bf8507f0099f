#!/usr/bin/python3
"""Minimal safetensors reader/writer (no `safetensors` package available).

Format: 8-byte little-endian u64 header length N, then N bytes of JSON header
{name: {"dtype": "BF16"|"F32"|..., "shape": [...], "data_offsets": [begin, end]},
 "__metadata__": {...}}, then the raw little-endian tensor bytes. Offsets are
relative to the start of the data section. bf16 is stored as the upper 16 bits
of the fp32 value (round-to-nearest-even here), i.e. raw uint16.
"""
import json
import struct

import numpy as np
import torch


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round fp32 -> bf16 (nearest-even), return uint16 bit patterns."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounding_bias = ((u >> 16) & 1) + 0x7FFF
    out = ((u + rounding_bias) >> 16).astype(np.uint16)
    # keep NaN a NaN
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def bf16_round(t: torch.Tensor) -> torch.Tensor:
    """fp32 tensor -> fp32 tensor holding the bf16-rounded values."""
    a = t.detach().to(torch.float32).cpu().numpy()
    return torch.from_numpy(bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(a.shape))


def save_bf16(path, tensors: dict, metadata=None):
    """tensors: name -> torch/np float array. Written as BF16, sorted by name."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, torch.Tensor):
            t = t.detach().to(torch.float32).cpu().numpy()
        bits = f32_to_bf16_bits(t)
        raw = bits.astype('<u2').tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)  # align data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load(path) -> dict:
    """Returns name -> fp32 torch tensor (BF16/F16/F32 supported)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b: base + e]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype='<u2'))
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype='<f2').astype(np.float32)
        elif dt == "F32":
            arr = np.frombuffer(raw, dtype='<f4').astype(np.float32)
        else:
            raise ValueError(f"unsupported dtype {dt} for {name}")
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out
