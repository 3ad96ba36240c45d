// Log-softmax of one logits row at a chosen token and its top N: the engine
// thread runs this per output row, so it stays O(n_vocab) with no sort.
#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "common/result.h"

namespace prefixd {

double log_sum_exp(const float* logits, int32_t n_vocab) {
  float max_logit = logits[0];
  for (int32_t i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  // exp(x - max) <= 1 in F32 loses nothing that matters; the sum of up to
  // ~10^6 terms is kept in F64 so that it does not lose the small ones.
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - max_logit);
  return static_cast<double>(max_logit) + std::log(sum);
}

PositionLogprobs position_logprobs(const float* logits, int32_t n_vocab, int32_t chosen,
                                   int32_t top_n) {
  PREFIXD_CHECK(n_vocab > 0, "position_logprobs: empty logits row");
  PREFIXD_CHECK(chosen >= 0 && chosen < n_vocab,
                "position_logprobs: chosen token outside the vocabulary");
  PREFIXD_CHECK(top_n >= 0 && top_n <= kMaxTopLogprobs, "position_logprobs: top_n outside 0..20");
  const double lse = log_sum_exp(logits, n_vocab);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[id]) - lse);
  };

  PositionLogprobs out;
  out.chosen = TokenLogprob{chosen, logprob(chosen)};
  if (top_n == 0) return out;
  // The best `k` so far, best first. Ids come in ascending order and only a
  // strictly larger logit displaces an entry, so equal logits keep the lower
  // id first.
  const int32_t k = std::min(top_n, n_vocab);
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(k) + 1);
  for (int32_t id = 0; id < n_vocab; ++id) {
    const float x = logits[id];
    if (static_cast<int32_t>(best.size()) == k && !(x > logits[best.back()])) continue;
    auto at = std::upper_bound(best.begin(), best.end(), x,
                               [&](float v, int32_t other) { return v > logits[other]; });
    best.insert(at, id);
    if (static_cast<int32_t>(best.size()) > k) best.pop_back();
  }
  out.top.reserve(best.size());
  for (int32_t id : best) out.top.push_back(TokenLogprob{id, logprob(id)});
  return out;
}

}  // namespace prefixd
