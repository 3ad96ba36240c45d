// Test support for the golden tests (doctest assertions; tests only, not the
// benchmarks, which include golden.h): a golden model loaded on the CPU set
// under test, and its greedy continuation compared with llama.cpp's.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/cpu_isa_under_test.h"
#include "tests/golden.h"

namespace prefixd::testing {

// A golden model on a 2-thread CPU backend of the set under test.
struct LoadedGolden {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

inline LoadedGolden load_golden_model(const GoldenModel& g) {
  LoadedGolden l;
  l.backend = make_cpu_backend(2, isa_under_test());
  auto file = GgufFile::open(g.model_file);
  REQUIRE_MESSAGE(file.ok(), file.message());
  auto model = Model::load(file.value(), *l.backend);
  REQUIRE_MESSAGE(model.ok(), model.message());
  l.model = std::move(model.value());
  return l;
}

// Greedy continuation from `last_logits` (the prompt's last row, the runner
// at position c.ids.size()), compared with the reference up to the first
// near-tie (gap below twice the tolerance), after which either choice is
// acceptable.
inline void check_greedy(SequenceRunner& r, const GoldenModel& g, const GoldenCase& c, std::vector<float> last_logits,
                         float tol) {
  int32_t pos = static_cast<int32_t>(c.ids.size());
  for (size_t step = 0; step < c.greedy_ids.size(); ++step) {
    if (c.greedy_top2_gaps[step] < 2 * tol) break;
    int32_t next = argmax(last_logits.data(), g.n_vocab);
    REQUIRE_MESSAGE(next == c.greedy_ids[step], c.name << " greedy step " << step);
    last_logits = r.run({next}, pos++, false);
  }
}

}  // namespace prefixd::testing
