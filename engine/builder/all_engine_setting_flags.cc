// A flag for every engine setting (engine_settings.h), for binaries that
// take them all (moeserve): //engine/builder:all_engine_setting_flags.
#include <cstdint>
#include <string>

#include "engine/builder/engine_setting_flags.h"

// One flag per row of engine_settings.h, in its order.
MOESERVE_ENGINE_SETTING_FLAG(double, expert_cache_ratio);
MOESERVE_ENGINE_SETTING_FLAG(int64_t, expert_cache_mb);
MOESERVE_ENGINE_SETTING_FLAG(std::string, slow_tier);
MOESERVE_ENGINE_SETTING_FLAG(double, link_gbps);
MOESERVE_ENGINE_SETTING_FLAG(double, link_latency_us);
MOESERVE_ENGINE_SETTING_FLAG(double, inplace_compute_ratio);
MOESERVE_ENGINE_SETTING_FLAG(int, kv_cache_mb);
MOESERVE_ENGINE_SETTING_FLAG(int, max_num_seqs);
MOESERVE_ENGINE_SETTING_FLAG(int, max_batched_tokens);
MOESERVE_ENGINE_SETTING_FLAG(int, max_waiting);
MOESERVE_ENGINE_SETTING_FLAG(int, max_running_per_caller);
MOESERVE_ENGINE_SETTING_FLAG(int, max_waiting_per_caller);
MOESERVE_ENGINE_SETTING_FLAG(std::string, drafter);
MOESERVE_ENGINE_SETTING_FLAG(int, num_speculative_tokens);
MOESERVE_ENGINE_SETTING_FLAG(std::string, draft_model_dir);
MOESERVE_ENGINE_SETTING_FLAG(int, cpu_moe_layers);
MOESERVE_ENGINE_SETTING_FLAG(int, host_expert_threads);
MOESERVE_ENGINE_SETTING_FLAG(int, host_attention);
MOESERVE_ENGINE_SETTING_FLAG(std::string, draft_budget);
