// Runs moeserve_bench's policy mode with tiny settings and checks the JSON
// report: on models/demo (text prompts; 2 requests x 4 tokens, 2 policies,
// one ratio, link emulation on), with a drafter axis (speculative decoding
// cells: the speculation columns and accepted <= drafted; the int4 drafter
// with both draft budgets and the Belady oracle), the closing summary of
// speculative policies against lru and lru + the same drafter, on a generated
// random-weight model without tokenizer (synthetic prompts; in memory and
// written to disk give the same tokens), and
// --backend=cuda (a clear error without a
// GPU; a report from the CUDA backend with one). Not a performance test: no
// figure is compared with a threshold.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

std::string Runfile(const std::string& path) {
  return std::string(getenv("TEST_SRCDIR")) + "/moeserve/" + path;
}

std::string TmpFile(const std::string& name) {
  return std::string(getenv("TEST_TMPDIR")) + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs moeserve_bench with `flags` plus --json_out into the test's temp dir
// under `json_name`, and parses its JSON report into `out`.
void RunBench(const std::string& flags, const std::string& json_name,
              nlohmann::json* out) {
  const std::string json_path = TmpFile(json_name);
  const std::string cmd = Runfile("tools/bench/moeserve_bench") + flags +
                          " --json_out=" + json_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  *out = nlohmann::json::parse(ReadFile(json_path));
}

// Belady's MIN bounds every demand-caching policy on its own access trace:
// lru and on_demand load an expert only when it is acquired and prefetch
// nothing, so no cell of theirs can hit more than the oracle replaying the
// same acquires with the same slots (tools/bench/belady.h). Policies that
// prefetch can, and are not checked. Returns how many cells were checked.
int ExpectOracleBoundsDemandCaching(const nlohmann::json& results) {
  int checked = 0;
  for (const nlohmann::json& r : results) {
    if (r.at("policy") != "lru" && r.at("policy") != "on_demand") continue;
    ++checked;
    // The trace is the cell's own acquires, one entry each.
    EXPECT_EQ(r.at("hits").get<uint64_t>() +
                  r.at("hits_loading").get<uint64_t>() +
                  r.at("misses").get<uint64_t>(),
              r.at("trace_accesses").get<uint64_t>())
        << r.dump();
    EXPECT_EQ(r.at("hits_loading").get<uint64_t>(), 0u) << r.dump();
    EXPECT_LE(r.at("hits").get<uint64_t>(), r.at("oracle_hits").get<uint64_t>())
        << r.dump();
    EXPECT_GT(r.at("oracle_hits").get<uint64_t>(), 0u) << r.dump();
  }
  return checked;
}

TEST(PolicyBenchSmokeTest, ReportsEveryPolicyWithIdenticalOutputs) {
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(RunBench(
      " --model_dir=" + Runfile("models/demo") +
          " --policies=on_demand,overlap --expert_cache_ratio=0.25 "
          "--link_gbps=20 --link_latency_us=5 --num_requests=2 "
          "--max_new_tokens=4 --concurrency=2 --threads=2 --policy_repeats=2",
      "policy_bench.json", &j));
  EXPECT_EQ(j.at("mode"), "policies");
  EXPECT_TRUE(j.at("complete").get<bool>());
  EXPECT_EQ(j.at("runs_not_started").get<int>(), 0);
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  // The default backend, named as Backend::name() ("cpu-avx2-2t", ...).
  EXPECT_EQ(j.at("backend").get<std::string>().rfind("cpu", 0), 0u);
  EXPECT_GT(j.at("expert_compute_samples").get<int>(), 0);
  EXPECT_FALSE(j.at("fast_tier_on_device").get<bool>());
  EXPECT_TRUE(j["link"].at("expert_copy_rate_emulated").get<bool>());
  // The plain copy probe ran, on one blob's size.
  const nlohmann::json& probe = j.at("copy_probe");
  EXPECT_EQ(probe.at("bytes_per_copy"), j["model"]["expert_blob_bytes"]);
  EXPECT_EQ(probe.at("copies").get<int>(), 64);
  EXPECT_GT(probe.at("event_gbps").get<double>(), 0);
  EXPECT_GT(probe.at("wall_gbps").get<double>(), 0);
  EXPECT_TRUE(j.at("link").at("emulated").get<bool>());
  EXPECT_GT(j["link"].at("miss_transfer_us").get<double>(), 0);
  EXPECT_GT(j.at("expert_compute_us").get<double>(), 0);
  EXPECT_GT(j.at("model").at("expert_blob_bytes").get<double>(), 0);
  ASSERT_EQ(j.at("results").size(), 2u);
  EXPECT_EQ(j["results"][0]["policy"], "on_demand");
  EXPECT_EQ(j["results"][1]["policy"], "overlap");
  for (const nlohmann::json& r : j["results"]) {
    EXPECT_EQ(r.at("tokens").get<int>(), 2 * 4) << r.dump();
    EXPECT_EQ(r.at("concurrency").get<int>(), 2);
    EXPECT_DOUBLE_EQ(r.at("expert_cache_ratio").get<double>(), 0.25);
    for (const char* key :
         {"tokens_per_s", "tpot_mean_ms", "tpot_p50_ms", "tpot_p99_ms",
          "link_bytes_per_token", "speedup_vs_on_demand", "wall_seconds"}) {
      EXPECT_GT(r.at(key).get<double>(), 0) << key << " in " << r.dump();
    }
    EXPECT_EQ(r.at("repeat_tokens_per_s").size(), 2u);
    for (const char* key : {"hit_rate", "stall_share", "link_busy_share"}) {
      EXPECT_GE(r.at(key).get<double>(), 0) << key;
      EXPECT_LE(r.at(key).get<double>(), 1) << key;
    }
    EXPECT_TRUE(r.contains("prefetch_precision"));
    // Both policies miss at R = 0.25, so the link was busy.
    EXPECT_GT(r.at("expert_copy_gbps").get<double>(), 0) << r.dump();
    EXPECT_GT(r.at("expert_copy_vs_plain").get<double>(), 0) << r.dump();
  }
  // on_demand never prefetches; its precision is null (n/a).
  EXPECT_TRUE(j["results"][0]["prefetch_precision"].is_null());
  // The default drafter axis is "own": the policy's own drafter, none for
  // these two policies.
  EXPECT_EQ(j["workload"].at("drafters"), nlohmann::json::array({"own"}));
  EXPECT_EQ(j["workload"].at("draft_budgets"),
            nlohmann::json::array({"shared"}));
  EXPECT_TRUE(j.at("skipped").empty());
  for (const nlohmann::json& r : j["results"]) {
    // The oracle replayed the run's own acquires.
    EXPECT_GT(r.at("trace_accesses").get<int>(), 0) << r.dump();
    EXPECT_GE(r.at("oracle_hit_rate").get<double>(), 0);
    EXPECT_LE(r.at("oracle_hit_rate").get<double>(), 1);
    EXPECT_EQ(r.at("draft_budget"), "");
    EXPECT_EQ(r.at("draft_bytes").get<int>(), 0);
    EXPECT_EQ(r.at("drafter"), "none");
    EXPECT_EQ(r.at("draft_tokens").get<int>(), 0);
    EXPECT_TRUE(r.at("acceptance_rate").is_null());
    EXPECT_TRUE(r.at("speedup_vs_no_drafter").is_null());
  }
  EXPECT_EQ(j["workload"].at("prompts"), "text");
  EXPECT_EQ(j["workload"].at("warmup_tokens"), 4);
  EXPECT_GT(j.at("distinct_generated_tokens").get<int>(), 0);
  EXPECT_TRUE(j["workload"].at("prompt_seed").is_null());
}

TEST(PolicyBenchSmokeTest, DrafterAxisReportsSpeculation) {
  nlohmann::json j;
  // on_demand x {own (= none), self, none} and self_spec x {own (= its
  // self), self (the same cell), none (no speculation)}: 4 distinct cells.
  ASSERT_NO_FATAL_FAILURE(
      RunBench(" --model_dir=" + Runfile("models/demo") +
                   " --policies=on_demand,self_spec --drafters=own,self,none "
                   "--spec_baselines=false "
                   "--num_speculative_tokens=2 --expert_cache_ratio=0.5 "
                   "--link_gbps=20 --link_latency_us=5 --num_requests=2 "
                   "--max_new_tokens=6 --concurrency=2 --threads=2",
               "policy_bench_spec.json", &j));
  // Greedy verification keeps the target's tokens whatever is drafted.
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  EXPECT_EQ(j["workload"].at("num_speculative_tokens"), 2);
  EXPECT_EQ(j["workload"].at("drafters"),
            nlohmann::json::array({"own", "self", "none"}));
  const nlohmann::json& rs = j.at("results");
  ASSERT_EQ(rs.size(), 4u) << rs.dump();
  const std::pair<const char*, const char*> cells[] = {{"on_demand", "none"},
                                                       {"on_demand", "self"},
                                                       {"self_spec", "self"},
                                                       {"self_spec", "none"}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rs[i].at("policy"), cells[i].first) << i;
    EXPECT_EQ(rs[i].at("drafter"), cells[i].second) << i;
  }
  EXPECT_EQ(rs[2].at("drafter_entry"), "own");  // self_spec brings self
  EXPECT_EQ(rs[3].at("drafter_entry"), "none");
  for (const nlohmann::json& r : rs) {
    EXPECT_EQ(r.at("tokens").get<int>(), 2 * 6) << r.dump();
    for (const char* key : {"hits",
                            "hits_loading",
                            "misses",
                            "hit_rate",
                            "hit_loading_share",
                            "transfers_per_token",
                            "link_bytes_per_token",
                            "prefetch_cancelled",
                            "drafts",
                            "draft_tokens",
                            "accepted_tokens",
                            "draft_seconds",
                            "verify_seconds",
                            "draft_share",
                            "verify_share",
                            "acceptance_rate",
                            "tokens_per_verification",
                            "mean_k",
                            "speedup_vs_on_demand",
                            "speedup_vs_no_drafter",
                            "num_speculative_tokens"}) {
      EXPECT_TRUE(r.contains(key)) << key << " in " << r.dump();
    }
    EXPECT_LE(r.at("accepted_tokens").get<int>(),
              r.at("draft_tokens").get<int>())
        << r.dump();
    EXPECT_LE(r.at("drafts").get<int>(), r.at("draft_tokens").get<int>());
    for (const char* key :
         {"hit_rate", "hit_loading_share", "draft_share", "verify_share"}) {
      EXPECT_GE(r.at(key).get<double>(), 0) << key;
      EXPECT_LE(r.at(key).get<double>(), 1) << key;
    }
    EXPECT_GT(r.at("speedup_vs_on_demand").get<double>(), 0) << r.dump();
    if (r.at("drafter") == "none") {
      EXPECT_EQ(r.at("draft_tokens").get<int>(), 0) << r.dump();
      EXPECT_TRUE(r.at("speedup_vs_no_drafter").is_null()) << r.dump();
      continue;
    }
    EXPECT_EQ(r.at("num_speculative_tokens").get<int>(), 2);
    EXPECT_GT(r.at("speedup_vs_no_drafter").get<double>(), 0) << r.dump();
    if (r.at("drafts").get<int>() > 0) {
      const double acceptance = r.at("acceptance_rate").get<double>();
      EXPECT_GE(acceptance, 0);
      EXPECT_LE(acceptance, 1);
      EXPECT_GE(r.at("tokens_per_verification").get<double>(), 1);
      EXPECT_LE(r.at("mean_k").get<double>(), 2);
    }
  }
  // self_spec speculates with its own drafter at a fixed k = 2.
  EXPECT_GT(rs[2].at("draft_tokens").get<int>(), 0) << rs[2].dump();
  // on_demand never keeps an expert, and the oracle bounds it.
  EXPECT_EQ(rs[0].at("hits").get<int>(), 0);
  EXPECT_EQ(ExpectOracleBoundsDemandCaching(rs), 2);  // on_demand's cells
}

// The result of `results` with this (policy, drafter, k, budget, ratio,
// concurrency), or null; `cell` is a summary row's cell object.
const nlohmann::json* FindCell(const nlohmann::json& results,
                               const nlohmann::json& cell, double ratio,
                               int concurrency) {
  for (const nlohmann::json& r : results) {
    if (r.at("policy") == cell.at("policy") &&
        r.at("drafter") == cell.at("drafter") &&
        r.at("num_speculative_tokens") == cell.at("num_speculative_tokens") &&
        r.at("draft_budget") == cell.at("draft_budget") &&
        r.at("expert_cache_ratio").get<double>() == ratio &&
        r.at("concurrency").get<int>() == concurrency) {
      return &r;
    }
  }
  return nullptr;
}

// --spec_baselines (on by default) runs lru and lru + the same drafter beside
// each speculative policy, and the summary's ratios are those of the cells
// of this run: recomputed here from the results, not from figures.
TEST(PolicyBenchSmokeTest, SpecSummaryComparesWithBaselinesOfTheSameRun) {
  nlohmann::json j;
  const std::string out_path = TmpFile("policy_bench_summary.stdout");
  ASSERT_NO_FATAL_FAILURE(
      RunBench(" --model_dir=" + Runfile("models/demo") +
                   " --policies=self_spec,quant_draft --expert_cache_ratio=0.5 "
                   "--link_gbps=20 --link_latency_us=5 --num_requests=2 "
                   "--max_new_tokens=6 --concurrency=1,2 --threads=2 > " +
                   out_path,
               "policy_bench_summary.json", &j));
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  EXPECT_TRUE(j["workload"].at("spec_baselines").get<bool>());
  const std::string run_id = j.at("run").at("id").get<std::string>();
  EXPECT_FALSE(run_id.empty());
  EXPECT_FALSE(j["run"].at("started_utc").get<std::string>().empty());
  // Per concurrency: lru, lru + self k=4, self_spec, lru + int4 adaptive,
  // quant_draft.
  const nlohmann::json& rs = j.at("results");
  ASSERT_EQ(rs.size(), 2u * 5u) << rs.dump();
  const nlohmann::json& summary = j.at("spec_summary");
  ASSERT_EQ(summary.size(), 2u * 2u) << summary.dump();
  for (const nlohmann::json& row : summary) {
    EXPECT_EQ(row.at("run_id"), run_id);
    EXPECT_EQ(row.at("model"), "demo");
    const double ratio = row.at("expert_cache_ratio").get<double>();
    const int conc = row.at("concurrency").get<int>();
    const nlohmann::json& policy = row.at("policy");
    EXPECT_NE(policy.at("policy"), "lru");
    ASSERT_FALSE(row.at("lru").is_null()) << row.dump();
    ASSERT_FALSE(row.at("lru_same_drafter").is_null()) << row.dump();
    EXPECT_EQ(row["lru"].at("drafter"), "none");
    EXPECT_EQ(row["lru_same_drafter"].at("drafter"), policy.at("drafter"));
    EXPECT_EQ(row["lru_same_drafter"].at("num_speculative_tokens"),
              policy.at("num_speculative_tokens"));
    const nlohmann::json* p = FindCell(rs, policy, ratio, conc);
    const nlohmann::json* lru = FindCell(rs, row["lru"], ratio, conc);
    const nlohmann::json* lru_d =
        FindCell(rs, row["lru_same_drafter"], ratio, conc);
    ASSERT_TRUE(p != nullptr && lru != nullptr && lru_d != nullptr)
        << row.dump();
    auto tps = [](const nlohmann::json* r) {
      return r->at("tokens_per_s").get<double>();
    };
    auto tpot = [](const nlohmann::json* r) {
      return r->at("tpot_mean_ms").get<double>();
    };
    EXPECT_EQ(policy.at("tokens_per_s").get<double>(), tps(p));
    EXPECT_DOUBLE_EQ(row.at("speedup_vs_lru").get<double>(), tps(p) / tps(lru));
    EXPECT_DOUBLE_EQ(row.at("speedup_vs_lru_same_drafter").get<double>(),
                     tps(p) / tps(lru_d));
    EXPECT_DOUBLE_EQ(row.at("tpot_speedup_vs_lru").get<double>(),
                     tpot(lru) / tpot(p));
    EXPECT_DOUBLE_EQ(row.at("tpot_speedup_vs_lru_same_drafter").get<double>(),
                     tpot(lru_d) / tpot(p));
  }
  // The printed summary: headed by the run id, one row per speculative cell
  // carrying it.
  const std::string printed = ReadFile(out_path);
  EXPECT_NE(printed.find("summary: speculative policies vs lru"),
            std::string::npos)
      << printed;
  size_t rows_printed = 0;
  for (size_t at = printed.find("| " + run_id + " |"); at != std::string::npos;
       at = printed.find("| " + run_id + " |", at + 1)) {
    ++rows_printed;
  }
  EXPECT_EQ(rows_printed, summary.size()) << printed;
}

// A --policies entry with keys of its own (self_spec's two drafting modes
// side by side): the keys reach that cell only (lru, which has no such
// key, still runs as the baseline), and the cell is labelled by the entry.
TEST(PolicyBenchSmokeTest, PolicyEntryWithItsOwnKeys) {
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(RunBench(
      " --model_dir=" + Runfile("models/demo") +
          " --policies=self_spec,self_spec:draft_from=ready:hotness_decay=0 "
          "--expert_cache_ratio=0.5 --link_gbps=20 --link_latency_us=5 "
          "--num_requests=2 --max_new_tokens=6 --concurrency=1 --threads=2",
      "policy_bench_entry_keys.json", &j));
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  std::vector<std::string> policies;
  for (const nlohmann::json& r : j.at("results")) {
    policies.push_back(r.at("policy").get<std::string>() + " / " +
                       r.at("drafter").get<std::string>());
  }
  EXPECT_EQ(policies, (std::vector<std::string>{
                          "lru / none", "lru / self", "self_spec / self",
                          "self_spec:draft_from=ready:hotness_decay=0 / self"}))
      << j.at("results").dump();
  EXPECT_EQ(j.at("spec_summary").size(), 2u);
  const std::string bad = Runfile("tools/bench/moeserve_bench") +
                          " --model_dir=" + Runfile("models/demo") +
                          " --policies=self_spec:draft_from > /dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

TEST(PolicyBenchSmokeTest, Int4DrafterWithBothBudgets) {
  nlohmann::json j;
  // quant_draft x {own (= int4, k adaptive), none} x budgets: at R = 0.25
  // the int4 pool (~28% of the expert bytes) leaves no slot when shared, so
  // that cell is skipped; at R = 0.5 both budgets run.
  ASSERT_NO_FATAL_FAILURE(
      RunBench(" --model_dir=" + Runfile("models/demo") +
                   " --policies=lru,quant_draft --drafters=own,int4 "
                   "--draft_budget=shared,extra --expert_cache_ratio=0.25,0.5 "
                   "--link_gbps=20 --link_latency_us=5 --num_requests=2 "
                   "--max_new_tokens=6 --concurrency=2 --threads=2",
               "policy_bench_int4.json", &j));
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  EXPECT_EQ(j["workload"].at("draft_budgets"),
            nlohmann::json::array({"shared", "extra"}));
  // lru + int4 shared and quant_draft + int4 shared at R = 0.25.
  EXPECT_EQ(j.at("skipped").size(), 2u) << j.at("skipped").dump();
  // Cells per ratio: lru none, lru int4 x 2 budgets, quant_draft int4 x 2;
  // R = 0.25 loses the two shared ones.
  const nlohmann::json& rs = j.at("results");
  ASSERT_EQ(rs.size(), 3u + 5u) << rs.dump();
  int shared_slots = 0, extra_slots = 0;
  for (const nlohmann::json& r : rs) {
    if (r.at("drafter") == "none") {
      EXPECT_EQ(r.at("draft_budget"), "");
      EXPECT_EQ(r.at("draft_bytes").get<int>(), 0);
      continue;
    }
    EXPECT_EQ(r.at("drafter"), "int4") << r.dump();
    EXPECT_GT(r.at("draft_bytes").get<int64_t>(), 0) << r.dump();
    EXPECT_GT(r.at("trace_accesses").get<int>(), 0) << r.dump();
    if (r.at("expert_cache_ratio").get<double>() != 0.5 ||
        r.at("policy") != "quant_draft") {
      continue;
    }
    (r.at("draft_budget") == "shared" ? shared_slots : extra_slots) =
        r.at("slots").get<int>();
  }
  // Shared takes the pool out of the same budget: fewer slots.
  EXPECT_GT(shared_slots, 0);
  EXPECT_GT(extra_slots, shared_slots);
  EXPECT_EQ(ExpectOracleBoundsDemandCaching(rs), 5);  // lru's cells
}

TEST(PolicyBenchSmokeTest, GeneratedModelWithoutTokenizerUsesSyntheticIds) {
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(
      RunBench(" --gen_model=mixtral_tiny --policies=on_demand,lru "
               "--expert_cache_ratio=0.5 --num_requests=3 --max_new_tokens=4 "
               "--concurrency=1,2 --threads=2",
               "policy_bench_generated.json", &j));
  EXPECT_EQ(j.at("workload").at("prompts"), "synthetic");
  EXPECT_GT(j["workload"].at("prompt_seed").get<uint64_t>(), 0u);
  EXPECT_EQ(j["workload"].at("prompt_lengths").size(), 3u);
  EXPECT_EQ(j.at("model").at("name"), "mixtral_tiny-random");
  EXPECT_EQ(j["model"].at("layers"), 2);
  EXPECT_TRUE(j.at("outputs_identical").get<bool>());
  ASSERT_EQ(j.at("results").size(), 4u);  // 2 concurrencies x 2 policies
  for (const nlohmann::json& r : j["results"]) {
    EXPECT_EQ(r.at("tokens").get<int>(), 3 * 4) << r.dump();
    EXPECT_GT(r.at("tokens_per_s").get<double>(), 0);
  }
  EXPECT_EQ(ExpectOracleBoundsDemandCaching(j.at("results")), 4);
}

// --gen_model builds the model in memory; --gen_dir writes the same bytes
// to files and loads them: the same tokens either way. A disk slow tier
// needs those files: without --gen_dir it is refused, naming both flags.
TEST(PolicyBenchSmokeTest, GeneratedInMemoryMatchesWrittenToDisk) {
  const std::string flags =
      " --gen_model=qwen3_tiny --policies=on_demand,lru "
      "--expert_cache_ratio=0.5 --num_requests=2 --max_new_tokens=4 "
      "--threads=2";
  nlohmann::json memory, disk, disk_tier;
  ASSERT_NO_FATAL_FAILURE(
      RunBench(flags, "policy_bench_in_memory.json", &memory));
  const std::string dir = TmpFile("qwen3_tiny");
  ASSERT_NO_FATAL_FAILURE(RunBench(flags + " --gen_dir=" + dir,
                                   "policy_bench_on_disk.json", &disk));
  ASSERT_NO_FATAL_FAILURE(
      RunBench(flags + " --gen_dir=" + dir + " --slow_tier=disk",
               "policy_bench_disk_tier.json", &disk_tier));
  EXPECT_TRUE(memory.at("model").at("in_memory").get<bool>());
  EXPECT_FALSE(disk.at("model").at("in_memory").get<bool>());
  EXPECT_EQ(memory["model"].at("name"), "qwen3_tiny-random");
  EXPECT_TRUE(memory.at("outputs_identical").get<bool>());
  EXPECT_EQ(memory.at("outputs_fingerprint").get<std::string>().size(), 16u);
  EXPECT_EQ(memory.at("outputs_fingerprint"), disk.at("outputs_fingerprint"));
  EXPECT_EQ(memory.at("outputs_fingerprint"),
            disk_tier.at("outputs_fingerprint"));

  const std::string err_path = TmpFile("policy_bench_disk_refused.stderr");
  const int status = std::system((Runfile("tools/bench/moeserve_bench") +
                                  flags + " --slow_tier=disk 2>" + err_path)
                                     .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = ReadFile(err_path);
  EXPECT_NE(err.find("--slow_tier=disk"), std::string::npos) << err;
  EXPECT_NE(err.find("--gen_model=qwen3_tiny"), std::string::npos) << err;
  EXPECT_NE(err.find("--gen_dir"), std::string::npos) << err;
}

// A time budget ends the run early with what finished: exit 0, the first
// run reported, the rest counted as not started; each finished group was
// printed as it finished.
TEST(PolicyBenchSmokeTest, TimeBudgetKeepsWhatFinished) {
  nlohmann::json j;
  const std::string out_path = TmpFile("policy_bench_budget.stdout");
  ASSERT_NO_FATAL_FAILURE(
      RunBench(" --gen_model=mixtral_tiny --policies=on_demand,lru,overlap "
               "--expert_cache_ratio=0.25,0.5 --num_requests=2 "
               "--max_new_tokens=4 --concurrency=1,2 --threads=2 "
               "--max_seconds=0.001 > " +
                   out_path,
               "policy_bench_budget.json", &j));
  EXPECT_FALSE(j.at("complete").get<bool>());
  EXPECT_DOUBLE_EQ(j.at("max_seconds").get<double>(), 0.001);
  // 2 ratios x 2 concurrencies x 3 policies planned; the first always runs.
  ASSERT_EQ(j.at("results").size(), 1u) << j.at("results").dump();
  EXPECT_EQ(j.at("runs_not_started").get<int>(), 11);
  EXPECT_EQ(j["results"][0].at("policy"), "on_demand");
  const std::string printed = ReadFile(out_path);
  EXPECT_NE(printed.find("done: ratio 0.25 concurrency 1 on_demand"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("INCOMPLETE"), std::string::npos) << printed;
}

// Exit status of `cmd` run by the shell, or -1 when it did not exit normally
// (killed by a signal: a crash).
int ExitCode(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(PolicyBenchSmokeTest, CudaBackendRunsOrFailsClearly) {
  const std::string json_path = TmpFile("policy_bench_cuda.json");
  const std::string err_path = TmpFile("policy_bench_cuda.stderr");
  const std::string cmd = Runfile("tools/bench/moeserve_bench") +
                          " --backend=cuda --gen_model=qwen_tiny"
                          " --policies=on_demand,lru"
                          " --expert_cache_ratio=0.5 --num_requests=2"
                          " --max_new_tokens=4 --json_out=" +
                          json_path + " 2>" + err_path;
  const int code = ExitCode(cmd);
  const std::string err = ReadFile(err_path);
  ASSERT_NE(code, -1) << "crashed: " << err;
  if (code == 0) {  // A GPU is here: the report is the CUDA backend's.
    const nlohmann::json j = nlohmann::json::parse(ReadFile(json_path));
    EXPECT_NE(j.at("backend").get<std::string>().find("cuda"),
              std::string::npos);
    EXPECT_TRUE(j.at("outputs_identical").get<bool>());
    return;
  }
  EXPECT_EQ(code, 1) << err;
  EXPECT_NE(err.find("CUDA"), std::string::npos) << err;
  // It fails before generating or loading any model.
  EXPECT_EQ(err.find("random-weight"), std::string::npos) << err;
}

}  // namespace
