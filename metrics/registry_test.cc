#include "metrics/registry.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace moeserve::metrics {
namespace {

// Unwraps a StatusOr in a test, failing loudly instead of crashing.
template <typename T>
T Must(absl::StatusOr<T> v) {
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : T{};
}

TEST(RegistryTest, EmptyRegistrySerializesToNothing) {
  Registry registry;
  EXPECT_EQ(registry.Serialize(), "");
}

TEST(RegistryTest, CounterGolden) {
  Registry registry;
  CounterFamily* family =
      Must(registry.AddCounter("moeserve_expert_requests_total",
                               "Expert lookups.", {"policy", "result"}));
  ASSERT_NE(family, nullptr);
  Must(family->WithLabels({"lru", "miss"}))->Inc(2);
  Must(family->WithLabels({"lru", "hit"}))->Inc();
  Must(family->WithLabels({"lru", "hit"}))->Inc(0.5);
  EXPECT_EQ(registry.Serialize(),
            "# HELP moeserve_expert_requests_total Expert lookups.\n"
            "# TYPE moeserve_expert_requests_total counter\n"
            "moeserve_expert_requests_total{policy=\"lru\",result=\"hit\"} "
            "1.5\n"
            "moeserve_expert_requests_total{policy=\"lru\",result=\"miss\"} "
            "2\n");
}

TEST(RegistryTest, LabelsKeepDeclaredOrderNotAlphabetical) {
  Registry registry;
  CounterFamily* family = Must(registry.AddCounter("x_total", "h", {"z", "a"}));
  Must(family->WithLabels({"1", "2"}))->Inc();
  EXPECT_EQ(registry.Serialize(),
            "# HELP x_total h\n# TYPE x_total counter\n"
            "x_total{z=\"1\",a=\"2\"} 1\n");
}

TEST(RegistryTest, UnlabeledFamiliesExportZeroUpFront) {
  Registry registry;
  Must(registry.AddCounter("c_total", "c", {}));
  Must(registry.AddGauge("g", "g", {}));
  EXPECT_EQ(registry.Serialize(),
            "# HELP c_total c\n# TYPE c_total counter\nc_total 0\n"
            "# HELP g g\n# TYPE g gauge\ng 0\n");
}

TEST(RegistryTest, LabeledFamilyWithoutChildrenPrintsOnlyHeader) {
  Registry registry;
  Must(registry.AddGauge("g", "g", {"policy"}));
  EXPECT_EQ(registry.Serialize(), "# HELP g g\n# TYPE g gauge\n");
}

TEST(RegistryTest, FamiliesSortedByName) {
  Registry registry;
  Must(registry.AddGauge("b", "", {}));
  Must(registry.AddGauge("a", "", {}));
  EXPECT_EQ(registry.Serialize(),
            "# HELP a \n# TYPE a gauge\na 0\n# HELP b \n# TYPE b gauge\nb 0\n");
}

TEST(RegistryTest, GaugeSetIncDec) {
  Registry registry;
  Gauge* gauge = Must(Must(registry.AddGauge("g", "h", {}))->WithLabels({}));
  gauge->Set(10);
  gauge->Inc();
  gauge->Dec(3.5);
  EXPECT_EQ(gauge->Value(), 7.5);
  gauge->Set(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(registry.Serialize(), "# HELP g h\n# TYPE g gauge\ng -Inf\n");
  gauge->Set(std::nan(""));
  EXPECT_EQ(registry.Serialize(), "# HELP g h\n# TYPE g gauge\ng NaN\n");
}

TEST(RegistryTest, HelpAndLabelValuesEscaped) {
  Registry registry;
  CounterFamily* family =
      Must(registry.AddCounter("e_total", "a \\ b\nc \"q\"", {"v"}));
  Must(family->WithLabels({"back\\slash \"quoted\"\nline"}))->Inc();
  EXPECT_EQ(registry.Serialize(),
            "# HELP e_total a \\\\ b\\nc \"q\"\n"
            "# TYPE e_total counter\n"
            "e_total{v=\"back\\\\slash \\\"quoted\\\"\\nline\"} 1\n");
}

TEST(RegistryTest, HistogramGoldenCumulativeWithInf) {
  Registry registry;
  HistogramFamily* family = Must(
      registry.AddHistogram("lat_seconds", "Latency.", {"policy"}, {0.5, 1}));
  Histogram* h = Must(family->WithLabels({"lru"}));
  h->Observe(0.25);
  h->Observe(0.5);  // bounds are inclusive
  h->Observe(0.75);
  h->Observe(7);
  EXPECT_EQ(registry.Serialize(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{policy=\"lru\",le=\"0.5\"} 2\n"
            "lat_seconds_bucket{policy=\"lru\",le=\"1\"} 3\n"
            "lat_seconds_bucket{policy=\"lru\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{policy=\"lru\"} 8.5\n"
            "lat_seconds_count{policy=\"lru\"} 4\n");
}

TEST(RegistryTest, UnlabeledHistogramOnlyLeLabel) {
  Registry registry;
  Must(registry.AddHistogram("h", "h", {}, {}));
  EXPECT_EQ(registry.Serialize(),
            "# HELP h h\n# TYPE h histogram\n"
            "h_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

TEST(RegistryTest, HistogramNanGoesToInfBucketOnly) {
  Histogram h(
      std::make_shared<const std::vector<double>>(std::vector<double>{1, 2}));
  h.Observe(std::nan(""));
  h.Observe(-5);
  const Histogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_EQ(s.count, 2u);
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(RegistryTest, CounterRejectsNegativeAndNan) {
  Counter c;
  EXPECT_TRUE(c.Inc(3));
  EXPECT_FALSE(c.Inc(-1));
  EXPECT_FALSE(c.Inc(std::nan("")));
  EXPECT_TRUE(c.Inc(0));
  EXPECT_EQ(c.Value(), 3);
}

TEST(RegistryTest, WithLabelsWrongArityIsError) {
  Registry registry;
  CounterFamily* family = Must(registry.AddCounter("x_total", "", {"a", "b"}));
  EXPECT_EQ(family->WithLabels({"1"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(family->WithLabels({"1", "2", "3"}).ok());
  EXPECT_FALSE(family->WithLabels({}).ok());
}

TEST(RegistryTest, WithLabelsReturnsStablePointer) {
  Registry registry;
  CounterFamily* family = Must(registry.AddCounter("x_total", "", {"a"}));
  Counter* first = Must(family->WithLabels({"1"}));
  for (int i = 0; i < 100; ++i) Must(family->WithLabels({std::to_string(i)}));
  EXPECT_EQ(Must(family->WithLabels({"1"})), first);
}

TEST(RegistryTest, NameValidation) {
  Registry registry;
  const auto invalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(registry.AddCounter("no_suffix", "", {}).status().code(), invalid);
  EXPECT_EQ(registry.AddCounter("1bad_total", "", {}).status().code(), invalid);
  EXPECT_EQ(registry.AddGauge("has-dash", "", {}).status().code(), invalid);
  EXPECT_EQ(registry.AddGauge("__reserved", "", {}).status().code(), invalid);
  EXPECT_EQ(registry.AddGauge("g", "", {"a:b"}).status().code(), invalid);
  EXPECT_EQ(registry.AddGauge("g", "", {"__x"}).status().code(), invalid);
  EXPECT_EQ(registry.AddGauge("g", "", {"a", "a"}).status().code(), invalid);
  EXPECT_EQ(registry.AddHistogram("h", "", {"le"}, {1}).status().code(),
            invalid);
  EXPECT_TRUE(registry.AddGauge("ns:ok_name", "", {"_ok1"}).ok());
  EXPECT_EQ(registry.Serialize(),
            "# HELP ns:ok_name \n# TYPE ns:ok_name gauge\n");
}

TEST(RegistryTest, BucketBoundsMustBeFiniteAndIncreasing) {
  Registry registry;
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(registry.AddHistogram("h", "", {}, {1, 1}).ok());
  EXPECT_FALSE(registry.AddHistogram("h", "", {}, {2, 1}).ok());
  EXPECT_FALSE(registry.AddHistogram("h", "", {}, {1, inf}).ok());
  EXPECT_FALSE(registry.AddHistogram("h", "", {}, {std::nan("")}).ok());
  EXPECT_TRUE(registry.AddHistogram("h", "", {}, {-1, 0, 1}).ok());
}

TEST(RegistryTest, SameRegistrationReturnsExistingFamily) {
  Registry registry;
  CounterFamily* a = Must(registry.AddCounter("x_total", "first", {"p"}));
  CounterFamily* b = Must(registry.AddCounter("x_total", "second", {"p"}));
  EXPECT_EQ(a, b);
  EXPECT_EQ(b->help(), "first");
  HistogramFamily* h1 = Must(registry.AddHistogram("h", "", {}, {1, 2}));
  EXPECT_EQ(Must(registry.AddHistogram("h", "", {}, {1, 2})), h1);
}

TEST(RegistryTest, ConflictingRegistrationIsError) {
  Registry registry;
  const auto exists = absl::StatusCode::kAlreadyExists;
  ASSERT_TRUE(registry.AddGauge("g", "", {"p"}).ok());
  EXPECT_EQ(registry.AddGauge("g", "", {"q"}).status().code(), exists);
  EXPECT_EQ(registry.AddGauge("g", "", {}).status().code(), exists);
  EXPECT_EQ(registry.AddCallbackGauge("g", "", {"p"}).status().code(), exists);
  EXPECT_EQ(registry.AddHistogram("g", "", {"p"}, {}).status().code(), exists);
  ASSERT_TRUE(registry.AddHistogram("h", "", {}, {1}).ok());
  EXPECT_EQ(registry.AddHistogram("h", "", {}, {2}).status().code(), exists);
}

TEST(RegistryTest, HistogramSeriesNamesAreReserved) {
  Registry registry;
  ASSERT_TRUE(registry.AddHistogram("h", "", {}, {1}).ok());
  EXPECT_FALSE(registry.AddGauge("h_count", "", {}).ok());
  EXPECT_FALSE(registry.AddGauge("h_sum", "", {}).ok());
  EXPECT_FALSE(registry.AddGauge("h_bucket", "", {}).ok());
  EXPECT_TRUE(registry.AddGauge("h_other", "", {}).ok());
  ASSERT_TRUE(registry.AddGauge("k_sum", "", {}).ok());
  EXPECT_FALSE(registry.AddHistogram("k", "", {}, {1}).ok());
}

TEST(RegistryTest, CallbackGaugeEvaluatedAtScrape) {
  Registry registry;
  CallbackGaugeFamily* family =
      Must(registry.AddCallbackGauge("q", "Queue.", {"policy"}));
  int queue = 3;
  ASSERT_TRUE(family->SetCallback({"lru"}, [&] { return queue; }).ok());
  EXPECT_EQ(registry.Serialize(),
            "# HELP q Queue.\n# TYPE q gauge\nq{policy=\"lru\"} 3\n");
  queue = 5;
  EXPECT_EQ(registry.Serialize(),
            "# HELP q Queue.\n# TYPE q gauge\nq{policy=\"lru\"} 5\n");
  family->RemoveCallback({"lru"});
  EXPECT_EQ(registry.Serialize(), "# HELP q Queue.\n# TYPE q gauge\n");
}

TEST(RegistryTest, CallbackGaugeErrors) {
  Registry registry;
  CallbackGaugeFamily* family = Must(registry.AddCallbackGauge("q", "", {"p"}));
  EXPECT_FALSE(family->SetCallback({}, [] { return 1.0; }).ok());
  EXPECT_FALSE(family->SetCallback({"a"}, nullptr).ok());
}

TEST(RegistryTest, DefaultLatencyBucketsAreValid) {
  const std::vector<double> b = DefaultLatencyBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front(), 0.001);
  EXPECT_EQ(b.back(), 60);
  Registry registry;
  EXPECT_TRUE(registry.AddHistogram("h", "", {}, b).ok());
}

// Hot path from many threads while another thread scrapes. Children are
// looked up before the threads start, so the only cross-thread state is the
// atomics: this test is meant to run clean under --config=tsan.
TEST(RegistryConcurrencyTest, HotPathSumsExactlyWhileScraping) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  Registry registry;
  Counter* c = Must(
      Must(registry.AddCounter("c_total", "", {"p"}))->WithLabels({"lru"}));
  Gauge* g = Must(Must(registry.AddGauge("g", "", {}))->WithLabels({}));
  Histogram* h =
      Must(Must(registry.AddHistogram("h", "", {}, {0.5}))->WithLabels({}));
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) (void)registry.Serialize();
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        c->Inc();
        g->Inc(2);
        g->Dec();
        h->Observe(i % 2 == 0 ? 0.25 : 1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  done = true;
  scraper.join();
  constexpr uint64_t kTotal = kThreads * kPerThread;
  EXPECT_EQ(c->Value(), kTotal);
  EXPECT_EQ(g->Value(), kTotal);
  const Histogram::Snapshot s = h->Collect();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{kTotal / 2, kTotal}));
  EXPECT_EQ(s.sum, kTotal / 2 * 0.25 + kTotal / 2 * 1.0);
}

// Threads racing to create and look up the same and different children.
TEST(RegistryConcurrencyTest, ConcurrentWithLabelsAgree) {
  constexpr int kThreads = 8;
  Registry registry;
  std::vector<Counter*> shared(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CounterFamily* f = Must(registry.AddCounter("c_total", "", {"k"}));
      for (int i = 0; i < 200; ++i) {
        Must(f->WithLabels({std::to_string(i)}))->Inc();
        if (i % 50 == 0) (void)registry.Serialize();
      }
      shared[t] = Must(f->WithLabels({"same"}));
    });
  }
  for (std::thread& t : threads) t.join();
  CounterFamily* f = Must(registry.AddCounter("c_total", "", {"k"}));
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(shared[t], shared[0]);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(Must(f->WithLabels({std::to_string(i)}))->Value(), kThreads);
  }
}

}  // namespace
}  // namespace moeserve::metrics
