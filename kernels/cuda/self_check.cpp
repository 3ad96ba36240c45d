// The self-check comparison, verdicts and the fast path registry (self_check.h).
#include "kernels/cuda/self_check.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace prefixd::cuda {

double unit_roundoff(DType t) {
  switch (t) {
    case DType::F32: return std::ldexp(1.0, -24);
    case DType::F16: return std::ldexp(1.0, -11);
    case DType::BF16: return std::ldexp(1.0, -8);
  }
  return std::ldexp(1.0, -8);
}

double attention_tolerance(DType operand, double max_abs_v) {
  return 4.0 * unit_roundoff(operand) * max_abs_v + 1e-5;
}

Comparison compare_outputs(const float* fast, const float* simple, size_t n, double tolerance) {
  Comparison c;
  for (size_t i = 0; i < n; ++i) {
    const double f = fast[i], s = simple[i];
    double err = std::fabs(f - s);
    if (!std::isfinite(f) || !std::isfinite(s)) err = std::numeric_limits<double>::infinity();
    if (!(err <= tolerance)) ++c.n_bad;
    if (err > c.max_error) {
      c.max_error = err;
      c.worst_index = i;
    }
  }
  return c;
}

void FastPathRegistry::declare(const std::string& path, bool enabled, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  FastPathState* p = find_locked(path);
  if (p == nullptr) {
    state_.paths.push_back(FastPathState{path, enabled, detail, 0});
    return;
  }
  p->enabled = enabled;
  p->detail = detail;
}

void FastPathRegistry::set_summary(const std::string& family, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [f, l] : state_.summary) {
    if (f == family) {
      l = line;
      return;
    }
  }
  state_.summary.emplace_back(family, line);
}

bool FastPathRegistry::enabled(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const FastPathState& p : state_.paths)
    if (p.name == path) return p.enabled;
  return false;
}

void FastPathRegistry::disable(const std::string& path, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  FastPathState* p = find_locked(path);
  if (p == nullptr) {
    state_.paths.push_back(FastPathState{path, false, why, 0});
    return;
  }
  p->enabled = false;
  p->detail = why;
}

void FastPathRegistry::count_call(const std::string& path, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  FastPathState* p = find_locked(path);
  if (p == nullptr) {
    state_.paths.push_back(FastPathState{path, true, "", n});
    return;
  }
  p->calls += n;
}

void FastPathRegistry::record(const SelfCheckVerdict& verdict) {
  if (!verdict.passed) disable(verdict.path, "self-check failed on " + verdict.shape + ": " + verdict.error);
  std::lock_guard<std::mutex> lock(mu_);
  state_.self_checks.push_back(verdict);
}

FastPathReport FastPathRegistry::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

FastPathState* FastPathRegistry::find_locked(const std::string& path) {
  for (FastPathState& p : state_.paths)
    if (p.name == path) return &p;
  return nullptr;
}

std::function<void(const std::string&)> info_log_or_stderr(std::function<void(const std::string&)> log) {
  if (log) return log;
  return [](const std::string& line) { std::fprintf(stderr, "prefixd [info] %s\n", line.c_str()); };
}

SelfCheckVerdict run_self_check(FastPathRegistry& registry, const std::string& path, const std::string& shape,
                                double tolerance, const CheckRun& fast, const CheckRun& simple) {
  SelfCheckVerdict v;
  v.path = path;
  v.shape = shape;
  v.tolerance = tolerance;
  std::vector<float> out_fast, out_simple;
  Status s = simple(&out_simple);
  if (!s.ok()) {
    v.error = "the simple kernel failed: " + s.message();
  } else if (!(s = fast(&out_fast)).ok()) {
    v.error = "it failed to run: " + s.message();
  } else if (out_fast.size() != out_simple.size()) {
    v.error = "it wrote " + std::to_string(out_fast.size()) + " values, the simple kernel " +
              std::to_string(out_simple.size());
  } else {
    const Comparison c = compare_outputs(out_fast.data(), out_simple.data(), out_fast.size(), tolerance);
    v.max_error = c.max_error;
    v.passed = c.passed();
    if (!v.passed)
      v.error = std::to_string(c.n_bad) + " of " + std::to_string(out_fast.size()) +
                " values off; worst at " + std::to_string(c.worst_index) + ": " +
                std::to_string(out_fast[c.worst_index]) + " vs " + std::to_string(out_simple[c.worst_index]);
  }
  if (!v.error.empty()) v.passed = false;
  registry.record(v);
  return v;
}

}  // namespace prefixd::cuda
