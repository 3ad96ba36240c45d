// Write-through's bookkeeping under load: the writer priority option (parse,
// names, errors), the lag histogram's quantiles (exact to one bucket), and
// the tier manager timing every disk write from its queueing to its store.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "storage/lag_histogram.h"
#include "storage/tier_manager.h"
#include "storage/writer_priority.h"
#include "tests/temp_dir.h"
#include "tests/test_blocks.h"

using namespace prefixd;
using namespace prefixd::testing;

TEST_CASE("writer_priority_parses_idle_and_batch_levels_and_names_bad_values") {
  Result<WriterPriority> idle = parse_writer_priority("idle");
  REQUIRE(idle.ok());
  CHECK(idle->policy == WriterPriority::Policy::kIdle);
  CHECK(writer_priority_name(*idle) == "idle");
  Result<WriterPriority> batch = parse_writer_priority("batch:7");
  REQUIRE(batch.ok());
  CHECK(batch->policy == WriterPriority::Policy::kBatch);
  CHECK(batch->nice == 7);
  CHECK(writer_priority_name(*batch) == "batch:7");
  CHECK(writer_priority_name(WriterPriority{}) == "batch:10");
  for (const char* bad : {"", "batch", "batch:", "batch:20", "batch:-1", "batch:5x", "nice:5", "IDLE"}) {
    CAPTURE(bad);
    Result<WriterPriority> r = parse_writer_priority(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message() == "cache writer priority '" + std::string(bad) +
                             "': expected idle or batch:N with N in 0..19");
  }
}

TEST_CASE("lag_histogram_quantiles_are_bucket_bounds_within_a_fifth_and_max_is_exact") {
  LagHistogram h;
  CHECK(h.summary().count == 0);
  CHECK(h.summary().p99_ms == 0);
  for (int i = 1; i <= 1000; ++i) h.add(static_cast<double>(i));  // 1..1000 ms
  const LagSummary s = h.summary();
  CHECK(s.count == 1000);
  CHECK(s.max_ms == 1000.0);
  CHECK(s.p50_ms >= 500.0);
  CHECK(s.p50_ms < 500.0 * 1.19);
  CHECK(s.p99_ms >= 990.0);
  CHECK(s.p99_ms <= 1000.0);  // capped by the max
  // Every value lands in the bucket whose bound is the first at or above it.
  for (int i = 0; i < LagHistogram::kBuckets - 1; ++i) {
    LagHistogram one;
    one.add(LagHistogram::bound_ms(i));
    CHECK(one.summary().p50_ms == doctest::Approx(LagHistogram::bound_ms(i)));
  }
  LagHistogram tiny;
  tiny.add(0.0);
  tiny.add(0.1);
  CHECK(tiny.summary().p99_ms == doctest::Approx(0.1));  // bucket 0's bound (0.25) capped by the max
}

TEST_CASE("tier_manager_times_every_disk_write_from_queueing_to_store") {
  TempDir dir;
  TierManagerOptions o;
  o.model_fingerprint = kFingerprint;
  o.geometry = kGeom;
  o.disk = DiskTierOptions{};
  o.disk->path = dir.path;
  for (const char* priority : {"idle", "batch:10"}) {
    CAPTURE(priority);
    o.writer_priority = parse_writer_priority(priority).value();
    auto tm = TierManager::create(o);
    REQUIRE_MESSAGE(tm.ok(), tm.message());
    TierManager& t = *tm.value();
    REQUIRE(t.clear().ok());
    for (uint64_t i = 0; i < 20; ++i) {
      const TestBlock b = make_block(i);
      t.offload(b.key, b.record, OffloadReason::kPublished);
    }
    t.wait_idle();
    const TierManagerStats s = t.stats();
    CHECK(s.offload_disk_blocks == 20);
    CHECK(s.disk_write_lag.count == 20);
    CHECK(s.disk_write_lag.max_ms > 0);
    CHECK(s.disk_write_lag.p50_ms <= s.disk_write_lag.p99_ms);
    CHECK(s.disk_write_lag.p99_ms <= s.disk_write_lag.max_ms);
    CHECK(s.offload_dropped == 0);
  }
}
