// The int4 importers against tiny checkpoints packed here by hand: each
// format's packer below is written from the format's public description
// (AutoGPTQ's pack, AutoAWQ's gemm packing with its AWQ_ORDER,
// compressed-tensors' pack_to_int32), element by element, independent of
// the importer's unpacking; the imported part must dequantize to the
// format's definition, (u - z) * s, exactly. Then one refusal per mismatch.
#include "engine/quant/int4_import.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/quant/quantization_config.h"
#include "engine/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/int4_expert.h"
#include "kernels/tensor.h"

namespace moeserve::engine::quant {
namespace {

using kernels::Int4Part;
using kernels::Int4ScaleType;

// A Linear [out, in] in logical form: codes u in [0, 15], a zero point and a
// scale per (row, group). value(j, i) = (u - z) * s.
struct Logical {
  int64_t out = 0, in = 0, group = 0;
  std::vector<int> u;       // [out, in]
  std::vector<int> z;       // [out, groups]
  std::vector<uint16_t> s;  // [out, groups], bits of scale_type
  Int4ScaleType scale_type = Int4ScaleType::kF16;
  int64_t groups() const { return in / group; }
  float Value(int64_t j, int64_t i) const {
    const int64_t g = j * groups() + i / group;
    return static_cast<float>(u[j * in + i] - z[g]) *
           kernels::Int4ScaleToFloat(s[g], scale_type);
  }
};

uint64_t g_seed = 1;
int Rand(int n) {
  g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<int>((g_seed >> 33) % n);
}

// zero_lo..zero_hi: the zero points to draw (8..8 for symmetric).
Logical MakeLogical(int64_t out, int64_t in, int64_t group, int zero_lo,
                    int zero_hi, Int4ScaleType st) {
  Logical l;
  l.out = out;
  l.in = in;
  l.group = group;
  l.scale_type = st;
  l.u.resize(out * in);
  for (int& v : l.u) v = Rand(16);
  l.z.resize(out * l.groups());
  l.s.resize(out * l.groups());
  for (size_t k = 0; k < l.z.size(); ++k) {
    l.z[k] = zero_lo + Rand(zero_hi - zero_lo + 1);
    const float f = (0.001f + 0.0001f * Rand(200)) * (Rand(2) ? 1 : -1);
    l.s[k] = st == Int4ScaleType::kF16 ? kernels::FloatToF16(f)
                                       : kernels::FloatToBf16(f);
  }
  return l;
}

// A tensor owned by the test, viewed as a TensorInfo.
struct Owned {
  std::vector<uint8_t> bytes;
  TensorInfo info;
};

Owned MakeTensor(std::string name, DType dtype, std::vector<int64_t> shape,
                 const void* data, size_t bytes) {
  Owned t;
  t.bytes.assign(static_cast<const uint8_t*>(data),
                 static_cast<const uint8_t*>(data) + bytes);
  t.info.name = std::move(name);
  t.info.dtype = dtype;
  t.info.shape = std::move(shape);
  t.info.byte_size = bytes;
  return t;
}

Owned I32(std::string name, std::vector<int64_t> shape,
          const std::vector<uint32_t>& v) {
  return MakeTensor(std::move(name), DType::kI32, std::move(shape), v.data(),
                    4 * v.size());
}

Owned U16(std::string name, DType dtype, std::vector<int64_t> shape,
          const std::vector<uint16_t>& v) {
  return MakeTensor(std::move(name), dtype, std::move(shape), v.data(),
                    2 * v.size());
}

// The checkpoint's tensors of one Linear (keeps the Owned alive).
struct Checkpoint {
  std::vector<Owned> owned;  // weight, scales, zeros, g_idx, shape
  int weight = -1, scales = -1, zeros = -1, g_idx = -1, shape = -1;
  int Add(Owned t) {
    owned.push_back(std::move(t));
    return static_cast<int>(owned.size()) - 1;
  }
  Int4LinearTensors Tensors() {
    for (Owned& o : owned) o.info.data = o.bytes.data();
    Int4LinearTensors t;
    t.module = "m";
    auto at = [&](int i) { return i < 0 ? nullptr : &owned[i].info; };
    t.weight = at(weight);
    t.scales = at(scales);
    t.zeros = at(zeros);
    t.g_idx = at(g_idx);
    t.shape = at(shape);
    return t;
  }
};

// ---- Packers, from the formats' descriptions.

// AutoGPTQ: qweight[r][j] holds input rows 8r..8r+7 of output column j, row
// 8r + t in bits 4t; qzeros[g][c] holds output columns 8c..8c+7 of group g
// the same way, each stored as z - 1 ("gptq") or z ("gptq_v2"); scales
// [groups, out] fp16; g_idx[i] = i / group.
Checkpoint PackGptq(const Logical& l, bool v1, bool with_g_idx = true) {
  Checkpoint c;
  std::vector<uint32_t> qweight(l.in / 8 * l.out, 0);
  for (int64_t i = 0; i < l.in; ++i) {
    for (int64_t j = 0; j < l.out; ++j) {
      qweight[(i / 8) * l.out + j] |= uint32_t(l.u[j * l.in + i])
                                      << (4 * (i % 8));
    }
  }
  std::vector<uint32_t> qzeros(l.groups() * (l.out / 8), 0);
  std::vector<uint16_t> scales(l.groups() * l.out);
  for (int64_t g = 0; g < l.groups(); ++g) {
    for (int64_t j = 0; j < l.out; ++j) {
      const uint32_t stored = uint32_t(l.z[j * l.groups() + g] - (v1 ? 1 : 0));
      qzeros[g * (l.out / 8) + j / 8] |= (stored & 0xf) << (4 * (j % 8));
      scales[g * l.out + j] = l.s[j * l.groups() + g];
    }
  }
  std::vector<uint32_t> g_idx(l.in);
  for (int64_t i = 0; i < l.in; ++i) g_idx[i] = uint32_t(i / l.group);
  c.weight = c.Add(I32("m.qweight", {l.in / 8, l.out}, qweight));
  c.zeros = c.Add(I32("m.qzeros", {l.groups(), l.out / 8}, qzeros));
  c.scales = c.Add(U16("m.scales", DType::kF16, {l.groups(), l.out}, scales));
  if (with_g_idx) c.g_idx = c.Add(I32("m.g_idx", {l.in}, g_idx));
  return c;
}

// AutoAWQ gemm: qweight[i][c] holds output columns 8c..8c+7 of input row i,
// column 8c + order[p] in bits 4p with order = [0, 2, 4, 6, 1, 3, 5, 7];
// qzeros[g][c] the same over groups; scales [groups, out] fp16.
Checkpoint PackAwq(const Logical& l) {
  const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  Checkpoint c;
  const int64_t words = l.out / 8;
  std::vector<uint32_t> qweight(l.in * words, 0);
  for (int64_t i = 0; i < l.in; ++i) {
    for (int64_t w = 0; w < words; ++w) {
      for (int p = 0; p < 8; ++p) {
        qweight[i * words + w] |= uint32_t(l.u[(8 * w + order[p]) * l.in + i])
                                  << (4 * p);
      }
    }
  }
  std::vector<uint32_t> qzeros(l.groups() * words, 0);
  std::vector<uint16_t> scales(l.groups() * l.out);
  for (int64_t g = 0; g < l.groups(); ++g) {
    for (int64_t w = 0; w < words; ++w) {
      for (int p = 0; p < 8; ++p) {
        qzeros[g * words + w] |=
            uint32_t(l.z[(8 * w + order[p]) * l.groups() + g]) << (4 * p);
      }
    }
    for (int64_t j = 0; j < l.out; ++j) {
      scales[g * l.out + j] = l.s[j * l.groups() + g];
    }
  }
  c.weight = c.Add(I32("m.qweight", {l.in, words}, qweight));
  c.zeros = c.Add(I32("m.qzeros", {l.groups(), words}, qzeros));
  c.scales = c.Add(U16("m.scales", DType::kF16, {l.groups(), l.out}, scales));
  return c;
}

// compressed-tensors pack_to_int32: signed values q = u - 8 stored as q + 8,
// 8 consecutive along the packed dim per int32, element 8w + p in bits 4p;
// weight_packed along in ([out, in/8]), weight_zero_point (signed zp = z - 8,
// asymmetric only) along out ([out/8, groups]); weight_scale [out, groups]
// (bf16 here); weight_shape I64 [out, in].
Checkpoint PackCompressed(const Logical& l, bool asym) {
  Checkpoint c;
  std::vector<uint32_t> packed(l.out * (l.in / 8), 0);
  for (int64_t j = 0; j < l.out; ++j) {
    for (int64_t i = 0; i < l.in; ++i) {
      const int q = l.u[j * l.in + i] - 8;  // The signed value.
      packed[j * (l.in / 8) + i / 8] |= uint32_t(q + 8) << (4 * (i % 8));
    }
  }
  std::vector<uint32_t> zp((l.out / 8) * l.groups(), 0);
  for (int64_t j = 0; j < l.out; ++j) {
    for (int64_t g = 0; g < l.groups(); ++g) {
      const int signed_zp = l.z[j * l.groups() + g] - 8;
      zp[(j / 8) * l.groups() + g] |= uint32_t(signed_zp + 8) << (4 * (j % 8));
    }
  }
  const int64_t shape[2] = {l.out, l.in};
  c.weight = c.Add(I32("m.weight_packed", {l.out, l.in / 8}, packed));
  c.scales = c.Add(
      U16("m.weight_scale",
          l.scale_type == Int4ScaleType::kF16 ? DType::kF16 : DType::kBF16,
          {l.out, l.groups()}, l.s));
  if (asym) {
    c.zeros = c.Add(I32("m.weight_zero_point", {l.out / 8, l.groups()}, zp));
  }
  c.shape = c.Add(MakeTensor("m.weight_shape", DType::kI64, {2}, shape, 16));
  return c;
}

QuantizationConfig Config(QuantMethod method, int64_t group, bool symmetric,
                          bool gptq_v1 = true) {
  QuantizationConfig c;
  c.method = method;
  c.granularity = ScaleGranularity::kGroup;
  c.bits = 4;
  c.block_cols = group;
  c.symmetric = symmetric;
  c.gptq_zeros_minus_one = gptq_v1;
  return c;
}

// Imports `c` as `part` of an expert [hidden, ffn] and checks every weight
// of the part, and DequantizeInt4Linear, against the definition.
void ExpectImportsExactly(const QuantizationConfig& config, Checkpoint& c,
                          const Logical& l, Int4Part part, int64_t hidden,
                          int64_t ffn) {
  absl::StatusOr<kernels::Int4ExpertLayout> layout =
      Int4CheckpointLayout(config, hidden, ffn, l.scale_type);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->has_zeros, !config.symmetric);
  std::vector<std::byte> blob(layout->bytes);
  const Int4LinearTensors t = c.Tensors();
  absl::Status st = ImportInt4ExpertPart(config, t, *layout, part, blob.data());
  ASSERT_TRUE(st.ok()) << st;
  const kernels::Int4Matrix w =
      kernels::Int4ExpertPart(blob.data(), *layout, part);
  ASSERT_EQ(w.rows, l.out);
  ASSERT_EQ(w.cols, l.in);
  for (int64_t j = 0; j < l.out; ++j) {
    for (int64_t i = 0; i < l.in; ++i) {
      ASSERT_EQ(kernels::Int4At(w, j, i), l.Value(j, i))
          << "row " << j << " col " << i;
    }
  }
  std::vector<uint16_t> bf(l.out * l.in);
  st = DequantizeInt4Linear(config, t, l.out, l.in, bf.data());
  ASSERT_TRUE(st.ok()) << st;
  for (int64_t k = 0; k < l.out * l.in; ++k) {
    ASSERT_EQ(bf[k], kernels::FloatToBf16(l.Value(k / l.in, k % l.in))) << k;
  }
}

// The gate part [ffn 16, hidden 64] in groups of 32, and the down part
// [hidden 64, ffn 16] whose 16 columns under group_size 32 are one group.
TEST(Int4Import, GptqAsymmetricV1AndV2) {
  for (bool v1 : {true, false}) {
    SCOPED_TRACE(v1 ? "gptq" : "gptq_v2");
    const QuantizationConfig config =
        Config(QuantMethod::kGptq, 32, /*symmetric=*/false, v1);
    // v1 holds z in 1..16 (stored z - 1 in 0..15), v2 z in 0..15.
    Logical gate =
        MakeLogical(16, 64, 32, v1 ? 1 : 0, v1 ? 16 : 15, Int4ScaleType::kF16);
    Checkpoint c = PackGptq(gate, v1);
    ExpectImportsExactly(config, c, gate, Int4Part::kGate, 64, 16);
    Logical down =
        MakeLogical(64, 16, 16, v1 ? 1 : 0, v1 ? 16 : 15, Int4ScaleType::kF16);
    Checkpoint d = PackGptq(down, v1);
    ExpectImportsExactly(config, d, down, Int4Part::kDown, 64, 16);
  }
}

TEST(Int4Import, GptqSymmetricNeedsNoZeros) {
  for (bool v1 : {true, false}) {
    SCOPED_TRACE(v1 ? "gptq" : "gptq_v2");
    const QuantizationConfig config =
        Config(QuantMethod::kGptq, 32, /*symmetric=*/true, v1);
    Logical up = MakeLogical(16, 64, 32, 8, 8, Int4ScaleType::kF16);
    Checkpoint c = PackGptq(up, v1);
    ExpectImportsExactly(config, c, up, Int4Part::kUp, 64, 16);
  }
  // group_size -1: one group per row; no g_idx tensor is fine too.
  const QuantizationConfig config = Config(QuantMethod::kGptq, -1, true);
  Logical up = MakeLogical(16, 64, 64, 8, 8, Int4ScaleType::kF16);
  Checkpoint c = PackGptq(up, true, /*with_g_idx=*/false);
  ExpectImportsExactly(config, c, up, Int4Part::kUp, 64, 16);
}

TEST(Int4Import, AwqGemm) {
  const QuantizationConfig config = Config(QuantMethod::kAwq, 32, false);
  Logical gate = MakeLogical(16, 64, 32, 0, 15, Int4ScaleType::kF16);
  Checkpoint c = PackAwq(gate);
  ExpectImportsExactly(config, c, gate, Int4Part::kGate, 64, 16);
  Logical down = MakeLogical(64, 16, 16, 0, 15, Int4ScaleType::kF16);
  Checkpoint d = PackAwq(down);
  ExpectImportsExactly(config, d, down, Int4Part::kDown, 64, 16);
}

TEST(Int4Import, CompressedTensorsSymmetricAndAsymmetric) {
  for (bool asym : {false, true}) {
    SCOPED_TRACE(asym ? "asymmetric" : "symmetric");
    const QuantizationConfig config =
        Config(QuantMethod::kInt4Compressed, 32, !asym);
    Logical up = MakeLogical(16, 64, 32, asym ? 0 : 8, asym ? 15 : 8,
                             Int4ScaleType::kBf16);
    Checkpoint c = PackCompressed(up, asym);
    ExpectImportsExactly(config, c, up, Int4Part::kUp, 64, 16);
    Logical down = MakeLogical(64, 16, 16, asym ? 0 : 8, asym ? 15 : 8,
                               Int4ScaleType::kF16);
    Checkpoint d = PackCompressed(down, asym);
    ExpectImportsExactly(config, d, down, Int4Part::kDown, 64, 16);
  }
}

TEST(Int4Import, FindsTheTensorsByTheFormatsNames) {
  Logical l = MakeLogical(16, 64, 32, 0, 15, Int4ScaleType::kBf16);
  Checkpoint c = PackCompressed(l, true);
  Int4LinearTensors owned = c.Tensors();
  auto find = [&](const std::string& name) -> const TensorInfo* {
    for (const TensorInfo* t :
         {owned.weight, owned.scales, owned.zeros, owned.shape}) {
      if (t != nullptr && t->name == name) return t;
    }
    return nullptr;
  };
  absl::StatusOr<Int4LinearTensors> t = FindInt4LinearTensors(
      Config(QuantMethod::kInt4Compressed, 32, false), "m", find);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->weight, owned.weight);
  EXPECT_EQ(t->zeros, owned.zeros);
  EXPECT_EQ(t->shape, owned.shape);
  EXPECT_EQ(t->g_idx, nullptr);
  absl::StatusOr<Int4LinearTensors> gptq =
      FindInt4LinearTensors(Config(QuantMethod::kGptq, 32, false), "m", find);
  EXPECT_EQ(gptq.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gptq.status().message().find("m.qweight"), std::string::npos);
}

TEST(Int4Import, ScaleTypeHoldsTheCheckpointsScalesExactly) {
  std::vector<float> f16_exact = {0.0999755859375f, -0.5f};
  Owned t = MakeTensor("s", DType::kF32, {2}, f16_exact.data(), 8);
  t.info.data = t.bytes.data();
  EXPECT_EQ(*Int4ScaleTypeFor(t.info), Int4ScaleType::kF16);
  std::vector<float> bf16_exact = {0x1p-100f, 0.5f};  // Below fp16's range.
  Owned b = MakeTensor("s", DType::kF32, {2}, bf16_exact.data(), 8);
  b.info.data = b.bytes.data();
  EXPECT_EQ(*Int4ScaleTypeFor(b.info), Int4ScaleType::kBf16);
  std::vector<float> neither = {0.1f};
  Owned n = MakeTensor("s", DType::kF32, {1}, neither.data(), 4);
  n.info.data = n.bytes.data();
  EXPECT_EQ(Int4ScaleTypeFor(n.info).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Refusals: each names the tensor (or the config key) at fault.

void ExpectRefused(const QuantizationConfig& config, Checkpoint& c,
                   const Logical& l, const std::string& word,
                   bool layout_zeros = true) {
  kernels::Int4ExpertLayout layout = *kernels::Int4ExpertLayoutWithOptions(
      64, 16, l.group, 16, {l.scale_type, layout_zeros});
  std::vector<std::byte> blob(layout.bytes);
  absl::Status st = ImportInt4ExpertPart(config, c.Tensors(), layout,
                                         Int4Part::kGate, blob.data());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(word), std::string::npos) << st;
}

TEST(Int4Import, RefusesAWrongDtype) {
  const QuantizationConfig config = Config(QuantMethod::kGptq, 32, false);
  Logical l = MakeLogical(16, 64, 32, 1, 16, Int4ScaleType::kF16);
  Checkpoint c = PackGptq(l, true);
  c.owned[c.weight].info.dtype = DType::kF32;
  ExpectRefused(config, c, l, "m.qweight: expected I32 [8, 16], got F32");
}

TEST(Int4Import, RefusesAWrongShape) {
  const QuantizationConfig config = Config(QuantMethod::kAwq, 32, false);
  Logical l = MakeLogical(16, 64, 32, 0, 15, Int4ScaleType::kF16);
  Checkpoint c = PackAwq(l);
  c.owned[c.scales].info.shape = {1, 16};  // One group instead of two.
  ExpectRefused(config, c, l, "m.scales: expected F16/BF16/F32 [2, 16]");
}

TEST(Int4Import, RefusesActOrderGIdx) {
  const QuantizationConfig config = Config(QuantMethod::kGptq, 32, false);
  Logical l = MakeLogical(16, 64, 32, 1, 16, Int4ScaleType::kF16);
  Checkpoint c = PackGptq(l, true);
  // desc_act: the groups follow the activation order, not i / group.
  int32_t* g_idx = reinterpret_cast<int32_t*>(c.owned[c.g_idx].bytes.data());
  std::swap(g_idx[3], g_idx[40]);
  ExpectRefused(config, c, l, "m.g_idx");
}

TEST(Int4Import, RefusesBitsOtherThanFour) {
  QuantizationConfig config = Config(QuantMethod::kGptq, 32, false);
  config.bits = 8;
  Logical l = MakeLogical(16, 64, 32, 1, 16, Int4ScaleType::kF16);
  Checkpoint c = PackGptq(l, true);
  ExpectRefused(config, c, l, "bits: expected 4, got 8");
}

TEST(Int4Import, RefusesWhatTheLayoutCannotHold) {
  // A zero point other than 8 into a layout without zeros.
  const QuantizationConfig config = Config(QuantMethod::kGptq, 32, true);
  Logical l = MakeLogical(16, 64, 32, 8, 8, Int4ScaleType::kF16);
  l.z[5] = 9;
  Checkpoint c = PackGptq(l, true);
  ExpectRefused(config, c, l, "m.qzeros: zero point 9", /*layout_zeros=*/false);
  // fp16 scales into a bf16 layout: not exact.
  Logical f = MakeLogical(16, 64, 32, 8, 8, Int4ScaleType::kF16);
  f.s[0] = kernels::FloatToF16(0.0999755859375f);
  Checkpoint d = PackGptq(f, true);
  f.scale_type = Int4ScaleType::kBf16;  // The layout's, not the tensor's.
  ExpectRefused(config, d, f, "m.scales: scale", /*layout_zeros=*/false);
  // A group that does not divide the input columns.
  const QuantizationConfig g48 = Config(QuantMethod::kGptq, 48, true);
  EXPECT_EQ(
      Int4CheckpointLayout(g48, 64, 16, Int4ScaleType::kF16).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moeserve::engine::quant
