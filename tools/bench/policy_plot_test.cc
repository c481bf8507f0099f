// policy_plot: the gnuplot data and script for a hand-made report, and a
// real render by Debian's gnuplot (deploy/setup.sh installs gnuplot-nox).
#include "tools/bench/policy_plot.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace moeserve::bench {
namespace {

PolicyResult Cell(std::string policy, std::string drafter, double ratio,
                  int concurrency, double tok_s, double bytes_per_token) {
  PolicyResult r;
  r.policy = std::move(policy);
  r.drafter = std::move(drafter);
  r.ratio = ratio;
  r.concurrency = concurrency;
  r.tokens_per_s = tok_s;
  r.link_bytes_per_token = bytes_per_token;
  return r;
}

PolicyReport Report() {
  PolicyReport report;
  report.model_name = "demo \"quoted\"";
  report.backend = "cpu-avx512-2t";
  report.options.link_gbps = 2;
  report.options.link_latency_us = 10;
  report.results = {
      Cell("on_demand", "none", 0.25, 1, 100, 2048),
      Cell("lru", "none", 0.25, 1, 150, 1024),
      Cell("self_spec", "self", 0.25, 1, 120, 4096),
      Cell("on_demand", "none", 0.25, 4, 300, 2048),
      Cell("lru", "none", 0.25, 4, 350, 512),
      // self_spec did not run at concurrency 4, ratio 0.25.
      Cell("on_demand", "none", 0.5, 1, 110, 1024),
      Cell("lru", "none", 0.5, 1, 210, 256),
      Cell("self_spec", "self", 0.5, 1, 190, 128),
  };
  return report;
}

TEST(PolicyPlotTest, DataHasABlockPerRatioAndMetricAndMarksMissingCells) {
  const std::string data = PolicyPlotData(Report());
  EXPECT_NE(data.find("# ratio 0.25: tokens/s; columns: label, then "
                      "concurrency 1 4\n"
                      "\"on_demand\" 100.000 300.000\n"
                      "\"lru\" 150.000 350.000\n"
                      "\"self_spec+self\" 120.000 -\n\n\n"),
            std::string::npos)
      << data;
  EXPECT_NE(data.find("# ratio 0.25: link KiB/token; columns: label, then "
                      "concurrency 1 4\n"
                      "\"on_demand\" 2.000 2.000\n"
                      "\"lru\" 1.000 0.500\n"),
            std::string::npos)
      << data;
  EXPECT_NE(data.find("# ratio 0.5: tokens/s"), std::string::npos);
  EXPECT_NE(data.find("\"self_spec+self\" 190.000 -\n"), std::string::npos);
}

TEST(PolicyPlotTest, ScriptPlotsEveryBlockWithNoUnescapedQuote) {
  const std::string script = PolicyPlotScript(Report(), "/t/d.dat", "/t/p.png");
  EXPECT_NE(script.find("set multiplot layout 2,2"), std::string::npos);
  EXPECT_NE(script.find("moeserve_bench: demo 'quoted' on cpu-avx512-2t, "
                        "emulated link 2 GB/s + 10 us"),
            std::string::npos)
      << script;
  for (int block = 0; block < 4; ++block) {
    EXPECT_NE(
        script.find("\"/t/d.dat\" index " + std::to_string(block) +
                    " using 2:xtic(1) title \"concurrency 1\", '' index " +
                    std::to_string(block) + " using 3 title \"concurrency 4\""),
        std::string::npos)
        << script;
  }
}

TEST(PolicyPlotTest, GnuplotRendersAPng) {
  const std::string png = std::string(std::getenv("TEST_TMPDIR") != nullptr
                                          ? std::getenv("TEST_TMPDIR")
                                          : "/tmp") +
                          "/policy_plot_test.png";
  const absl::Status st = WritePolicyPlot(Report(), png);
  ASSERT_TRUE(st.ok()) << st;
  std::ifstream in(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::ifstream script(png + ".gp");
  EXPECT_TRUE(script.good()) << "the script is kept beside the image";
}

TEST(PolicyPlotTest, NoResultsIsARefusal) {
  PolicyReport empty;
  EXPECT_EQ(WritePolicyPlot(empty, "/tmp/never.png").code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace moeserve::bench
