// Start-up self-checks of the CUDA backend's fast paths, and the registry of
// which paths may serve. A fast path (a cuDNN plan, a tuned kernel) runs once
// on random data against the simple kernel it replaces; a path whose output
// differs beyond a tolerance derived from the dtypes it rounds to, or that
// fails to run, is switched off for the process and the simple kernel serves.
// Plain C++ (no CUDA types): the CUDA code supplies the two runs as functions,
// and tests/test_fast_path_self_check.cpp injects wrong and right ones on the CPU.
//
// Thread-safety: every FastPathRegistry method may be called from any thread
// (the engine thread records and counts, HTTP threads read report()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/dtype.h"
#include "kernels/fast_path_report.h"

namespace prefixd::cuda {

// Unit roundoff of a storage type (half the gap between 1 and the next
// value): F32 2^-24, F16 2^-11, BF16 2^-8.
double unit_roundoff(DType t);

// Bound on |fast - simple| for attention outputs when the fast path rounds
// the softmax probabilities to `operand` and the check's queries are exactly
// representable in it (so rounding Q costs nothing): every output is a convex
// combination of V rows, and rounding each probability by a relative u moves
// it by at most u * max|V|. Allowed: 4 u max|V| (the normalisation and
// accumulation order of a flash kernel) + 1e-5 (exp, F32 sums).
double attention_tolerance(DType operand, double max_abs_v);

// Element-wise comparison of a fast path's output with the simple kernel's.
struct Comparison {
  double max_error = 0;    // largest |fast - simple|; inf when an element is not finite
  size_t worst_index = 0;  // where it is
  size_t n_bad = 0;        // elements beyond the tolerance, or not finite in either output
  bool passed() const { return n_bad == 0; }
};
Comparison compare_outputs(const float* fast, const float* simple, size_t n, double tolerance);

// One run of a path on the check's data: fills `out` or fails.
using CheckRun = std::function<Status(std::vector<float>* out)>;

// Which fast paths may serve, how often each path ran, and the verdicts.
class FastPathRegistry {
 public:
  // Declares `path` (first call) or updates its state; `detail` says which
  // library serves it or why it cannot.
  void declare(const std::string& path, bool enabled, const std::string& detail);
  // One summary line of an operation family, e.g. ("prefill_attention", "cudnn 9.19.0").
  void set_summary(const std::string& family, const std::string& line);
  // Whether `path` is declared and enabled.
  bool enabled(const std::string& path) const;
  // Switches `path` off for the process.
  void disable(const std::string& path, const std::string& why);
  void count_call(const std::string& path, int64_t n = 1);
  // Keeps a verdict; a failed one switches its path off.
  void record(const SelfCheckVerdict& verdict);
  FastPathReport report() const;

 private:
  FastPathState* find_locked(const std::string& path);  // mu_ held; null when undeclared
  mutable std::mutex mu_;
  FastPathReport state_;
};

// `log`, or when null a function writing "prefixd [info] LINE" to stderr:
// where the self-checks' verdict lines go.
std::function<void(const std::string&)> info_log_or_stderr(std::function<void(const std::string&)> log);

// Runs `fast` and `simple` on the same data, compares their outputs within
// `tolerance`, records the verdict in `registry` (a failure switches `path`
// off) and returns it. A run that fails, or outputs of different lengths,
// fail the check.
SelfCheckVerdict run_self_check(FastPathRegistry& registry, const std::string& path, const std::string& shape,
                                double tolerance, const CheckRun& fast, const CheckRun& simple);

}  // namespace prefixd::cuda
