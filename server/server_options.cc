#include "server/server_options.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/install_paths.h"
#include "engine/builder/engine_setting_flags.h"
#include "engine/builder/engine_settings.h"
#include "engine/offload/offload_policy.h"
#include "engine/offload/policy_registry.h"
#include "server/engines_config.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address the gRPC and metrics servers listen on.");
ABSL_FLAG(int, port, 50051, "gRPC port (0 picks a free one).");
ABSL_FLAG(int, metrics_port, 9400,
          "HTTP port for /metrics and /healthz (0 picks a free one).");
ABSL_FLAG(int, http_port, 0,
          "Port of the OpenAI-compatible HTTP API (/v1/completions, "
          "/v1/chat/completions, /v1/models, /health; server/openai/"
          "README.md), with the same TLS and --auth_token_file as gRPC. "
          "0: off.");
ABSL_FLAG(std::string, http_host, "",
          "Address the OpenAI-compatible HTTP API listens on (empty: "
          "--host).");
ABSL_FLAG(int, http_head_timeout_s, 10,
          "On both HTTP ports (--http_port, --metrics_port): seconds a "
          "request's head (request line and headers; a new connection's TLS "
          "handshake) may take, from the connection's start or the previous "
          "answer, however it trickles in; then the connection is cut. 1 to "
          "3600.");
ABSL_FLAG(std::string, model_dir, "models/demo",
          "Hugging Face model directory (config.json, *.safetensors, "
          "tokenizer.model). Relative paths resolve against the working "
          "directory.");
ABSL_FLAG(std::string, policy, "",
          "Offload policy of the default engine instance (empty: lru). Not "
          "with --engines_config, whose \"default\" names that engine.");
ABSL_FLAG(std::string, ab, "",
          "Weighted A/B split over engine instances, e.g. "
          "lru=0.5,overlap=0.5. Empty: every request without a policy goes "
          "to --policy.");
ABSL_FLAG(std::string, engines, "",
          "Engine instances, NAME=POLICY[@ratio=R|@mb=N],... each with its "
          "own offload policy and optional fast-tier budget, e.g. "
          "small=lru@ratio=0.25,big=lru@ratio=0.5. Empty: one engine per "
          "--policy / --ab name. --ab and requests refer to these names.");
ABSL_FLAG(std::string, engines_config, "",
          "JSON file listing the engine instances, each with its own "
          "policy, policy_config, budget, slow tier, link and scheduler "
          "settings, and optionally the A/B split (\"ab\") and the default "
          "engine (\"default\"); see server/README.md. Keys an engine leaves "
          "out take the server-wide flags. Replaces --engines and "
          "--policy_config.");
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
ABSL_FLAG(bool, cuda_graphs, false,
          "--backend=cuda: record each decode step's dense sub-steps "
          "(attention, norms, router; between two host waits) as CUDA graphs "
          "per batch shape and replay them. Experimental: off by default.");
ABSL_FLAG(int, threads, 0,
          "Compute threads (0: every core); at most 4 per core, at most "
          "1024.");
ABSL_FLAG(std::string, policy_config, "",
          "Offload policy settings of the --policy engine only, k=v,k=v "
          "(e.g. top_percent=10 for lfu_static). Other engines: "
          "--engines_config.");
ABSL_FLAG(uint32_t, max_new_tokens_cap, 512,
          "Largest max_new_tokens a request may ask for (and the default).");
ABSL_FLAG(uint32_t, max_input_tokens, 2048, "Longest prompt, in tokens.");
ABSL_FLAG(uint64_t, max_prompt_bytes, 0,
          "Longest prompt (or Tokenize text) in bytes, refused before it is "
          "tokenized: the tokenizer's memory grows with the text. 0: 32 "
          "bytes per --max_input_tokens token (64 KiB by default).");
ABSL_FLAG(uint32_t, max_stop_strings, 16, "Most stop strings per request.");
ABSL_FLAG(uint32_t, max_stop_string_bytes, 256,
          "Longest stop string, in bytes.");

namespace moeserve::server {
namespace {

using engine::EngineSpec;
using engine::IsValidEngineName;

absl::Status FlagError(absl::string_view flag, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", what));
}

// Checks lo <= value <= hi for an integer flag.
absl::Status CheckIntRange(absl::string_view flag, int64_t value, int64_t lo,
                           int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return FlagError(
      flag, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
}

// What libmicrohttpd can bind: an IPv4 or IPv6 literal, or "localhost".
absl::Status CheckListenHost(absl::string_view flag, const std::string& host) {
  in_addr v4;
  in6_addr v6;
  if (host == "localhost" || inet_pton(AF_INET, host.c_str(), &v4) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return absl::OkStatus();
  }
  return FlagError(flag, absl::StrCat("must be an IPv4 or IPv6 address or "
                                      "localhost, got '",
                                      host, "'"));
}

absl::Status CheckPort(absl::string_view flag, int port) {
  if (port < 0 || port > 65535) {
    return FlagError(flag, absl::StrCat("must be in [0, 65535], got ", port));
  }
  return absl::OkStatus();
}

}  // namespace

int MaxThreads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::min(kMaxThreads, 4 * std::max(cores, 1));
}

std::vector<std::string> ServerOptions::EngineNames() const {
  std::vector<std::string> names;
  for (const engine::EngineSpec& spec : engines) names.push_back(spec.name);
  return names;
}

double ServerOptions::AbWeight(const std::string& engine) const {
  if (ab.empty()) return engine == default_engine().name ? 1 : 0;
  for (const AbArm& arm : ab) {
    if (arm.policy == engine) return arm.weight;
  }
  return 0;
}

absl::StatusOr<std::vector<EngineSpec>> ParseEngineSpecs(
    absl::string_view text, const EngineSpec& defaults) {
  std::vector<EngineSpec> specs;
  if (absl::StripAsciiWhitespace(text).empty()) return specs;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> fields = absl::StrSplit(part, '@');
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(fields[0], absl::MaxSplits('=', 1));
    EngineSpec spec = defaults;
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
      // An engine's own budget replaces the server-wide one whole. The
      // ranges are the settings table's.
      absl::Status st;
      if (opt.first == "ratio") {
        double ratio = 0;
        st = absl::SimpleAtod(opt.second, &ratio)
                 ? engine::SetSetting(
                       *engine::FindEngineSetting("expert_cache_ratio"), ratio,
                       &spec)
                 : absl::InvalidArgumentError("ratio must be a number");
        spec.expert_cache_mb = 0;
      } else if (opt.first == "mb") {
        // A whole number of MiB ("0.5" used to become 0, the ratio, and
        // "1e30" an undefined cast); 0, the table's "use the ratio", means
        // nothing here.
        int64_t mb = 0;
        st = absl::SimpleAtoi(opt.second, &mb) && mb != 0
                 ? engine::SetSetting(
                       *engine::FindEngineSetting("expert_cache_mb"), mb, &spec)
                 : absl::InvalidArgumentError(
                       "mb must be a whole number of MiB, at least 1");
      } else {
        return FlagError(
            "engines",
            absl::StrCat("unknown option '", fields[i], "' of engine '",
                         spec.name, "' (want ratio=R in (0, 1] or mb=N)"));
      }
      if (!st.ok()) {
        return FlagError("engines",
                         absl::StrCat("engine '", spec.name, "': '", fields[i],
                                      "': ", st.message()));
      }
    }
    for (const EngineSpec& seen : specs) {
      if (seen.name == spec.name) {
        return FlagError("engines", absl::StrCat("'", spec.name, "' twice"));
      }
    }
    specs.push_back(std::move(spec));
    if (specs.size() > kMaxEngines) {
      return FlagError("engines",
                       absl::StrCat("more than ", kMaxEngines, " engines"));
    }
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
  // Finite weights can still sum to infinity (1e308 + 1e308), and every
  // share would then be 0: refused rather than silently sending every
  // request to the last engine.
  if (!std::isfinite(total)) {
    return FlagError("ab", "weights sum to infinity; use smaller numbers");
  }
  for (AbArm& arm : arms) arm.weight /= total;
  return arms;
}

namespace {

// Prefixes `status` with where the engine came from.
absl::Status InEngine(absl::string_view source, const EngineSpec& spec,
                      const absl::Status& status) {
  return absl::Status(
      status.code(),
      absl::StrCat(source, ": engine '", spec.name, "': ", status.message()));
}

absl::Status ResolveFromFile(const EngineFlags& flags, ServerOptions* options) {
  if (!absl::StripAsciiWhitespace(flags.engines).empty()) {
    return FlagError("engines_config",
                     "give --engines or --engines_config, not both");
  }
  if (flags.policy_given) {
    return FlagError("engines_config",
                     "--policy names the default engine of the flag forms; "
                     "with --engines_config say \"default\" in the file");
  }
  if (!absl::StripAsciiWhitespace(flags.policy_config).empty()) {
    return FlagError("engines_config",
                     "--policy_config is for the --policy engine; with "
                     "--engines_config put each engine's policy_config in "
                     "the file");
  }
  absl::StatusOr<EnginesConfig> config =
      LoadEnginesConfig(flags.engines_config, flags.defaults);
  if (!config.ok()) return config.status();
  options->engines = std::move(config->engines);
  options->ab = std::move(config->ab);
  if (!absl::StripAsciiWhitespace(flags.ab).empty()) {
    if (!options->ab.empty()) {
      return FlagError("ab", absl::StrCat("the A/B split is already given by "
                                          "\"ab\" in --engines_config=",
                                          flags.engines_config));
    }
    absl::StatusOr<std::vector<AbArm>> ab = ParseAbSplit(flags.ab);
    if (!ab.ok()) return ab.status();
    options->ab = *std::move(ab);
    const std::vector<std::string> names = options->EngineNames();
    for (const AbArm& arm : options->ab) {
      if (std::find(names.begin(), names.end(), arm.policy) == names.end()) {
        return FlagError("ab", absl::StrCat("'", arm.policy,
                                            "' is not an engine of "
                                            "--engines_config=",
                                            flags.engines_config));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveFromFlags(const EngineFlags& flags,
                              ServerOptions* options) {
  if (!IsValidEngineName(flags.policy)) {
    return FlagError("policy", absl::StrCat("bad name '", flags.policy,
                                            "' (want [a-z0-9_]+)"));
  }
  absl::StatusOr<std::vector<AbArm>> ab = ParseAbSplit(flags.ab);
  if (!ab.ok()) return ab.status();
  options->ab = *std::move(ab);
  absl::StatusOr<std::vector<EngineSpec>> engines =
      ParseEngineSpecs(flags.engines, flags.defaults);
  if (!engines.ok()) return engines.status();
  const bool explicit_engines = !engines->empty();
  options->engines = *std::move(engines);
  auto named = [options](const std::string& name) {
    return std::find_if(
        options->engines.begin(), options->engines.end(),
        [&name](const EngineSpec& s) { return s.name == name; });
  };
  // The --policy engine comes first (the default); without --engines every
  // --ab arm is an engine named after its policy. With --engines, --policy
  // (when given) must name one of them: adding it would serve an engine
  // that --engines does not list; without --policy the first one is the
  // default.
  if (explicit_engines && !flags.policy_given) {
    // The first --engines engine is the default.
  } else if (auto it = named(flags.policy); it != options->engines.end()) {
    std::rotate(options->engines.begin(), it, it + 1);
  } else if (explicit_engines) {
    return FlagError("policy", absl::StrCat("'", flags.policy,
                                            "' is not an engine of --engines "
                                            "(names the default engine)"));
  } else {
    EngineSpec spec = flags.defaults;
    spec.name = spec.policy = flags.policy;
    options->engines.insert(options->engines.begin(), std::move(spec));
  }
  for (const AbArm& arm : options->ab) {
    if (named(arm.policy) != options->engines.end()) continue;
    if (explicit_engines) {
      return FlagError("ab", absl::StrCat("'", arm.policy,
                                          "' is not an engine of --engines"));
    }
    EngineSpec spec = flags.defaults;
    spec.name = spec.policy = arm.policy;
    options->engines.push_back(std::move(spec));
  }
  if (options->engines.size() > kMaxEngines) {
    return FlagError("ab", absl::StrCat("more than ", kMaxEngines, " engines"));
  }
  absl::StatusOr<engine::PolicyConfig> config =
      engine::ParsePolicyConfig(flags.policy_config);
  if (!config.ok()) {
    return FlagError("policy_config", config.status().message());
  }
  options->engines.front().policy_config = *std::move(config);
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveEngines(const EngineFlags& flags, ServerOptions* options) {
  options->engines_config = flags.engines_config;
  // The server-wide per-engine settings first, so that a bad one is refused
  // by its flag's name (not as some engine's setting): CheckEngineSpec's
  // field names are the flags' names (engine/builder/engine_settings.h).
  // Name, policy and policy_config are no such flags: EngineSpec's own.
  EngineSpec settings = flags.defaults;
  settings.name = EngineSpec().name;
  settings.policy = EngineSpec().policy;
  settings.policy_config.clear();
  if (absl::Status st = engine::CheckEngineSpec(settings); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--", st.message()));
  }
  std::string source;
  if (!flags.engines_config.empty()) {
    // The file's engines were checked as they were read.
    if (absl::Status st = ResolveFromFile(flags, options); !st.ok()) return st;
    source = absl::StrCat("--engines_config=", flags.engines_config);
  } else {
    if (absl::Status st = ResolveFromFlags(flags, options); !st.ok()) {
      return st;
    }
    for (const EngineSpec& spec : options->engines) {
      if (absl::Status st = engine::CheckEngineSpec(spec); !st.ok()) {
        return InEngine(spec.policy_config.empty() ? "--policy/--ab/--engines"
                                                   : "--policy/--policy_config",
                        spec, st);
      }
    }
    source = "--policy/--ab/--engines";
  }
  for (EngineSpec& spec : options->engines) {
    if (absl::Status st = engine::ResolveSpeculation(&spec); !st.ok()) {
      return InEngine(source, spec, st);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (auto st = CheckPort("port", o.port); !st.ok()) return st;
  if (auto st = CheckPort("metrics_port", o.metrics_port); !st.ok()) return st;
  o.http_port = absl::GetFlag(FLAGS_http_port);
  if (auto st = CheckPort("http_port", o.http_port); !st.ok()) return st;
  o.http_host = absl::GetFlag(FLAGS_http_host);
  if (o.http_host.empty()) o.http_host = o.host;
  o.http_head_timeout_s = absl::GetFlag(FLAGS_http_head_timeout_s);
  if (auto st =
          CheckIntRange("http_head_timeout_s", o.http_head_timeout_s, 1, 3600);
      !st.ok()) {
    return st;
  }
  if (o.http_port != 0) {
    if (auto st = CheckListenHost("http_host", o.http_host); !st.ok()) {
      return st;
    }
  }
  // Relative defaults also work for an installed binary run from anywhere.
  o.model_dir = base::ResolveDataPath(absl::GetFlag(FLAGS_model_dir));
  const int drain = absl::GetFlag(FLAGS_drain_seconds);
  if (auto st = CheckIntRange("drain_seconds", drain, 0, kMaxDrainSeconds);
      !st.ok()) {
    return st;
  }
  o.drain = absl::Seconds(drain);
  const int mb = absl::GetFlag(FLAGS_max_receive_message_mb);
  if (mb < 1 || mb > 1024) {
    return FlagError("max_receive_message_mb", "must be in [1, 1024]");
  }
  o.max_receive_message_bytes = mb << 20;
  o.keepalive_time_ms = absl::GetFlag(FLAGS_keepalive_time_ms);
  o.keepalive_timeout_ms = absl::GetFlag(FLAGS_keepalive_timeout_ms);
  constexpr int kDay = 24 * 3600 * 1000;
  if (auto st =
          CheckIntRange("keepalive_time_ms", o.keepalive_time_ms, 1000, kDay);
      !st.ok()) {
    return st;
  }
  if (auto st = CheckIntRange("keepalive_timeout_ms", o.keepalive_timeout_ms,
                              1000, kDay);
      !st.ok()) {
    return st;
  }
  o.backend = absl::GetFlag(FLAGS_backend);
  if (o.backend != "cpu" && o.backend != "cuda") {
    return FlagError(
        "backend", absl::StrCat("must be cpu or cuda, got '", o.backend, "'"));
  }
  o.cuda_device = absl::GetFlag(FLAGS_cuda_device);
  o.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  if (auto st = CheckIntRange("cuda_device", o.cuda_device, 0, 1023);
      !st.ok()) {
    return st;
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  if (o.threads < 0 || o.threads > MaxThreads()) {
    return FlagError(
        "threads",
        absl::StrCat("must be in [0, ", MaxThreads(), "], got ", o.threads,
                     " (0: every core; at most 4 per core)"));
  }

  // The server-wide per-engine settings (engine/builder/engine_settings.h):
  // every engine's defaults, each checked by its flag's name.
  EngineFlags flags;
  if (absl::Status st = engine::EngineSettingsFromFlags(&flags.defaults);
      !st.ok()) {
    return st;
  }
  flags.defaults.draft_model_dir =
      base::ResolveDataPath(flags.defaults.draft_model_dir);
  flags.policy = absl::GetFlag(FLAGS_policy);
  flags.policy_given = !flags.policy.empty();
  if (flags.policy.empty()) flags.policy = "lru";
  flags.policy_config = absl::GetFlag(FLAGS_policy_config);
  flags.ab = absl::GetFlag(FLAGS_ab);
  flags.engines = absl::GetFlag(FLAGS_engines);
  flags.engines_config = absl::GetFlag(FLAGS_engines_config);
  if (absl::Status st = ResolveEngines(flags, &o); !st.ok()) return st;

  o.limits.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  o.limits.max_input_tokens = absl::GetFlag(FLAGS_max_input_tokens);
  o.limits.max_stop_strings = absl::GetFlag(FLAGS_max_stop_strings);
  o.limits.max_stop_string_bytes = absl::GetFlag(FLAGS_max_stop_string_bytes);
  if (auto st = CheckIntRange("max_new_tokens_cap", o.limits.max_new_tokens_cap,
                              1, kMaxTokensFlag);
      !st.ok()) {
    return st;
  }
  if (auto st = CheckIntRange("max_input_tokens", o.limits.max_input_tokens, 1,
                              kMaxTokensFlag);
      !st.ok()) {
    return st;
  }
  if (auto st =
          CheckIntRange("max_stop_strings", o.limits.max_stop_strings, 0, 1024);
      !st.ok()) {
    return st;
  }
  if (auto st = CheckIntRange("max_stop_string_bytes",
                              o.limits.max_stop_string_bytes, 1, 1 << 16);
      !st.ok()) {
    return st;
  }
  const uint64_t prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  if (auto st = CheckIntRange("max_prompt_bytes",
                              static_cast<int64_t>(std::min<uint64_t>(
                                  prompt_bytes, uint64_t{1} << 40)),
                              0, kMaxPromptBytesFlag);
      !st.ok()) {
    return st;
  }
  o.limits.max_prompt_bytes =
      prompt_bytes > 0 ? prompt_bytes
                       : DefaultMaxPromptBytes(o.limits.max_input_tokens);
  return o;
}

}  // namespace moeserve::server
