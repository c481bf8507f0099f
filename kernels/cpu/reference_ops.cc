#include "kernels/cpu/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/op_checks.h"

namespace moeserve::kernels::cpu::ref {
namespace {

double W(const bf16* p, int64_t i) { return Bf16ToFloat(p[i]); }
double Sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

}  // namespace

void Embedding(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t d = table.dim(1);
  for (int64_t i = 0; i < ids.dim(0); ++i) {
    for (int64_t j = 0; j < d; ++j) {
      out.data<float>()[i * d + j] =
          Bf16ToFloat(table.data<bf16>()[ids.data<int32_t>()[i] * d + j]);
    }
  }
}

void RmsNorm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  const int64_t n = x.dim(0), d = x.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x.data<float>() + i * d;
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double{xi[j]} * xi[j];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) {
      out.data<float>()[i * d + j] =
          static_cast<float>(W(w.data<bf16>(), j) * (xi[j] * inv));
    }
  }
}

void MatMul(const Tensor& x, const Tensor& w, const Tensor& bias,
            const Tensor& out) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias.valid() ? W(bias.data<bf16>(), j) : 0.0;
      for (int64_t i = 0; i < k; ++i) {
        acc +=
            double{x.data<float>()[r * k + i]} * W(w.data<bf16>(), j * k + i);
      }
      out.data<float>()[r * n + j] = static_cast<float>(acc);
    }
  }
}

void RopeRotateHalf(const Tensor& x, const Tensor& positions, float theta) {
  const int64_t n = x.dim(0), heads = x.dim(1), hd = x.dim(2), half = hd / 2;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data<float>() + (t * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        // The angle is rounded to fp32 exactly as HF does; the rotation is
        // then done in double.
        const float angle = static_cast<float>(positions.data<int32_t>()[t]) *
                            RopeInvFreq(theta, i, hd);
        const double c = std::cos(double{angle}), s = std::sin(double{angle});
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * c - b * s);
        v[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

void KvWrite(const Tensor& k, const Tensor& v, const Tensor& slot_mapping,
             const PagedKvCache& cache) {
  const int64_t row = k.dim(1) * k.dim(2);
  for (int64_t i = 0; i < k.dim(0); ++i) {
    const int64_t slot = slot_mapping.data<int32_t>()[i];
    if (slot < 0) continue;
    for (int64_t j = 0; j < row; ++j) {
      cache.k_pool.data<float>()[slot * row + j] = k.data<float>()[i * row + j];
      cache.v_pool.data<float>()[slot * row + j] = v.data<float>()[i * row + j];
    }
  }
}

void Attention(const Tensor& q, const PagedKvCache& cache,
               const AttentionBatch& batch, const Tensor& out) {
  const int64_t bs = cache.k_pool.dim(1), kvh = cache.k_pool.dim(2);
  const int64_t hd = cache.k_pool.dim(3), heads = q.dim(1);
  const int64_t max_blocks = batch.block_tables.dim(1);
  const int32_t* qs = batch.query_start.data<int32_t>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // Address of cache row (sequence s, position p, kv head g).
  auto row = [&](const Tensor& pool, int64_t s, int64_t p, int64_t g) {
    const int64_t block =
        batch.block_tables.data<int32_t>()[s * max_blocks + p / bs];
    return pool.data<float>() + ((block * bs + p % bs) * kvh + g) * hd;
  };
  for (int64_t s = 0; s + 1 < batch.query_start.dim(0); ++s) {
    for (int64_t r = qs[s]; r < qs[s + 1]; ++r) {
      const int64_t pos = batch.positions.data<int32_t>()[r];
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t g = h / (heads / kvh);
        const float* qv = q.data<float>() + (r * heads + h) * hd;
        std::vector<double> score(pos + 1);
        double mx = -INFINITY;
        for (int64_t p = 0; p <= pos; ++p) {
          const float* kv = row(cache.k_pool, s, p, g);
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += double{qv[d]} * kv[d];
          score[p] = dot * scale;
          mx = std::max(mx, score[p]);
        }
        double sum = 0;
        for (double& e : score) sum += (e = std::exp(e - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (int64_t p = 0; p <= pos; ++p) {
            acc += score[p] * row(cache.v_pool, s, p, g)[d];
          }
          out.data<float>()[(r * heads + h) * hd + d] =
              static_cast<float>(acc / sum);
        }
      }
    }
  }
}

void RouterTopK(const Tensor& logits, int k, bool normalize,
                const Tensor& weights, const Tensor& ids) {
  const int64_t n = logits.dim(0), e = logits.dim(1);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits.data<float>() + t * e;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < e; ++j) mx = std::max(mx, double{l[j]});
    std::vector<double> p(e);
    for (int64_t j = 0; j < e; ++j) sum += (p[j] = std::exp(l[j] - mx));
    std::vector<bool> taken(e, false);
    double picked = 0;
    for (int s = 0; s < k; ++s) {
      int64_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        if (!taken[j] && (best < 0 || p[j] > p[best])) best = j;
      }
      taken[best] = true;
      ids.data<int32_t>()[t * k + s] = static_cast<int32_t>(best);
      weights.data<float>()[t * k + s] = static_cast<float>(p[best] / sum);
      picked += p[best] / sum;
    }
    if (!normalize) continue;
    for (int s = 0; s < k; ++s) {
      const int64_t j = ids.data<int32_t>()[t * k + s];
      weights.data<float>()[t * k + s] =
          static_cast<float>(p[j] / sum / picked);
    }
  }
}

void SiluMul(const Tensor& gate, const Tensor& up, const Tensor& out) {
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const double g = gate.data<float>()[i];
    out.data<float>()[i] =
        static_cast<float>(g * Sigmoid(g) * up.data<float>()[i]);
  }
}

void Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    out.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
  }
}

void GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  const int64_t d = x.dim(1);
  for (int64_t i = 0; i < rows.dim(0); ++i) {
    for (int64_t j = 0; j < d; ++j) {
      out.data<float>()[i * d + j] =
          x.data<float>()[rows.data<int32_t>()[i] * d + j];
    }
  }
}

void ScaleAddRows(const Tensor& x, const Tensor& rows, const Tensor& weights,
                  const Tensor& y) {
  const int64_t d = x.dim(1);
  for (int64_t i = 0; i < x.dim(0); ++i) {
    const int64_t dst = rows.valid() ? rows.data<int32_t>()[i] : i;
    for (int64_t j = 0; j < d; ++j) {
      y.data<float>()[dst * d + j] += static_cast<float>(
          double{weights.data<float>()[i]} * x.data<float>()[i * d + j]);
    }
  }
}

void SigmoidGatedAdd(const Tensor& x, const Tensor& gate, const Tensor& y) {
  const int64_t d = x.dim(1);
  for (int64_t i = 0; i < x.dim(0); ++i) {
    const double s = Sigmoid(gate.data<float>()[i]);
    for (int64_t j = 0; j < d; ++j) {
      y.data<float>()[i * d + j] +=
          static_cast<float>(s * x.data<float>()[i * d + j]);
    }
  }
}

void ExpertFfn(const Tensor& x, const Tensor& blob, int64_t ffn,
               const Tensor& out) {
  const int64_t m = x.dim(0), hidden = x.dim(1);
  bf16* w = blob.data<bf16>();
  std::vector<float> gate(m * ffn), up(m * ffn), act(m * ffn);
  const Tensor none;
  MatMul(x, Tensor(w, DType::kBF16, {ffn, hidden}), none,
         Tensor(gate.data(), DType::kF32, {m, ffn}));
  MatMul(x, Tensor(w + ffn * hidden, DType::kBF16, {ffn, hidden}), none,
         Tensor(up.data(), DType::kF32, {m, ffn}));
  SiluMul(Tensor(gate.data(), DType::kF32, {m, ffn}),
          Tensor(up.data(), DType::kF32, {m, ffn}),
          Tensor(act.data(), DType::kF32, {m, ffn}));
  MatMul(Tensor(act.data(), DType::kF32, {m, ffn}),
         Tensor(w + 2 * ffn * hidden, DType::kBF16, {hidden, ffn}), none, out);
}

void ExpertFfnInt4(const Tensor& x, const Tensor& blob,
                   const Int4ExpertLayout& layout, const Tensor& out) {
  const int64_t m = x.dim(0), ffn = layout.ffn;
  const auto* expert = static_cast<const std::byte*>(blob.raw());
  const Int4Matrix gate = Int4ExpertPart(expert, layout, Int4Part::kGate);
  const Int4Matrix up = Int4ExpertPart(expert, layout, Int4Part::kUp);
  const Int4Matrix down = Int4ExpertPart(expert, layout, Int4Part::kDown);
  // out[r, j] = sum_c in[r, c] * w(j, c), double accumulation.
  auto product = [](const float* in, int64_t rows, const Int4Matrix& w,
                    float* res) {
    for (int64_t j = 0; j < w.rows; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < w.cols; ++c) {
          acc += double{in[r * w.cols + c]} * Int4At(w, j, c);
        }
        res[r * w.rows + j] = static_cast<float>(acc);
      }
    }
  };
  std::vector<float> g(m * ffn), u(m * ffn), act(m * ffn);
  product(x.data<float>(), m, gate, g.data());
  product(x.data<float>(), m, up, u.data());
  SiluMul(Tensor(g.data(), DType::kF32, {m, ffn}),
          Tensor(u.data(), DType::kF32, {m, ffn}),
          Tensor(act.data(), DType::kF32, {m, ffn}));
  product(act.data(), m, down, out.data<float>());
}

void ExpertFfnFp8(const Tensor& x, const Tensor& blob,
                  const Fp8ExpertLayout& layout, const Tensor& out) {
  const int64_t m = x.dim(0), ffn = layout.ffn;
  const auto* expert = static_cast<const std::byte*>(blob.raw());
  const Fp8Matrix gate = Fp8ExpertPart(expert, layout, Fp8Part::kGate);
  const Fp8Matrix up = Fp8ExpertPart(expert, layout, Fp8Part::kUp);
  const Fp8Matrix down = Fp8ExpertPart(expert, layout, Fp8Part::kDown);
  // out[r, j] = sum_c in[r, c] * w(j, c), double accumulation.
  auto product = [](const float* in, int64_t rows, const Fp8Matrix& w,
                    float* res) {
    for (int64_t j = 0; j < w.rows; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < w.cols; ++c) {
          acc += double{in[r * w.cols + c]} * Fp8At(w, j, c);
        }
        res[r * w.rows + j] = static_cast<float>(acc);
      }
    }
  };
  std::vector<float> g(m * ffn), u(m * ffn), act(m * ffn);
  product(x.data<float>(), m, gate, g.data());
  product(x.data<float>(), m, up, u.data());
  SiluMul(Tensor(g.data(), DType::kF32, {m, ffn}),
          Tensor(u.data(), DType::kF32, {m, ffn}),
          Tensor(act.data(), DType::kF32, {m, ffn}));
  product(act.data(), m, down, out.data<float>());
}

void Softmax(const Tensor& x, const Tensor& out) {
  const int64_t n = x.dim(0), v = x.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x.data<float>() + i * v;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, double{xi[j]});
    std::vector<double> e(v);
    for (int64_t j = 0; j < v; ++j) sum += (e[j] = std::exp(xi[j] - mx));
    for (int64_t j = 0; j < v; ++j) {
      out.data<float>()[i * v + j] = static_cast<float>(e[j] / sum);
    }
  }
}

void Argmax(const Tensor& x, const Tensor& out) {
  const int64_t n = x.dim(0), v = x.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < v; ++j) {
      if (x.data<float>()[i * v + j] > x.data<float>()[i * v + best]) best = j;
    }
    out.data<int32_t>()[i] = static_cast<int32_t>(best);
  }
}

absl::Status QuantizeInt4(const Tensor& w, int64_t group, const Tensor& wq,
                          const Tensor& scales) {
  constexpr char kOp[] = "QuantizeInt4";
  const DType wt =
      w.valid() && w.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32;
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, w, "w", Device::kCpu, wt, {kAnyDim, kAnyDim}));
  const int64_t n = w.dim(0), k = w.dim(1);
  if (group <= 0 || group % 2 != 0 || k % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": group ", group, " must be even, > 0 and divide k ", k));
  }
  MOESERVE_RETURN_IF_ERROR(
      CheckOperand(kOp, wq, "wq", Device::kCpu, DType::kI4, {n, k}));
  MOESERVE_RETURN_IF_ERROR(CheckOperand(kOp, scales, "scales", Device::kCpu,
                                        DType::kBF16, {n, k / group}));
  auto value = [&](int64_t i) -> double {
    return wt == DType::kBF16 ? Bf16ToFloat(w.data<bf16>()[i])
                              : w.data<float>()[i];
  };
  auto* bytes = static_cast<uint8_t*>(wq.raw());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < k / group; ++g) {
      const int64_t c0 = r * k + g * group;
      double absmax = 0;
      for (int64_t c = 0; c < group; ++c) {
        absmax = std::max(absmax, std::fabs(value(c0 + c)));
      }
      // Quantize against the bf16-rounded scale: what dequantisation uses.
      const bf16 s = FloatToBf16(static_cast<float>(absmax / 7));
      scales.data<bf16>()[r * (k / group) + g] = s;
      const double scale = Bf16ToFloat(s);
      for (int64_t c = 0; c < group; c += 2) {
        uint8_t byte = 0;
        for (int64_t h = 0; h < 2; ++h) {
          const double q =
              scale > 0
                  ? std::clamp(std::round(value(c0 + c + h) / scale), -8.0, 7.0)
                  : 0.0;
          byte |= static_cast<uint8_t>(static_cast<int>(q) + 8) << (4 * h);
        }
        bytes[(c0 + c) / 2] = byte;
      }
    }
  }
  return absl::OkStatus();
}

float Int4Weight(const Tensor& wq, const Tensor& scales, int64_t group,
                 int64_t row, int64_t col) {
  const int64_t k = wq.dim(1);
  const uint8_t byte =
      static_cast<const uint8_t*>(wq.raw())[(row * k + col) / 2];
  const int q = (col % 2 == 0 ? byte & 0xf : byte >> 4) - 8;
  return static_cast<float>(q) *
         Bf16ToFloat(scales.data<bf16>()[row * (k / group) + col / group]);
}

void MatMulInt4Reference(const Tensor& x, const Tensor& wq,
                         const Tensor& scales, int64_t group,
                         const Tensor& out) {
  const int64_t m = x.dim(0), k = x.dim(1), n = wq.dim(0);
  std::vector<double> row(k);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < k; ++c)
      row[c] = Int4Weight(wq, scales, group, j, c);
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) {
        acc += double{x.data<float>()[r * k + c]} * row[c];
      }
      out.data<float>()[r * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace moeserve::kernels::cpu::ref
