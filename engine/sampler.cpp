// Token sampling (see sampler.h). Avoids sorting the whole vocabulary: top-k
// uses nth_element, min-p is a threshold on logits, and top-p sorts a growing
// head of the candidates only until the cumulative mass is reached.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

namespace prefixd {
namespace {

// Total order on candidates: higher logit first, then lower id.
bool better(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Uniform double in [0, 1) from 53 random bits (same on every platform,
// unlike std::uniform_real_distribution).
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Four lanes of floats (GCC vector extensions: SSE on x86-64, NEON on
// aarch64, plain code elsewhere).
using Floats4 = float __attribute__((vector_size(16)));
using Ints4 = int32_t __attribute__((vector_size(16)));

Floats4 load4(const float* p) {
  Floats4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// a > b ? a : b per lane (maxps): a NaN a keeps b.
Floats4 max4(Floats4 a, Floats4 b) { return a > b ? a : b; }

// Up to this k, top-k uses a heap instead of nth_element over the vocabulary.
constexpr int32_t kHeapTopK = 4096;

// Top-p first selects among candidates with at least this untempered weight
// relative to the top token (logit within ~16 of the maximum).
constexpr float kNearWeight = 1e-7f;

}  // namespace

// Two passes over 16 logits at a time, each lane on its own: the maximum,
// then its first index. A scan keeping the first strictly greater logit
// waits on each comparison: 62 us for a 49152-logit row on an Emerald Rapids
// Xeon against 5.7 here (318 against 36 for 248320), a sizeable part of a
// small model's decode step.
int32_t greedy_token(const float* logits, int32_t n_vocab) {
  float best = logits[0];
  if (best != best) return 0;  // nothing is greater than a NaN first logit
  const Floats4 first = {best, best, best, best};
  Floats4 m0 = first, m1 = first, m2 = first, m3 = first;
  int32_t i = 0;
  for (; i + 16 <= n_vocab; i += 16) {
    m0 = max4(load4(logits + i), m0);
    m1 = max4(load4(logits + i + 4), m1);
    m2 = max4(load4(logits + i + 8), m2);
    m3 = max4(load4(logits + i + 12), m3);
  }
  const Floats4 m = max4(max4(m0, m1), max4(m2, m3));
  for (int j = 0; j < 4; ++j) best = m[j] > best ? m[j] : best;
  for (; i < n_vocab; ++i) best = logits[i] > best ? logits[i] : best;
  const Floats4 b = {best, best, best, best};
  int32_t k = 0;
  for (; k + 16 <= n_vocab; k += 16) {
    const Ints4 eq = (load4(logits + k) == b) | (load4(logits + k + 4) == b) |
                     (load4(logits + k + 8) == b) | (load4(logits + k + 12) == b);
    if ((eq[0] | eq[1] | eq[2] | eq[3]) != 0) break;
  }
  for (; k < n_vocab; ++k)
    if (logits[k] == best) return k;
  return 0;  // not reached: best is one of the logits
}

Status validate_sampling_params(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) {
    return Status::error("temperature must be a finite number >= 0");
  }
  if (p.top_k < 0) return Status::error("top_k must be >= 0");
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) {
    return Status::error("top_p must be in (0, 1]");
  }
  if (!std::isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1) {
    return Status::error("min_p must be in [0, 1]");
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0) {
    return Status::error("repetition_penalty must be a finite number > 0");
  }
  return Status::ok_status();
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (params_.has_seed) {
    seed_ = params_.seed;
  } else {
    std::random_device rd;
    seed_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  rng_.seed(seed_);
}

// Within cand_[lo, hi) (every element before lo is better, every element from
// hi on is worse), moves the best candidates to the front so that
// cand_[0, keep) is the shortest head whose weights from lo sum to >= target,
// and returns keep. A quickselect on mass: expected O(hi - lo), no full sort.
size_t Sampler::top_p_head(size_t lo, size_t hi, double target) {
  double need = target;
  while (hi - lo > 32) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(cand_.begin() + static_cast<std::ptrdiff_t>(lo),
                     cand_.begin() + static_cast<std::ptrdiff_t>(mid),
                     cand_.begin() + static_cast<std::ptrdiff_t>(hi), better);
    double upper = 0;  // mass of [lo, mid): all better than the pivot
    for (size_t i = lo; i < mid; ++i) upper += cand_[i].weight;
    if (upper >= need) {
      hi = mid;
      continue;
    }
    upper += cand_[mid].weight;
    if (upper >= need) return mid + 1;
    need -= upper;
    lo = mid + 1;
  }
  std::sort(cand_.begin() + static_cast<std::ptrdiff_t>(lo),
            cand_.begin() + static_cast<std::ptrdiff_t>(hi), better);
  double cum = 0;
  for (size_t i = lo; i < hi; ++i) {
    cum += cand_[i].weight;
    if (cum >= need) return i + 1;
  }
  return std::max<size_t>(hi, 1);  // rounding: keep everything up to hi
}

// Top-p within the near candidates cand_[0, n_near): a histogram of their
// mass over logit buckets finds the bucket where the cumulative mass reaches
// `target` in O(n); only that bucket's candidates are then selected exactly.
size_t Sampler::top_p_near(size_t n_near, float max_logit, double target) {
  constexpr int kBuckets = 1024;
  // Near logits lie within -ln(kNearWeight) ~ 16.12 of the maximum.
  const float scale = static_cast<float>(kBuckets) / 16.5f;
  auto bucket = [&](float logit) {  // 0 = the highest logits; monotone in logit
    return std::min(kBuckets - 1, static_cast<int>((max_logit - logit) * scale));
  };
  double mass[kBuckets] = {};
  for (size_t i = 0; i < n_near; ++i) mass[bucket(cand_[i].logit)] += cand_[i].weight;
  int cut = kBuckets - 1;
  double need = target;
  for (int b = 0; b < kBuckets; ++b) {
    if (mass[b] >= need) {
      cut = b;
      break;
    }
    need -= mass[b];
  }
  auto first = cand_.begin();
  auto above_end = std::partition(first, first + static_cast<std::ptrdiff_t>(n_near),
                                  [&](const Candidate& c) { return bucket(c.logit) < cut; });
  auto cut_end = std::partition(above_end, first + static_cast<std::ptrdiff_t>(n_near),
                                [&](const Candidate& c) { return bucket(c.logit) == cut; });
  return top_p_head(static_cast<size_t>(above_end - first), static_cast<size_t>(cut_end - first),
                    need);
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab,
                        const std::vector<int32_t>& recent_tokens) {
  PREFIXD_CHECK(n_vocab > 0, "sample: empty vocabulary");
  const float* l = penalise(logits, n_vocab, recent_tokens);  // (n_vocab) f32
  if (params_.temperature <= 0) return greedy_token(l, n_vocab);
  collect_top_k(l, n_vocab);
  float max_logit = cand_[0].logit;
  for (const Candidate& c : cand_) max_logit = std::max(max_logit, c.logit);
  if (!std::isfinite(max_logit)) {
    // Degenerate row (all -inf, or +inf present): the best candidate.
    return std::min_element(cand_.begin(), cand_.end(), better)->id;
  }
  if (params_.top_p < 1.0f || params_.min_p > 0.0f) cut_min_p_top_p(max_logit);
  return draw(max_logit);
}

const float* Sampler::penalise(const float* logits, int32_t n_vocab,
                               const std::vector<int32_t>& recent_tokens) {
  if (params_.repetition_penalty == 1.0f || recent_tokens.empty()) return logits;
  // Repetition penalty (llama.cpp): each distinct recent token once; positive
  // logits are divided by the penalty, negative ones multiplied.
  penalised_.assign(logits, logits + n_vocab);
  seen_.clear();
  for (int32_t t : recent_tokens) {
    if (t >= 0 && t < n_vocab) seen_.push_back(t);
  }
  std::sort(seen_.begin(), seen_.end());
  seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
  for (int32_t t : seen_) {
    float& x = penalised_[t];
    x = x > 0 ? x / params_.repetition_penalty : x * params_.repetition_penalty;
  }
  return penalised_.data();
}

void Sampler::collect_top_k(const float* l, int32_t n_vocab) {
  const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab;
  if (use_top_k && params_.top_k <= kHeapTopK) {
    // A heap of the k best so far (worst on top): one compare per logit.
    const size_t k = static_cast<size_t>(params_.top_k);
    cand_.clear();
    for (int32_t i = 0; i < n_vocab; ++i) {
      if (cand_.size() < k) {
        cand_.push_back(Candidate{l[i], 0.0f, i});
        std::push_heap(cand_.begin(), cand_.end(), better);
      } else if (l[i] > cand_.front().logit) {  // ids ascend: a tie never wins
        std::pop_heap(cand_.begin(), cand_.end(), better);
        cand_.back() = Candidate{l[i], 0.0f, i};
        std::push_heap(cand_.begin(), cand_.end(), better);
      }
    }
    return;
  }
  cand_.resize(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) cand_[i] = Candidate{l[i], 0.0f, i};
  if (use_top_k) {
    std::nth_element(cand_.begin(), cand_.begin() + params_.top_k, cand_.end(), better);
    cand_.resize(static_cast<size_t>(params_.top_k));
  }
}

void Sampler::cut_min_p_top_p(float max_logit) {
  // Untempered weights; top-p normalises over all remaining candidates.
  double total = 0;
  for (Candidate& c : cand_) {
    c.weight = std::exp(c.logit - max_logit);
    total += c.weight;
  }
  if (params_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  weight_i >= min_p. Top-p and min-p both keep
    // a head of the sorted order, so cutting min-p first does not change
    // what top-p keeps as long as top-p uses the full total.
    auto end = std::partition(cand_.begin(), cand_.end(),
                              [&](const Candidate& c) { return c.weight >= params_.min_p; });
    cand_.erase(end, cand_.end());
  }
  if (params_.top_p >= 1.0f) return;
  // The cut almost always falls among the few tokens near the maximum:
  // select within those first, over the rest only when they fall short.
  const double target = static_cast<double>(params_.top_p) * total;
  auto near_end = std::partition(cand_.begin(), cand_.end(), [&](const Candidate& c) {
    return c.weight >= kNearWeight;
  });
  const size_t n_near = static_cast<size_t>(near_end - cand_.begin());
  double near_mass = 0;
  for (size_t i = 0; i < n_near; ++i) near_mass += cand_[i].weight;
  const size_t keep = near_mass >= target ? top_p_near(n_near, max_logit, target)
                                          : top_p_head(n_near, cand_.size(), target - near_mass);
  cand_.resize(keep);
}

int32_t Sampler::draw(float max_logit) {
  // Softmax with temperature over the survivors, then one draw.
  const float inv_t = 1.0f / params_.temperature;
  probs_.resize(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    probs_[i] = std::exp((cand_[i].logit - max_logit) * inv_t);
    sum += probs_[i];
  }
  const double u = uniform01(rng_) * sum;
  double acc = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    acc += probs_[i];
    if (u < acc) return cand_[i].id;
  }
  // Rounding left u at the very end: the last candidate with any mass.
  for (size_t i = cand_.size(); i-- > 0;) {
    if (probs_[i] > 0) return cand_[i].id;
  }
  return cand_[0].id;
}

}  // namespace prefixd
