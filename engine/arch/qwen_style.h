#ifndef MOESERVE_ENGINE_ARCH_QWEN_STYLE_H_
#define MOESERVE_ENGINE_ARCH_QWEN_STYLE_H_

// Tensor naming shared by qwen2_moe, qwen3_moe and olmoe:
// model.layers.N.mlp.gate.weight and mlp.experts.E.{gate,up,down}_proj.weight.

#include "absl/strings/str_cat.h"
#include "engine/arch/arch_util.h"
#include "engine/architecture.h"

namespace moeserve::engine::arch {

class QwenStyleMoe : public Architecture {
 public:
  ExpertTensorNames ExpertNames(int layer, int expert) const override {
    const std::string p =
        absl::StrCat(LayerPrefix(layer), "mlp.experts.", expert, ".");
    return {p + "gate_proj.weight", p + "up_proj.weight",
            p + "down_proj.weight"};
  }

  std::string RouterName(int layer) const override {
    return LayerPrefix(layer) + "mlp.gate.weight";
  }
};

}  // namespace moeserve::engine::arch

#endif  // MOESERVE_ENGINE_ARCH_QWEN_STYLE_H_
