// Int4Drafter ("int4", seed 001 §3.4, MoE-SpeQ): the target model with every
// expert replaced by its int4 copy (QuantizedExperts), sharing the target's
// non-expert weights and its KV cache. Sharing the cache is exact for the
// target: the draft writes keys and values at the draft positions only,
// and the verify pass overwrites every one of them before anything reads
// it; the draft's own attention over earlier positions reads the target's
// keys and values, as the seed's draft does. Its routing is the target's
// router on the draft's hidden state, so its lookahead (per position and
// layer, the experts it routed to) predicts the target's experts; nothing
// is remapped.
//
// Owns its QuantizedExperts; borrows everything in DrafterContext.
#ifndef MOESERVE_ENGINE_SPEC_DECODE_INT4_DRAFTER_H_
#define MOESERVE_ENGINE_SPEC_DECODE_INT4_DRAFTER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/spec_decode/model_drafter.h"
#include "engine/spec_decode/quantized_experts.h"

namespace moeserve::engine::spec_decode {

class Int4Drafter final : public ModelDrafter {
 public:
  static absl::StatusOr<std::unique_ptr<Drafter>> Create(
      const DrafterContext& context);

  std::string_view name() const override { return "int4"; }
  const QuantizedExperts& experts() const { return *experts_; }

 private:
  Int4Drafter(const DrafterContext& context,
              std::unique_ptr<QuantizedExperts> experts);

  const std::unique_ptr<QuantizedExperts> experts_;
};

}  // namespace moeserve::engine::spec_decode

#endif  // MOESERVE_ENGINE_SPEC_DECODE_INT4_DRAFTER_H_
