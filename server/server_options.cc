#include "server/server_options.h"

#include <algorithm>
#include <cmath>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address the gRPC and metrics servers listen on.");
ABSL_FLAG(int, port, 50051, "gRPC port (0 picks a free one).");
ABSL_FLAG(int, metrics_port, 9400,
          "HTTP port for /metrics and /healthz (0 picks a free one).");
ABSL_FLAG(std::string, model_dir, "models/demo",
          "Hugging Face model directory (config.json, *.safetensors, "
          "tokenizer.model). Relative paths resolve against the working "
          "directory.");
ABSL_FLAG(std::string, policy, "lru",
          "Offload policy of the default engine instance.");
ABSL_FLAG(std::string, ab, "",
          "Weighted A/B split over engine instances, e.g. "
          "lru=0.5,overlap=0.5. Empty: every request without a policy goes "
          "to --policy.");
ABSL_FLAG(std::string, engines, "",
          "Engine instances, NAME=POLICY[@ratio=R|@mb=N],... each with its "
          "own offload policy and optional fast-tier budget, e.g. "
          "small=lru@ratio=0.25,big=lru@ratio=0.5. Empty: one engine per "
          "--policy / --ab name. --ab and requests refer to these names.");
ABSL_FLAG(int, drain_seconds, 30,
          "On SIGTERM/SIGINT, how long in-flight streams may run on before "
          "they are cancelled.");
ABSL_FLAG(int, max_receive_message_mb, 4,
          "Largest request message the gRPC server accepts, in MiB.");
ABSL_FLAG(int, keepalive_time_ms, 60000,
          "Interval of HTTP/2 keepalive pings the server sends.");
ABSL_FLAG(int, keepalive_timeout_ms, 20000,
          "How long the server waits for a keepalive ping's ack.");
ABSL_FLAG(std::string, backend, "cpu",
          "Compute backend: cpu, or cuda (non-expert weights, KV cache and a "
          "pool of expert slots in VRAM; experts copied from pinned host "
          "memory or disk on their own CUDA stream). cuda needs a build with "
          "the CUDA toolkit and a GPU.");
ABSL_FLAG(int, cuda_device, 0, "CUDA device ordinal (--backend=cuda).");
ABSL_FLAG(int, threads, 0, "Compute threads (0: every core).");
ABSL_FLAG(int, kv_cache_mb, 256, "Paged KV cache size per engine, MiB.");
ABSL_FLAG(int, max_num_seqs, 64, "Most sequences in one engine step.");
ABSL_FLAG(int, max_batched_tokens, 2048,
          "Most tokens (decode + prefill chunks) in one engine step.");
ABSL_FLAG(int, max_waiting, 256,
          "Most requests waiting per engine; beyond it, RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, expert_cache_ratio, 1.0,
          "Fast-tier (expert cache) budget as a share of all expert bytes, "
          "in (0, 1]. Ignored when --expert_cache_mb is set.");
ABSL_FLAG(int64_t, expert_cache_mb, 0,
          "Fast-tier (expert cache) budget in MiB per engine (0: use "
          "--expert_cache_ratio).");
ABSL_FLAG(std::string, slow_tier, "host",
          "Where every expert lives: host (RAM) or disk (the safetensors "
          "files, read with pread; O_DIRECT where the filesystem allows).");
ABSL_FLAG(double, link_gbps, 0,
          "Emulated slow-to-fast link bandwidth in GB/s (1e9 bytes/s), to "
          "reproduce a GPU's PCIe transfer/compute ratio on a CPU run. 0: "
          "off (the real copy speed).");
ABSL_FLAG(double, link_latency_us, 0,
          "Emulated per-transfer link latency in microseconds.");
ABSL_FLAG(std::string, policy_config, "",
          "Offload policy settings, k=v,k=v (e.g. top_percent=10 for "
          "lfu_static).");
ABSL_FLAG(uint32_t, max_new_tokens_cap, 512,
          "Largest max_new_tokens a request may ask for (and the default).");
ABSL_FLAG(uint32_t, max_input_tokens, 2048, "Longest prompt, in tokens.");
ABSL_FLAG(uint32_t, max_stop_strings, 16, "Most stop strings per request.");
ABSL_FLAG(uint32_t, max_stop_string_bytes, 256,
          "Longest stop string, in bytes.");

namespace moeserve::server {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", what));
}

bool IsValidEngineName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

absl::Status CheckPort(absl::string_view flag, int port) {
  if (port < 0 || port > 65535) {
    return FlagError(flag, absl::StrCat("must be in [0, 65535], got ", port));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<EngineSpec> ServerOptions::EngineSpecs() const {
  if (!engines.empty()) return engines;
  std::vector<EngineSpec> specs = {{policy, policy}};
  for (const AbArm& arm : ab) {
    if (std::none_of(specs.begin(), specs.end(), [&](const EngineSpec& s) {
          return s.name == arm.policy;
        })) {
      specs.push_back({arm.policy, arm.policy});
    }
  }
  return specs;
}

std::vector<std::string> ServerOptions::EngineNames() const {
  std::vector<std::string> names;
  for (const EngineSpec& spec : EngineSpecs()) names.push_back(spec.name);
  return names;
}

absl::StatusOr<std::vector<EngineSpec>> ParseEngineSpecs(
    absl::string_view text) {
  std::vector<EngineSpec> specs;
  if (absl::StripAsciiWhitespace(text).empty()) return specs;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> fields = absl::StrSplit(part, '@');
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(fields[0], absl::MaxSplits('=', 1));
    EngineSpec spec;
    spec.name = std::string(absl::StripAsciiWhitespace(kv.first));
    spec.policy = std::string(absl::StripAsciiWhitespace(kv.second));
    if (!IsValidEngineName(spec.name) || !IsValidEngineName(spec.policy)) {
      return FlagError("engines",
                       absl::StrCat("want NAME=POLICY with names [a-z0-9_]+, "
                                    "got '",
                                    part, "'"));
    }
    for (size_t i = 1; i < fields.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> opt =
          absl::StrSplit(fields[i], absl::MaxSplits('=', 1));
      double value = 0;
      if (!absl::SimpleAtod(opt.second, &value) || !(value > 0)) {
        return FlagError("engines",
                         absl::StrCat("bad value in '", fields[i],
                                      "' of engine '", spec.name, "'"));
      }
      if (opt.first == "ratio" && value <= 1) {
        spec.expert_cache_ratio = value;
      } else if (opt.first == "mb") {
        spec.expert_cache_mb = static_cast<int64_t>(value);
      } else {
        return FlagError(
            "engines",
            absl::StrCat("unknown option '", fields[i], "' of engine '",
                         spec.name, "' (want ratio=R in (0, 1] or mb=N)"));
      }
    }
    for (const EngineSpec& seen : specs) {
      if (seen.name == spec.name) {
        return FlagError("engines", absl::StrCat("'", spec.name, "' twice"));
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

absl::StatusOr<std::vector<AbArm>> ParseAbSplit(absl::string_view text) {
  std::vector<AbArm> arms;
  if (absl::StripAsciiWhitespace(text).empty()) return arms;
  double total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(part, absl::MaxSplits('=', 1));
    AbArm arm;
    arm.policy = std::string(absl::StripAsciiWhitespace(kv.first));
    if (!IsValidEngineName(arm.policy)) {
      return FlagError("ab", absl::StrCat("bad engine name '", arm.policy,
                                          "' (want [a-z0-9_]+)"));
    }
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(kv.second), &arm.weight) ||
        !(arm.weight > 0) || !std::isfinite(arm.weight)) {
      return FlagError(
          "ab", absl::StrCat("weight of '", arm.policy,
                             "' must be a number > 0, got '", kv.second, "'"));
    }
    for (const AbArm& seen : arms) {
      if (seen.policy == arm.policy) {
        return FlagError("ab", absl::StrCat("'", arm.policy, "' twice"));
      }
    }
    total += arm.weight;
    arms.push_back(std::move(arm));
  }
  for (AbArm& arm : arms) arm.weight /= total;
  return arms;
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (auto st = CheckPort("port", o.port); !st.ok()) return st;
  if (auto st = CheckPort("metrics_port", o.metrics_port); !st.ok()) return st;
  o.model_dir = absl::GetFlag(FLAGS_model_dir);
  o.policy = absl::GetFlag(FLAGS_policy);
  if (!IsValidEngineName(o.policy)) {
    return FlagError(
        "policy", absl::StrCat("bad name '", o.policy, "' (want [a-z0-9_]+)"));
  }
  absl::StatusOr<std::vector<AbArm>> ab = ParseAbSplit(absl::GetFlag(FLAGS_ab));
  if (!ab.ok()) return ab.status();
  o.ab = *std::move(ab);
  absl::StatusOr<std::vector<EngineSpec>> engines =
      ParseEngineSpecs(absl::GetFlag(FLAGS_engines));
  if (!engines.ok()) return engines.status();
  o.engines = *std::move(engines);
  if (!o.engines.empty()) {
    // --policy names the default engine only when it is one of them.
    const std::vector<std::string> names = o.EngineNames();
    if (std::find(names.begin(), names.end(), o.policy) == names.end()) {
      o.engines.insert(o.engines.begin(), {o.policy, o.policy});
    }
    for (const AbArm& arm : o.ab) {
      if (std::find(names.begin(), names.end(), arm.policy) == names.end()) {
        return FlagError("ab", absl::StrCat("'", arm.policy,
                                            "' is not an engine of --engines"));
      }
    }
  }
  const int drain = absl::GetFlag(FLAGS_drain_seconds);
  if (drain < 0) return FlagError("drain_seconds", "must be >= 0");
  o.drain = absl::Seconds(drain);
  const int mb = absl::GetFlag(FLAGS_max_receive_message_mb);
  if (mb < 1 || mb > 1024) {
    return FlagError("max_receive_message_mb", "must be in [1, 1024]");
  }
  o.max_receive_message_bytes = mb << 20;
  o.keepalive_time_ms = absl::GetFlag(FLAGS_keepalive_time_ms);
  o.keepalive_timeout_ms = absl::GetFlag(FLAGS_keepalive_timeout_ms);
  if (o.keepalive_time_ms < 1000 || o.keepalive_timeout_ms < 1000) {
    return FlagError("keepalive_time_ms",
                     "keepalive time and timeout must be >= 1000 ms");
  }
  o.backend = absl::GetFlag(FLAGS_backend);
  if (o.backend != "cpu" && o.backend != "cuda") {
    return FlagError(
        "backend", absl::StrCat("must be cpu or cuda, got '", o.backend, "'"));
  }
  o.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  if (o.cuda_device < 0) return FlagError("cuda_device", "must be >= 0");
  o.threads = absl::GetFlag(FLAGS_threads);
  if (o.threads < 0) return FlagError("threads", "must be >= 0");
  const int kv_mb = absl::GetFlag(FLAGS_kv_cache_mb);
  if (kv_mb < 1) return FlagError("kv_cache_mb", "must be >= 1");
  o.kv_cache_bytes = static_cast<uint64_t>(kv_mb) << 20;
  o.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  o.max_batched_tokens = absl::GetFlag(FLAGS_max_batched_tokens);
  o.max_waiting = absl::GetFlag(FLAGS_max_waiting);
  if (o.max_num_seqs < 1) return FlagError("max_num_seqs", "must be >= 1");
  if (o.max_batched_tokens < 1) {
    return FlagError("max_batched_tokens", "must be >= 1");
  }
  if (o.max_waiting < 0) return FlagError("max_waiting", "must be >= 0");
  o.expert_cache_ratio = absl::GetFlag(FLAGS_expert_cache_ratio);
  if (!(o.expert_cache_ratio > 0 && o.expert_cache_ratio <= 1)) {
    return FlagError("expert_cache_ratio", "must be in (0, 1]");
  }
  o.expert_cache_mb = absl::GetFlag(FLAGS_expert_cache_mb);
  if (o.expert_cache_mb < 0)
    return FlagError("expert_cache_mb", "must be >= 0");
  o.slow_tier = absl::GetFlag(FLAGS_slow_tier);
  if (o.slow_tier != "host" && o.slow_tier != "disk") {
    return FlagError("slow_tier", absl::StrCat("must be host or disk, got '",
                                               o.slow_tier, "'"));
  }
  o.link_gbps = absl::GetFlag(FLAGS_link_gbps);
  o.link_latency_us = absl::GetFlag(FLAGS_link_latency_us);
  if (!(o.link_gbps >= 0) || !(o.link_latency_us >= 0)) {
    return FlagError("link_gbps", "link emulation values must be >= 0");
  }
  o.policy_config = absl::GetFlag(FLAGS_policy_config);
  o.limits.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  o.limits.max_input_tokens = absl::GetFlag(FLAGS_max_input_tokens);
  o.limits.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  o.limits.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  if (o.limits.max_new_tokens_cap == 0) {
    return FlagError("max_new_tokens_cap", "must be > 0");
  }
  if (o.limits.max_input_tokens == 0) {
    return FlagError("max_input_tokens", "must be > 0");
  }
  return o;
}

}  // namespace moeserve::server
