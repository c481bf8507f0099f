// The fixed prompt set of moeserve_loadgen, compiled in so that every run
// (and every level of a run) sends the same prompts in the same order.
#ifndef MOESERVE_TOOLS_LOADGEN_PROMPTS_H_
#define MOESERVE_TOOLS_LOADGEN_PROMPTS_H_

#include <string>
#include <vector>

namespace moeserve::loadgen {

// 16 short prompts in the demo model's domain (see prompts.cc).
const std::vector<std::string>& FixedPrompts();

}  // namespace moeserve::loadgen

#endif  // MOESERVE_TOOLS_LOADGEN_PROMPTS_H_
