// Token log-probabilities for OpenAI `logprobs`: the log-softmax of one
// position's raw logits (before repetition penalty, temperature, top-k/p or
// min-p), read for the chosen token and for the N most likely tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace prefixd {

// The most alternatives a request may ask for per position (OpenAI's limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

// What a request asks for. Off by default.
struct LogprobsOptions {
  bool sampled = false;  // each generated token carries its logprob and `top_n` alternatives
  int32_t top_n = 0;     // alternatives per position, 0..kMaxTopLogprobs
  // Also every prompt token after the first (completions `echo`). That needs
  // the logits of every prompt position, which a cached prefix does not
  // have: such a request computes its whole prompt (no prefix-cache match;
  // it still publishes its blocks).
  bool prompt = false;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;  // natural log; <= 0
};

// One position's answer: the token that follows it and the most likely ones.
struct PositionLogprobs {
  TokenLogprob chosen;            // the sampled token, or the prompt's next token
  std::vector<TokenLogprob> top;  // (top_n) most likely first; equal logits: lower id first
};

// log(sum(exp(logits))) of `n_vocab` f32 logits: max-shifted F32 exponentials
// summed in F64 (stable for any finite logits).
double log_sum_exp(const float* logits, int32_t n_vocab);

// The log-softmax of `logits` (n_vocab f32, not modified) at `chosen` and its
// `top_n` (0..kMaxTopLogprobs) largest entries. O(n_vocab) per call: two
// passes for the log-sum-exp and one for a bounded top-N insertion (no sort
// of the vocabulary). Any thread; no state.
PositionLogprobs position_logprobs(const float* logits, int32_t n_vocab, int32_t chosen,
                                   int32_t top_n);

}  // namespace prefixd
