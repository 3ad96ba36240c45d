// Test support for the daemon's exactness tests: synthetic token prompts and
// a greedy completion's token ids, logprobs and prefix-cache report.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/daemon_process.h"

namespace prefixd::testing {

// Token ids in [3, 3 + range) (every test model's vocabulary has 512 or
// more; the default suits them all), BOS first when `bos`.
inline std::vector<int32_t> tokens(int seed, int32_t n, bool bos, int32_t range = 500) {
  std::vector<int32_t> t;
  if (bos) t.push_back(1);
  for (int32_t i = static_cast<int32_t>(t.size()); i < n; ++i)
    t.push_back(3 + (seed * 7919 + i * 613 + (i * i) % 11) % range);
  return t;
}

struct Answer {
  nlohmann::json ids;
  nlohmann::json logprobs;
  nlohmann::json prefix_cache;
};

// POST /v1/completions: greedy, `max_tokens` tokens, the top 5 logprobs of
// each (must answer 200).
inline Answer ask(httplib::Client& c, const std::vector<int32_t>& prompt, int max_tokens = 8) {
  const nlohmann::json body = {{"prompt", prompt},   {"max_tokens", max_tokens},  {"temperature", 0},
                               {"ignore_eos", true}, {"logprobs", 5},    {"return_tokens_as_token_ids", true}};
  HttpAnswer a = post_json(c, "/v1/completions", body);
  REQUIRE_MESSAGE(a.status == 200, a.raw);
  return Answer{a.body["choices"][0]["token_ids"], a.body["choices"][0]["logprobs"], a.body["prefix_cache"]};
}

}  // namespace prefixd::testing
