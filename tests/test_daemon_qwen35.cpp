// qwen35 (Qwen3.5's Gated DeltaNet hybrid) through the real daemon without
// state snapshots (--state-snapshots 0; with them:
// test_daemon_qwen35_snapshots): a cached prefix is never resumed without
// its state. A repeated prompt is a counted miss (device misses grow,
// hits do not, cached_tokens 0) and gives the first answer bit for bit, and
// two prompts sharing a prefix, run one after the other and then in the
// opposite order, answer the same each time (each sequence's own state slot).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <thread>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/golden.h"
#include "tests/greedy_answers.h"

using nlohmann::json;
using namespace prefixd;
using namespace prefixd::testing;

namespace {

int64_t device_figure(httplib::Client& c, const char* name) {
  return stats(c)["tiers"]["device"][name].get<int64_t>();
}

}  // namespace

TEST_CASE("qwen35: a repeated prompt is a counted miss and answers the same, bit for bit") {
  auto d = start_or_fail({"--model", shared_path("models/rand-qwen35-bf16.gguf"), "--threads", "2",
                          "--block-size", "16", "--kv-dtype", "f32", "--state-snapshots", "0"});
  auto c = d->client();
  std::vector<int32_t> first = tokens(1, 300, true);
  std::vector<int32_t> second = first;
  second.resize(250);
  for (int32_t t : tokens(5, 40, false)) second.push_back(t);

  const Answer a1 = ask(*c, first);
  CHECK(a1.prefix_cache["cached_tokens"] == 0);
  const int64_t hits = device_figure(*c, "hits");
  const int64_t misses = device_figure(*c, "misses");
  const Answer a2 = ask(*c, first);  // its blocks are in the pool, its state is not
  CHECK(a2.prefix_cache["cached_tokens"] == 0);
  CHECK(device_figure(*c, "hits") == hits);
  CHECK(device_figure(*c, "misses") == misses + static_cast<int64_t>(first.size()) / 16);
  CHECK(a1.ids == a2.ids);
  CHECK(a1.logprobs == a2.logprobs);

  const Answer b1 = ask(*c, second);  // shares 250 tokens with `first`
  CHECK(b1.prefix_cache["cached_tokens"] == 0);
  REQUIRE(c->Delete("/v1/cache")->status == 200);
  const Answer b2 = ask(*c, second);
  const Answer a3 = ask(*c, first);
  CHECK(b1.ids == b2.ids);
  CHECK(b1.logprobs == b2.logprobs);
  CHECK(a3.ids == a1.ids);
  CHECK(a3.logprobs == a1.logprobs);

  // Both at once: two running sequences, each in its own state slot, batched together.
  Answer a4, b4;
  std::thread ta([&] {
    auto ca = d->client();
    a4 = ask(*ca, first);
  });
  std::thread tb([&] {
    auto cb = d->client();
    b4 = ask(*cb, second);
  });
  ta.join();
  tb.join();
  CHECK(a4.ids == a1.ids);
  CHECK(b4.ids == b1.ids);
  CHECK(a4.logprobs == a1.logprobs);
  CHECK(b4.logprobs == b1.logprobs);
  CHECK(d->stop() == 0);
}
