// The fast path self-check mechanism (kernels/cuda/self_check.h) on the CPU:
// a wrong fast path (off by more than the tolerance, not finite, failing to
// run, the wrong length) is switched off with its error and the simple path
// keeps serving; a right one (within the dtype-derived tolerance) stays on;
// the registry counts calls and reports verdicts for /health and /metrics.
// Also the batch flash decode's check runs (decode_check_batch.h).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "kernels/cuda/decode_check_batch.h"
#include "kernels/cuda/self_check.h"

using namespace prefixd;
using namespace prefixd::cuda;

namespace {

// A simple path: softmax-weighted sums of random values (an attention-like output).
std::vector<float> simple_output(size_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> out(n);  // (n) f32
  for (float& x : out) x = u(rng);
  return out;
}

CheckRun returns(std::vector<float> values) {
  return [values](std::vector<float>* out) {
    *out = values;
    return Status::ok_status();
  };
}

const FastPathState* find(const FastPathReport& r, const std::string& name) {
  for (const FastPathState& p : r.paths)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

TEST_CASE("tolerances follow the dtype the fast path rounds to") {
  CHECK(unit_roundoff(DType::BF16) == std::ldexp(1.0, -8));
  CHECK(unit_roundoff(DType::F16) == std::ldexp(1.0, -11));
  CHECK(unit_roundoff(DType::F32) == std::ldexp(1.0, -24));
  CHECK(attention_tolerance(DType::BF16, 1.0) == doctest::Approx(4.0 / 256 + 1e-5));
  CHECK(attention_tolerance(DType::F16, 2.0) == doctest::Approx(8.0 / 2048 + 1e-5));
  CHECK(attention_tolerance(DType::F16, 1.0) < attention_tolerance(DType::BF16, 1.0));
}

TEST_CASE("compare_outputs finds the worst element and counts those beyond the tolerance") {
  const std::vector<float> simple = {0.0f, 1.0f, -1.0f, 0.5f};
  std::vector<float> fast = {0.001f, 1.0f, -1.2f, 0.5f};
  Comparison c = compare_outputs(fast.data(), simple.data(), fast.size(), 0.01);
  CHECK(c.n_bad == 1);
  CHECK(c.worst_index == 2);
  CHECK(c.max_error == doctest::Approx(0.2).epsilon(1e-6));
  CHECK_FALSE(c.passed());
  c = compare_outputs(fast.data(), simple.data(), fast.size(), 0.25);
  CHECK(c.passed());
  fast[3] = std::numeric_limits<float>::quiet_NaN();
  c = compare_outputs(fast.data(), simple.data(), fast.size(), 1e9);
  CHECK(c.n_bad == 1);
  CHECK(c.worst_index == 3);
  CHECK(std::isinf(c.max_error));
}

TEST_CASE("a right fast path stays on; a wrong one is switched off with its error") {
  FastPathRegistry reg;
  reg.declare("cudnn_prefill", true, "cudnn 9.19.0");
  reg.declare("simple_prefill", true, "launch_attention_prefill");
  const std::vector<float> ref = simple_output(4096);
  const double tol = attention_tolerance(DType::BF16, 1.0);

  // Right: every element within the tolerance (rounding-sized differences).
  std::vector<float> close = ref;
  for (size_t i = 0; i < close.size(); ++i) close[i] += float(int(i % 7) - 3) * float(tol / 4);
  SelfCheckVerdict v = run_self_check(reg, "cudnn_prefill", "bf16 bucket a", tol, returns(close), returns(ref));
  CHECK(v.passed);
  CHECK(v.error.empty());
  CHECK(v.max_error <= tol);
  CHECK(reg.enabled("cudnn_prefill"));

  // Wrong: one element off by a masking-sized error.
  std::vector<float> wrong = ref;
  wrong[1234] += 0.05f;
  v = run_self_check(reg, "cudnn_prefill", "bf16 bucket b", tol, returns(wrong), returns(ref));
  CHECK_FALSE(v.passed);
  CHECK(v.max_error == doctest::Approx(0.05).epsilon(1e-3));
  CHECK(v.error.find("1 of 4096") != std::string::npos);
  CHECK(v.error.find("1234") != std::string::npos);
  CHECK_FALSE(reg.enabled("cudnn_prefill"));
  CHECK(reg.enabled("simple_prefill"));  // the fallback keeps serving

  const FastPathReport r = reg.report();
  REQUIRE(r.self_checks.size() == 2);
  CHECK(r.self_checks[0].passed);
  CHECK(r.self_checks[0].shape == "bf16 bucket a");
  CHECK_FALSE(r.self_checks[1].passed);
  const FastPathState* p = find(r, "cudnn_prefill");
  REQUIRE(p != nullptr);
  CHECK_FALSE(p->enabled);
  CHECK(p->detail.find("self-check failed on bf16 bucket b") != std::string::npos);
}

TEST_CASE("a fast path that fails to run, writes NaN or the wrong length is switched off") {
  const std::vector<float> ref = simple_output(64);
  const double tol = attention_tolerance(DType::F16, 1.0);
  {
    FastPathRegistry reg;
    reg.declare("fast", true, "");
    const CheckRun fails = [](std::vector<float>*) { return Status::error("CUDNN_STATUS_EXECUTION_FAILED"); };
    const SelfCheckVerdict v = run_self_check(reg, "fast", "s", tol, fails, returns(ref));
    CHECK_FALSE(v.passed);
    CHECK(v.error.find("EXECUTION_FAILED") != std::string::npos);
    CHECK_FALSE(reg.enabled("fast"));
  }
  {
    FastPathRegistry reg;
    reg.declare("fast", true, "");
    std::vector<float> nan = ref;
    nan[10] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(run_self_check(reg, "fast", "s", tol, returns(nan), returns(ref)).passed);
    CHECK_FALSE(reg.enabled("fast"));
  }
  {
    FastPathRegistry reg;
    reg.declare("fast", true, "");
    std::vector<float> shorter(ref.begin(), ref.end() - 1);
    const SelfCheckVerdict v = run_self_check(reg, "fast", "s", tol, returns(shorter), returns(ref));
    CHECK_FALSE(v.passed);
    CHECK(v.error.find("63 values") != std::string::npos);
    CHECK_FALSE(reg.enabled("fast"));
  }
  {
    // The reference failing proves nothing about the fast path: it is not trusted either.
    FastPathRegistry reg;
    reg.declare("fast", true, "");
    const CheckRun broken = [](std::vector<float>*) { return Status::error("launch failed"); };
    CHECK_FALSE(run_self_check(reg, "fast", "s", tol, returns(ref), broken).passed);
    CHECK_FALSE(reg.enabled("fast"));
  }
}

TEST_CASE("once switched off a path stays off, whatever later checks say") {
  FastPathRegistry reg;
  reg.declare("fast", true, "");
  const std::vector<float> ref = simple_output(16);
  std::vector<float> wrong = ref;
  wrong[0] += 1.0f;
  run_self_check(reg, "fast", "a", 1e-3, returns(wrong), returns(ref));
  CHECK(run_self_check(reg, "fast", "b", 1e-3, returns(ref), returns(ref)).passed);
  CHECK_FALSE(reg.enabled("fast"));
}

TEST_CASE("the registry counts calls, keeps summaries and is read from other threads") {
  FastPathRegistry reg;
  reg.declare("cudnn_prefill", true, "cudnn 9.19.0");
  reg.set_summary("prefill_attention", "cudnn 9.19.0");
  reg.set_summary("prefill_attention", "none: self-check failed");
  CHECK_FALSE(reg.enabled("undeclared"));
  std::thread reader([&] {
    for (int i = 0; i < 1000; ++i) (void)reg.report();
  });
  for (int i = 0; i < 1000; ++i) reg.count_call("cudnn_prefill", 2);
  reg.count_call("simple_prefill");
  reader.join();
  const FastPathReport r = reg.report();
  REQUIRE(r.summary.size() == 1);
  CHECK(r.summary[0].second == "none: self-check failed");
  CHECK(find(r, "cudnn_prefill")->calls == 2000);
  CHECK(find(r, "simple_prefill")->calls == 1);
  CHECK(find(r, "simple_prefill")->enabled);
  CHECK_FALSE(r.empty());
  CHECK(FastPathReport{}.empty());
}

TEST_CASE("flash decode's check batch reaches every branch: one key, a partial block, split keys, shuffled ids") {
  for (int32_t bs : {1, 7, 16, 32, 256}) {
    CAPTURE(bs);
    const DecodeCheckBatch c = decode_check_batch(bs);
    REQUIRE(validate_batch(c.batch, bs).ok());
    const PackedBatch p = pack_batch(c.batch, bs);
    CHECK(p.n_decode_seqs == 3);  // every row a decode row
    CHECK(p.n_prefill_tiles == 0);
    std::vector<int32_t> kv;
    for (const BatchSeq& s : c.batch.seqs) {
      CHECK(s.n_q == 1);
      kv.push_back(s.pos0 + 1);
    }
    CHECK(kv[0] == 1);                                    // a single key
    if (bs > 1) CHECK(kv[1] % bs != 0);                   // its last block partial
    if (bs > 1) CHECK(kv[2] % bs != 0);
    CHECK(kv[2] > 3 * kDecodeSplitChunkKeys);             // keys over several splits
    CHECK(c.max_kv_len == kv[2]);
    CHECK(p.max_decode_kv_len == kv[2]);
    // Ids distinct, in the pool, not in order, and not all of them named.
    const std::set<int32_t> ids(c.batch.block_tables.begin(), c.batch.block_tables.end());
    CHECK(ids.size() == c.batch.block_tables.size());
    CHECK(*ids.begin() >= 0);
    CHECK(*ids.rbegin() < c.n_blocks);
    CHECK(static_cast<int32_t>(ids.size()) < c.n_blocks);
    CHECK_FALSE(std::is_sorted(c.batch.block_tables.begin(), c.batch.block_tables.end()));
  }
}
