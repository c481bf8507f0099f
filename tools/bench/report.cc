#include "tools/bench/report.h"

#include <string>

#include "absl/strings/str_format.h"

namespace moeserve::bench {
namespace {

using nlohmann::json;

std::string Shape(const ModelReport& m) {
  std::string s = absl::StrFormat(
      "%s L%d h%d heads%d/%d vocab%d E%d top%d ffn%d", m.model_type, m.layers,
      m.hidden, m.heads, m.kv_heads, m.vocab, m.experts, m.top_k, m.expert_ffn);
  if (m.shared_expert_ffn > 0) {
    s += absl::StrFormat(" shared%d", m.shared_expert_ffn);
  }
  return s;
}

double RooflineRatio(const Measurement& r, double bandwidth_gbps) {
  return bandwidth_gbps > 0 ? r.weight_gbps / bandwidth_gbps : 0;
}

double RooflineTokensPerS(const Measurement& r, double bandwidth_gbps) {
  return r.weight_bytes_per_token > 0
             ? bandwidth_gbps * 1e9 / r.weight_bytes_per_token
             : 0;
}

json MeasurementJson(const Measurement& r, double bw) {
  return json{{"phase", r.phase},
              {"batch", r.batch},
              {"tokens", r.tokens},
              {"forward_passes", r.forward_passes},
              {"seconds", r.seconds},
              {"tokens_per_s", r.tokens_per_s},
              {"weight_bytes_per_pass", r.weight_bytes_per_pass},
              {"weight_bytes_per_token", r.weight_bytes_per_token},
              {"weight_gbps", r.weight_gbps},
              {"roofline_ratio", RooflineRatio(r, bw)},
              {"roofline_tokens_per_s", RooflineTokensPerS(r, bw)},
              {"experts_per_pass", r.experts_per_pass},
              {"repeats", r.repeats},
              {"tokens_per_s_min", r.tokens_per_s_min},
              {"tokens_per_s_max", r.tokens_per_s_max}};
}

json ModelJson(const ModelReport& m, double bw) {
  json results = json::array();
  for (const Measurement& r : m.results) {
    results.push_back(MeasurementJson(r, bw));
  }
  return json{{"name", m.name},
              {"dir", m.dir},
              {"shape",
               {{"model_type", m.model_type},
                {"layers", m.layers},
                {"hidden", m.hidden},
                {"heads", m.heads},
                {"kv_heads", m.kv_heads},
                {"vocab", m.vocab},
                {"experts", m.experts},
                {"top_k", m.top_k},
                {"expert_ffn", m.expert_ffn},
                {"shared_expert_ffn", m.shared_expert_ffn}}},
              {"non_expert_bytes", m.non_expert_bytes},
              {"expert_bytes", m.expert_bytes},
              {"load_seconds", m.load_seconds},
              {"results", results}};
}

}  // namespace

void PrintReport(const RunReport& rep, std::FILE* out) {
  const MachineInfo& mc = rep.machine;
  absl::FPrintF(out, "\nmachine: %s, %d logical CPUs, %.1f GiB, %s\n",
                mc.cpu_model, mc.logical_cpus,
                static_cast<double>(mc.memory_bytes) / (1 << 30), mc.simd);
  absl::FPrintF(out,
                "threads: %d   memory read bandwidth (roofline): %.2f GB/s "
                "(best of runs over %d MiB)\n",
                rep.threads, rep.bandwidth_gbps, rep.bandwidth_bytes >> 20);
  absl::FPrintF(out,
                "prompt_len %d, decode_steps %d; each phase repeated until "
                "%.1f s (at most %d times); the median repeat is shown, "
                "[min-max] tok/s of the repeats beside it\n\n",
                rep.options.prompt_len, rep.options.decode_steps,
                rep.options.min_phase_seconds, rep.options.max_repeats);
  absl::FPrintF(out, "%-32s %-8s %5s %10s %21s %11s %8s %7s %12s %8s\n",
                "model", "phase", "batch", "tok/s", "[min-max]", "MB/token",
                "GB/s", "of_roof", "roof_tok/s", "experts");
  for (const ModelReport& m : rep.models) {
    for (const Measurement& r : m.results) {
      absl::FPrintF(
          out, "%-32s %-8s %5d %10.1f %21s %11.2f %8.2f %6.1f%% %12.1f %8.1f\n",
          m.name, r.phase, r.batch, r.tokens_per_s,
          absl::StrFormat("[%.1f-%.1f]", r.tokens_per_s_min,
                          r.tokens_per_s_max),
          r.weight_bytes_per_token / 1e6, r.weight_gbps,
          100 * RooflineRatio(r, rep.bandwidth_gbps),
          RooflineTokensPerS(r, rep.bandwidth_gbps), r.experts_per_pass);
    }
  }
  absl::FPrintF(out, "\nshapes:\n");
  for (const ModelReport& m : rep.models) {
    absl::FPrintF(out,
                  "  %-30s %s; weights %.1f MB non-expert + %.1f MB experts; "
                  "load %.1f s\n",
                  m.name, Shape(m), m.non_expert_bytes / 1e6,
                  m.expert_bytes / 1e6, m.load_seconds);
  }
  absl::FPrintF(out,
                "\nMB/token: weight bytes read per forward pass / tokens in "
                "it (decode: non-expert weights + embedding rows + distinct "
                "routed experts).\nof_roof: achieved weight GB/s / measured "
                "read bandwidth. roof_tok/s: read bandwidth / (bytes/token). "
                "experts: distinct (layer, expert) per forward pass.\n");
}

json ReportJson(const RunReport& rep) {
  json models = json::array();
  for (const ModelReport& m : rep.models) {
    models.push_back(ModelJson(m, rep.bandwidth_gbps));
  }
  return json{{"machine",
               {{"cpu_model", rep.machine.cpu_model},
                {"logical_cpus", rep.machine.logical_cpus},
                {"memory_bytes", rep.machine.memory_bytes},
                {"simd", rep.machine.simd}}},
              {"threads", rep.threads},
              {"memory_bandwidth_gbps", rep.bandwidth_gbps},
              {"bandwidth_probe_bytes", rep.bandwidth_bytes},
              {"prompt_len", rep.options.prompt_len},
              {"decode_steps", rep.options.decode_steps},
              {"min_phase_seconds", rep.options.min_phase_seconds},
              {"models", models}};
}

}  // namespace moeserve::bench
