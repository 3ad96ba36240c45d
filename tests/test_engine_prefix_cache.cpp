// The prefix cache through the engine: cached runs equal uncached runs on the
// shared models, exactly prompt_len - cached tokens are prefilled, and
// concurrent requests sharing an uncached prefix compute it once. Cached runs
// of F32, F16 and BF16 models equal uncached ones bit for bit.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <thread>

#include "tests/cpu_isa_under_test.h"
#include "tests/engine_harness.h"

using namespace prefixd;
using namespace prefixd::testing;

namespace {

EngineOptions f32_options(int32_t block_size = 16) {
  EngineOptions o = f32_engine_options();
  o.block_size = block_size;
  return o;
}

}  // namespace

TEST_CASE("a cached prefix gives the same logits and greedy ids as computing everything") {
  for (const auto& [name, tol] : engine_golden_models()) {
    GoldenModel g = load_golden(name, tol);
    const GoldenCase& c = longest_case(g);
    const int32_t n = static_cast<int32_t>(c.ids.size());
    const int32_t n_gen = 16;
    EngineUnderTest cold(g.model_file, f32_options());
    Request base = greedy_request(c.ids, n_gen);
    base.return_logits = true;
    Collected reference = cold.run(base);
    REQUIRE(reference.ids.size() == size_t(n_gen));
    CHECK(reference.usage.cached_tokens == 0);
    CHECK(reference.usage.prefill_tokens == n);
    // The cold run itself matches llama.cpp at the last prompt position.
    CHECK(logit_error(c.positions[n - 1], reference.logits[0].data(), g.n_vocab) <= tol);

    for (int32_t shared : {0, 1, 15, 16, 17, 32, n / 2, n - 1, n}) {
      if (shared > n) continue;
      CAPTURE(name);
      CAPTURE(shared);
      EngineUnderTest warm(g.model_file, f32_options());
      if (shared > 0) {
        // Earlier work: the first `shared` tokens, then a different token.
        std::vector<int32_t> earlier(c.ids.begin(), c.ids.begin() + shared);
        earlier.push_back((c.ids[shared % n] + 1) % g.n_vocab);
        Collected e = warm.run(greedy_request(earlier, 1));
        REQUIRE(e.finish == FinishReason::kLength);
      }
      Collected r = warm.run(base);
      const int32_t expect_cached = std::min((shared / 16) * 16, n - 1);
      CHECK(r.usage.cached_tokens == expect_cached);
      CHECK(r.usage.device_tokens == expect_cached);
      CHECK(r.usage.prefill_tokens == n - expect_cached);
      REQUIRE(r.logits.size() == reference.logits.size());
      CHECK(logit_error(c.positions[n - 1], r.logits[0].data(), g.n_vocab) <= tol);
      const AnswerDiff d = compare_answers(r, reference, g.n_vocab, tol);
      CAPTURE(d.compared_steps);
      CHECK(d.ids_agree);
      CHECK(d.worst_logit <= tol);
      if (batch_invariant_weights(*warm.model)) {  // the README's promise: bit for bit
        CHECK(r.ids == reference.ids);
        CHECK(r.logits == reference.logits);
      }
    }
  }
}

TEST_CASE("the whole prompt cached: the last token is recomputed, outputs unchanged") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  const GoldenCase& c = longest_case(g);
  std::vector<int32_t> prompt(c.ids.begin(), c.ids.begin() + 64);  // exactly 4 blocks
  EngineUnderTest e(g.model_file, f32_options());
  Collected first = e.run(greedy_request(prompt, 8));
  Collected second = e.run(greedy_request(prompt, 8));
  CHECK(second.usage.cached_tokens == 63);
  CHECK(second.usage.prefill_tokens == 1);
  CHECK(second.ids == first.ids);
  Collected third = e.run(greedy_request(prompt, 8));
  CHECK(third.ids == first.ids);
}

TEST_CASE("block sizes other than 16 work and cache in their own units") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  const GoldenCase& c = longest_case(g);
  for (int32_t bs : {1, 8, 32}) {
    CAPTURE(bs);
    EngineUnderTest e(g.model_file, f32_options(bs));
    std::vector<int32_t> prompt(c.ids.begin(), c.ids.begin() + 100);
    Collected cold = e.run(greedy_request(prompt, 4));
    std::vector<int32_t> longer = prompt;
    longer.insert(longer.end(), c.ids.begin() + 100, c.ids.begin() + 150);
    Collected warm = e.run(greedy_request(longer, 4));
    CHECK(warm.usage.cached_tokens == (100 / bs) * bs);
    CHECK(warm.usage.prefill_tokens == 150 - (100 / bs) * bs);
    (void)cold;
  }
}

TEST_CASE("cache salts isolate tenants") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  const GoldenCase& c = longest_case(g);
  EngineUnderTest e(g.model_file, f32_options());
  Request a = greedy_request(c.ids, 2);
  a.cache_salt = "tenant-a";
  e.run(a);
  Request b = a;
  b.cache_salt = "tenant-b";
  CHECK(e.run(b).usage.cached_tokens == 0);
  CHECK(e.run(a).usage.cached_tokens > 0);
}

TEST_CASE("concurrent requests with the same uncached 1000-token prefix prefill it once") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  const GoldenCase& c = longest_case(g);  // 700 ids; extend deterministically to 1000
  std::vector<int32_t> prefix = c.ids;
  for (int32_t i = 0; prefix.size() < 1000; ++i) prefix.push_back(3 + (i * 37) % (g.n_vocab - 3));
  EngineOptions o = f32_options();
  o.max_batch_tokens = 256;  // several chunks, so others arrive while it is in flight
  EngineUnderTest e(g.model_file, o);
  const int kRequests = 4;
  std::vector<std::shared_ptr<RequestChannel>> channels;
  for (int r = 0; r < kRequests; ++r) {
    std::vector<int32_t> p = prefix;
    for (int i = 0; i < 10; ++i) p.push_back(3 + (r * 101 + i * 7) % (g.n_vocab - 3));
    channels.push_back(e.engine->submit(greedy_request(p, 2)));
  }
  int64_t total_prefill = 0;
  for (auto& ch : channels) {
    Collected r = collect(ch);
    CHECK(r.finish == FinishReason::kLength);
    total_prefill += r.usage.prefill_tokens;
  }
  // 62 full blocks (992 tokens) are shared: computed once; each request then
  // computes its own 8 + 10 tokens.
  CHECK(total_prefill == 992 + kRequests * 18);
  EngineStats s = e.engine->stats();
  CHECK(s.prefill_tokens == 992 + kRequests * 18);
}

TEST_CASE("cancel frees every block the request held") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  EngineUnderTest e(g.model_file, f32_options());
  std::vector<int32_t> prompt = longest_case(g).ids;
  auto ch = e.engine->submit(greedy_request(prompt, 3000));
  // Wait for the first token, then cancel.
  bool got_token = false;
  while (!got_token) {
    for (const EngineEvent& ev : ch->wait(std::chrono::milliseconds(100))) {
      if (ev.type == EngineEvent::Type::kToken) got_token = true;
    }
  }
  ch->cancel();
  Collected rest = collect(ch);
  CHECK(rest.finish == FinishReason::kCancelled);
  EngineStats s = e.engine->stats();
  CHECK(s.pool_blocks_referenced == 0);
  CHECK(s.running == 0);
  CHECK(s.pool_blocks_cached > 0);  // its full blocks stay findable
}

TEST_CASE("stop strings spanning token boundaries stop the text exactly") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  EngineUnderTest e(g.model_file, f32_options());
  REQUIRE(e.tokenizer != nullptr);
  std::vector<int32_t> prompt = e.tokenizer->encode("Once upon a time", true, false);
  Collected full = e.run(greedy_request(prompt, 64));
  REQUIRE(full.text.find("Lily. She") != std::string::npos);
  Request r = greedy_request(prompt, 64);
  r.stop = {"y. Sh"};
  Collected stopped = e.run(r);
  CHECK(stopped.finish == FinishReason::kStop);
  CHECK(stopped.text == full.text.substr(0, full.text.find("y. Sh")));
}

TEST_CASE("a seeded request is reproducible; different seeds differ") {
  GoldenModel g = load_golden("stories260K", 1e-3f);
  EngineUnderTest e(g.model_file, f32_options());
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  auto sampled = [&](uint64_t seed) {
    Request r = greedy_request(prompt, 48);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.sampling.has_seed = true;
    return e.run(r).ids;
  };
  CHECK(sampled(42) == sampled(42));
  CHECK(sampled(42) != sampled(43));
}

TEST_CASE("a pool too small for all requests preempts and still completes correctly") {
  GoldenModel g = load_golden("rand-mqa-f16", 2e-2f);
  const GoldenCase& c = longest_case(g);
  auto prompt_for = [&](int i) {
    return std::vector<int32_t>(c.ids.begin() + 50 * i, c.ids.begin() + 50 * i + 200);
  };
  std::vector<std::vector<int32_t>> refs;
  {
    EngineUnderTest big(g.model_file, f32_options());
    for (int i = 0; i < 4; ++i) refs.push_back(big.run(greedy_request(prompt_for(i), 24)).ids);
  }
  // Each request needs 14 blocks; the pool holds 30, so 4 at once must preempt.
  EngineUnderTest e(g.model_file, f32_engine_options(f32_block_bytes(g.model_file) * 30));
  std::vector<std::shared_ptr<RequestChannel>> chs;
  for (int i = 0; i < 4; ++i) chs.push_back(e.engine->submit(greedy_request(prompt_for(i), 24)));
  for (int i = 0; i < 4; ++i) {
    Collected r = collect(chs[i]);
    CHECK(r.finish == FinishReason::kLength);
    CHECK(r.ids == refs[i]);
  }
  CHECK(e.engine->stats().pool_blocks_referenced == 0);
}

// PREFIXD_CPU_ISA may name a set or a mixed plan (tests/CMakeLists.txt runs both).
int main(int argc, char** argv) { return prefixd::testing::run_for_cpu_isa(argc, argv); }
