#include "engine/spec_decode/int4_drafter.h"

#include <utility>

#include "base/status_macros.h"
#include "engine/spec_decode/drafter_registry.h"

namespace moeserve::engine::spec_decode {

absl::StatusOr<std::unique_ptr<Drafter>> Int4Drafter::Create(
    const DrafterContext& context) {
  if (context.weights == nullptr || context.target == nullptr ||
      context.kv == nullptr || context.backend == nullptr) {
    return absl::InvalidArgumentError(
        "int4 drafter: needs the target model, its KV cache and backend");
  }
  MOESERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<QuantizedExperts> experts,
      QuantizedExperts::Create(*context.weights, context.backend));
  return std::unique_ptr<Drafter>(new Int4Drafter(context, std::move(experts)));
}

Int4Drafter::Int4Drafter(const DrafterContext& context,
                         std::unique_ptr<QuantizedExperts> experts)
    // The base class keeps the pointer; the object it points to is owned
    // here and lives as long as the drafter.
    : ModelDrafter(context, experts.get()), experts_(std::move(experts)) {}

// Its pool of int4 experts lives in fast memory.
MOESERVE_REGISTER_DRAFTER("int4", Int4Drafter::Create,
                          {.fast_memory_bytes = QuantizedExperts::BytesFor});

}  // namespace moeserve::engine::spec_decode
