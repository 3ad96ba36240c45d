// Tests for Sampler: greedy, seeded determinism, top-k / top-p / min-p cuts
// (checked by sampling many times from small distributions), temperature,
// repetition penalty, and agreement with a full-sort reference on a 150k vocab.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/sampler.h"

using namespace prefixd;

namespace {

SamplingParams seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  p.has_seed = true;
  return p;
}

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Fraction of n draws that picked each id.
std::map<int32_t, double> frequencies(const SamplingParams& params, const std::vector<float>& logits,
                                      int n) {
  Sampler s(params);
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) f[s.sample(logits.data(), static_cast<int32_t>(logits.size()), {})] += 1.0 / n;
  return f;
}

std::vector<float> random_logits(int n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& x : l) x = d(rng);
  return l;
}

const std::vector<double> kProbs = {0.5, 0.3, 0.15, 0.05};

}  // namespace

TEST_CASE("temperature 0 is argmax with ties going to the lowest id") {
  SamplingParams p = seeded(1);
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
  CHECK(s.sample(l.data(), 5, {}) == 1);
  std::vector<float> all_equal(7, 0.5f);
  CHECK(s.sample(all_equal.data(), 7, {}) == 0);
}

// The scan greedy_token's two passes must agree with: the first strictly greater logit wins.
int32_t first_greatest(const std::vector<float>& l) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(l.size()); ++i)
    if (l[i] > l[best]) best = i;
  return best;
}

TEST_CASE("greedy_token: the first highest logit at every length and place, NaN never winning") {
  const float nan = std::nanf(""), inf = INFINITY;
  CHECK(greedy_token(std::vector<float>{nan, 5.0f, 7.0f}.data(), 3) == 0);  // nothing is > a NaN first
  CHECK(greedy_token(std::vector<float>{-inf, -inf, -inf}.data(), 3) == 0);
  std::mt19937 rng(7);
  for (int32_t n : {1, 2, 15, 16, 17, 31, 32, 33, 100, 1000, 49152}) {
    for (int trial = 0; trial < 20; ++trial) {
      // Few distinct values: ties everywhere, zeros of both signs.
      std::vector<float> l(static_cast<size_t>(n));
      for (float& x : l) x = static_cast<float>(static_cast<int>(rng() % 7) - 5) * (rng() % 2 ? 1.0f : -1.0f);
      if (trial % 4 == 1) l[rng() % n] = inf;
      if (trial % 4 == 2 && n > 1) l[1 + rng() % (n - 1)] = nan;
      if (trial % 4 == 3) l[n - 1] = 100.0f;  // the maximum in the tail past the last 16
      CAPTURE(n);
      CAPTURE(trial);
      CHECK(greedy_token(l.data(), n) == first_greatest(l));
    }
  }
  CHECK(greedy_token(std::vector<float>{-0.0f, 0.0f, -0.0f}.data(), 3) == 0);  // +0 and -0 tie
}

TEST_CASE("top_k = 1 equals greedy at any temperature") {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const auto l = random_logits(1000, seed, 3.0f);
    SamplingParams g = seeded(seed);
    g.temperature = 0;
    SamplingParams k1 = seeded(seed);
    k1.temperature = 1.5f;
    k1.top_k = 1;
    Sampler sg(g), sk(k1);
    CHECK(sk.sample(l.data(), 1000, {}) == sg.sample(l.data(), 1000, {}));
  }
  // Ties: lowest id, as greedy.
  std::vector<float> tie = {1.0f, 2.0f, 2.0f};
  SamplingParams k1 = seeded(3);
  k1.top_k = 1;
  Sampler sk(k1);
  CHECK(sk.sample(tie.data(), 3, {}) == 1);
}

TEST_CASE("the same seed and logits give the same tokens; different seeds differ") {
  const auto l = random_logits(5000, 7, 2.0f);
  SamplingParams p = seeded(1234);
  p.top_p = 0.95f;
  p.temperature = 0.8f;
  Sampler a(p), b(p);
  SamplingParams q = p;
  q.seed = 1235;
  Sampler c(q);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a.sample(l.data(), 5000, ta));
    tb.push_back(b.sample(l.data(), 5000, tb));
    tc.push_back(c.sample(l.data(), 5000, tc));
  }
  CHECK(ta == tb);
  CHECK(ta != tc);
  CHECK(a.seed() == 1234);
}

TEST_CASE("unseeded samplers draw their own random seeds") {
  SamplingParams p;
  Sampler a(p), b(p);
  CHECK(a.seed() != b.seed());
}

TEST_CASE("plain sampling follows the softmax") {
  SamplingParams p = seeded(5);
  auto f = frequencies(p, logits_of(kProbs), 40000);
  for (int i = 0; i < 4; ++i) CHECK(f[i] == doctest::Approx(kProbs[i]).epsilon(0.05));
}

TEST_CASE("top_k keeps the k most likely tokens") {
  SamplingParams p = seeded(6);
  p.top_k = 2;
  auto f = frequencies(p, logits_of(kProbs), 40000);
  CHECK(f.size() == 2);
  CHECK(f[0] == doctest::Approx(0.5 / 0.8).epsilon(0.03));
  CHECK(f[1] == doctest::Approx(0.3 / 0.8).epsilon(0.05));
}

TEST_CASE("top_p keeps the smallest head reaching the mass") {
  SamplingParams p = seeded(7);
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.5 + 0.3: keeps ids 0 and 1
  auto f = frequencies(p, logits_of(kProbs), 40000);
  CHECK(f.size() == 2);
  CHECK(f[0] == doctest::Approx(0.5 / 0.8).epsilon(0.03));
  p.top_p = 0.9f;  // 0.8 < 0.9 <= 0.95: keeps 0, 1, 2
  f = frequencies(p, logits_of(kProbs), 40000);
  CHECK(f.size() == 3);
  CHECK(f[2] == doctest::Approx(0.15 / 0.95).epsilon(0.08));
  p.top_p = 0.4f;  // the top token alone
  f = frequencies(p, logits_of(kProbs), 1000);
  CHECK(f.size() == 1);
  CHECK(f[0] == doctest::Approx(1.0));
}

TEST_CASE("min_p drops tokens below min_p times the top probability") {
  SamplingParams p = seeded(8);
  p.min_p = 0.35f;  // threshold 0.175: keeps 0 and 1
  auto f = frequencies(p, logits_of(kProbs), 40000);
  CHECK(f.size() == 2);
  CHECK(f[1] == doctest::Approx(0.3 / 0.8).epsilon(0.05));
  p.min_p = 0.25f;  // threshold 0.125: keeps 0, 1, 2
  f = frequencies(p, logits_of(kProbs), 40000);
  CHECK(f.size() == 3);
}

TEST_CASE("top_p and min_p cut on the untempered distribution; temperature reshapes the rest") {
  SamplingParams p = seeded(9);
  p.temperature = 0.5f;  // p^2: 0.25, 0.09, 0.0225, 0.0025
  auto f = frequencies(p, logits_of(kProbs), 40000);
  const double z = 0.25 + 0.09 + 0.0225 + 0.0025;
  CHECK(f[0] == doctest::Approx(0.25 / z).epsilon(0.03));
  CHECK(f[1] == doctest::Approx(0.09 / z).epsilon(0.06));
  // With temperature 0.5, tempered p0 is 0.69 > 0.6, but top_p still uses the
  // untempered 0.5: two tokens survive.
  p.top_p = 0.6f;
  f = frequencies(p, logits_of(kProbs), 40000);
  CHECK(f.size() == 2);
  CHECK(f[0] == doctest::Approx(0.25 / 0.34).epsilon(0.03));
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits once per token") {
  SamplingParams p = seeded(1);
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> pos = {2.0f, 1.9f, -1.0f};
  CHECK(s.sample(pos.data(), 3, {}) == 0);
  CHECK(s.sample(pos.data(), 3, {0}) == 1);  // 2.0 / 2 = 1.0 < 1.9
  std::vector<float> neg = {-1.0f, -1.5f};
  CHECK(s.sample(neg.data(), 2, {0}) == 1);  // -1 * 2 = -2 < -1.5
  std::vector<float> twice = {4.0f, 1.5f};
  CHECK(s.sample(twice.data(), 2, {0, 0, 0}) == 0);  // 4 / 2 = 2 > 1.5 (not 4 / 8)
  // Out-of-range ids in the history are ignored; logits are not modified.
  CHECK(s.sample(pos.data(), 3, {-1, 99}) == 0);
  CHECK(pos[0] == 2.0f);
}

TEST_CASE("validate_sampling_params rejects out-of-range values") {
  CHECK(validate_sampling_params(SamplingParams{}).ok());
  SamplingParams p;
  p.temperature = -0.1f;
  CHECK_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.top_p = 0;
  CHECK_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.top_p = 1.5f;
  CHECK_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.min_p = -1;
  CHECK_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.top_k = -3;
  CHECK_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.repetition_penalty = 0;
  CHECK_FALSE(validate_sampling_params(p).ok());
  p = {};
  p.temperature = NAN;
  CHECK_FALSE(validate_sampling_params(p).ok());
}

namespace {

// Reference: full sort, then top-k, top-p, min-p exactly as documented.
std::set<int32_t> reference_kept(const std::vector<float>& l, const SamplingParams& p) {
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(p.top_k);
  const double m = l[order[0]];
  double total = 0;
  for (int32_t id : order) total += std::exp(l[id] - m);
  size_t keep = order.size();
  if (p.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      cum += std::exp(l[order[i]] - m) / total;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::set<int32_t> kept;
  for (size_t i = 0; i < keep; ++i) {
    if (std::exp(l[order[i]] - m) >= p.min_p) kept.insert(order[i]);
  }
  return kept;
}

}  // namespace

TEST_CASE("on a 150k vocabulary every draw is in the reference kept set") {
  const int32_t n = 150000;
  const auto l = random_logits(n, 42, 2.0f);
  struct Case { int top_k; float top_p; float min_p; };
  for (const Case c : {Case{0, 0.5f, 0.0f}, Case{0, 0.95f, 0.0f}, Case{40, 1.0f, 0.0f},
                       Case{0, 1.0f, 0.05f}, Case{100, 0.9f, 0.02f}}) {
    SamplingParams p = seeded(11);
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    const auto kept = reference_kept(l, p);
    Sampler s(p);
    std::set<int32_t> drawn;
    for (int i = 0; i < 200; ++i) {
      const int32_t t = s.sample(l.data(), n, {});
      REQUIRE(kept.count(t) == 1);
      drawn.insert(t);
    }
    INFO("kept ", kept.size());
    CHECK(kept.size() > 1);  // the cases are chosen to leave a choice
    CHECK(drawn.size() > 1);
  }
}

TEST_CASE("top_p over equal logits keeps the lowest ids") {
  const std::vector<float> flat(1000, 0.25f);
  SamplingParams p = seeded(12);
  p.top_p = 0.1005f;  // 101 tokens of 0.001 each reach the mass
  Sampler s(p);
  std::set<int32_t> drawn;
  for (int i = 0; i < 3000; ++i) drawn.insert(s.sample(flat.data(), 1000, {}));
  CHECK(*drawn.begin() == 0);
  CHECK(*drawn.rbegin() == 100);
  CHECK(drawn.size() == 101);
}
