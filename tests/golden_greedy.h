// Test support: the greedy continuation of a golden case compared with
// llama.cpp's (doctest assertions; tests only, not the benchmarks).
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "tests/golden.h"

namespace prefixd::testing {

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
