// Token sampling for one request: repetition penalty, top-k, top-p, min-p and
// temperature over one row of logits, with a per-request seeded RNG.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/result.h"

namespace prefixd {

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy (argmax, ties -> lowest id)
  int32_t top_k = 0;               // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;              // keep the smallest set with cumulative prob >= top_p; 1 = off
  float min_p = 0.0f;              // drop tokens with prob < min_p * max prob; 0 = off
  float repetition_penalty = 1.0f; // llama.cpp style over recent tokens; 1 = off
  uint64_t seed = 0;               // used when has_seed
  bool has_seed = false;           // false: a random seed per request
};

// Greedy decoding's token: the highest of n_vocab >= 1 logits, the lowest id
// on ties (+0 and -0 tie); a NaN never wins, but a NaN first logit wins
// alone (as a scan keeping the first strictly greater logit decides).
int32_t greedy_token(const float* logits, int32_t n_vocab);

// Checks ranges (temperature >= 0, top_k >= 0, top_p in (0, 1], min_p in
// [0, 1], repetition_penalty > 0, all finite).
Status validate_sampling_params(const SamplingParams& params);

// One request's sampler. Owns its RNG: with has_seed, the same seed and the
// same sequence of logits give the same tokens. Not thread-safe; used by the
// engine thread only.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }  // the seed in use (random when !has_seed)

  // Picks a token from `logits` (n_vocab f32; not modified). `recent_tokens`
  // are the previous tokens the repetition penalty applies to (each distinct
  // id is penalised once). Order as llama.cpp's default chain: repetition
  // penalty; then, when temperature > 0: top-k, top-p and min-p (on the
  // untempered distribution), softmax with temperature, a draw.
  int32_t sample(const float* logits, int32_t n_vocab, const std::vector<int32_t>& recent_tokens);

  struct Candidate {
    float logit;   // after the repetition penalty
    float weight;  // exp(logit - max logit), untempered (filled for top-p / min-p)
    int32_t id;
  };

 private:
  // sample()'s stages, in order. The logits with the repetition penalty
  // applied (`logits` itself when none applies; else penalised_).
  const float* penalise(const float* logits, int32_t n_vocab,
                        const std::vector<int32_t>& recent_tokens);
  // cand_ = the top_k best of `logits` (all of them without top-k), unordered.
  void collect_top_k(const float* logits, int32_t n_vocab);
  // Fills the weights, then keeps in cand_ the candidates that pass min-p,
  // then the top-p head of those.
  void cut_min_p_top_p(float max_logit);
  // Softmax with temperature over cand_, and one draw from rng_.
  int32_t draw(float max_logit);
  size_t top_p_head(size_t lo, size_t hi, double target);
  size_t top_p_near(size_t n_near, float max_logit, double target);

  SamplingParams params_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  // Scratch reused across calls to avoid per-token allocation.
  std::vector<float> penalised_;                 // (n_vocab) f32 logits, only when a penalty applies
  std::vector<int32_t> seen_;                    // distinct recent token ids
  std::vector<Candidate> cand_;                  // (n_candidates)
  std::vector<float> probs_;                     // (n_candidates) f32 unnormalised probabilities
};

}  // namespace prefixd
