// Logprobs below HTTP: the log-softmax and top-N of one logits row against a
// brute-force F64 reference, the scheduler's all-rows prefill chunks for
// prompt logprobs (no cache match, rows bounded per pass), the engine's
// prompt logprobs through several passes and preemption, the JSON shapes and
// token writing, and the validation of the request fields.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <thread>

#include "daemon/api/completion_response.h"
#include "daemon/api/logprobs_json.h"
#include "daemon/validation/request_validation.h"
#include "engine/kv/block_manager.h"
#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/text/chat_template.h"
#include "tests/engine_harness.h"
#include "tests/shared_dir.h"

using namespace prefixd;
using namespace prefixd::testing;
using nlohmann::json;

namespace {

// log-softmax in F64 and the ids ordered by logit (then id), the slow way.
struct Reference {
  std::vector<double> logprobs;
  std::vector<int32_t> order;
};
Reference reference(const std::vector<float>& logits) {
  Reference r;
  double m = -INFINITY;
  for (float x : logits) m = std::max(m, double(x));
  double s = 0;
  for (float x : logits) s += std::exp(double(x) - m);
  for (float x : logits) r.logprobs.push_back(double(x) - m - std::log(s));
  r.order.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) r.order[i] = int32_t(i);
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return r;
}

}  // namespace

TEST_CASE("position_logprobs: log-softmax of the raw logits, top N best first, ties by lower id") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int32_t n_vocab : {1, 5, 512, 32000}) {
    for (float shift : {0.0f, 3.0e4f, -3.0e4f}) {
      CAPTURE(n_vocab);
      CAPTURE(shift);
      std::vector<float> logits(static_cast<size_t>(n_vocab));
      for (float& x : logits) x = std::round(normal(rng) * 4.0f) / 4.0f + shift;  // many exact ties
      const Reference ref = reference(logits);
      for (int32_t top_n : {0, 1, 5, 20}) {
        const int32_t chosen = n_vocab / 2;
        const PositionLogprobs lp = position_logprobs(logits.data(), n_vocab, chosen, top_n);
        CHECK(lp.chosen.token == chosen);
        CHECK(std::fabs(lp.chosen.logprob - ref.logprobs[chosen]) <= 1e-4);
        REQUIRE(lp.top.size() == size_t(std::min(top_n, n_vocab)));
        for (size_t r = 0; r < lp.top.size(); ++r) {
          CHECK(lp.top[r].token == ref.order[r]);
          CHECK(std::fabs(lp.top[r].logprob - ref.logprobs[ref.order[r]]) <= 1e-4);
        }
      }
    }
  }
  // Probabilities sum to one.
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 3.0f};
  double sum = 0;
  for (int32_t id = 0; id < 4; ++id)
    sum += std::exp(position_logprobs(logits.data(), 4, id, 0).chosen.logprob);
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
  const PositionLogprobs tie = position_logprobs(logits.data(), 4, 0, 2);
  CHECK(tie.top[0].token == 2);  // equal logits: the lower id first
  CHECK(tie.top[1].token == 3);
}

namespace {

constexpr int32_t kB = 4;

struct SchedulerUnderTest {
  BlockManager blocks{BlockManagerOptions{64, kB, 4}};
  Scheduler sched;
  uint64_t next_id = 0;
  explicit SchedulerUnderTest(int32_t max_batch_tokens, int32_t max_prompt_rows)
      : sched(SchedulerOptions{kB, max_batch_tokens, 8, max_prompt_rows}, blocks, hooks()) {}
  static SchedulerHooks hooks() {
    SchedulerHooks h;
    h.copy_block = [](int32_t, int32_t) {};
    return h;
  }
  Sequence* add(std::vector<int32_t> prompt, bool prompt_logprobs) {
    auto s = std::make_unique<Sequence>();
    s->id = ++next_id;
    s->request.prompt = std::move(prompt);
    s->request.max_tokens = 1;
    s->request.logprobs.sampled = prompt_logprobs;
    s->request.logprobs.prompt = prompt_logprobs;
    s->namespace_seed = 7;
    Sequence* p = s.get();
    sched.add(std::move(s));
    return p;
  }
  // Plans and "computes" one step; returns the plan.
  StepPlan step() {
    sched.admit(Clock::time_point{});
    StepPlan plan = sched.plan_step();
    for (const ScheduledChunk& c : plan.chunks) {
      sched.advance(*c.seq, c.n_tokens);
      if (c.logits_row >= 0) {
        c.seq->prompt_logprobs_sent = c.seq->request.logprobs.prompt;
        sched.remove(*c.seq);
      }
    }
    REQUIRE(sched.check_invariants().ok());
    return plan;
  }
};

std::vector<int32_t> ids(int n, int32_t start) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = start + i;
  return t;
}

}  // namespace

TEST_CASE("scheduler: prompt logprobs compute the whole prompt, all rows, bounded per pass") {
  SchedulerUnderTest t(/*max_batch_tokens=*/32, /*max_prompt_rows=*/10);
  // A plain request caches the prompt's first 4 blocks.
  t.add(ids(18, 100), false);
  StepPlan p = t.step();
  REQUIRE(p.chunks.size() == 1);
  CHECK(p.chunks[0].all_logits_row == -1);
  CHECK(p.chunks[0].logits_row == 0);

  // The same prompt with prompt logprobs: nothing matched; 10 rows per pass.
  Sequence* lp = t.add(ids(18, 100), true);
  // And a plain one beside it, which does match the cache.
  Sequence* plain = t.add(ids(17, 100), false);
  p = t.step();
  CHECK(lp->usage.cached_tokens == 0);
  CHECK(plain->usage.cached_tokens == 16);
  REQUIRE(p.chunks.size() == 2);
  CHECK(p.chunks[0].seq == lp);
  CHECK(p.chunks[0].n_tokens == 10);
  CHECK(p.chunks[0].all_logits_row == 0);
  CHECK(p.chunks[0].logits_row == -1);
  CHECK(p.chunks[1].seq == plain);
  CHECK(p.chunks[1].all_logits_row == -1);
  CHECK(p.chunks[1].logits_row == 10);  // after the 10 rows of the first chunk
  p = t.step();
  REQUIRE(p.chunks.size() == 1);
  CHECK(p.chunks[0].n_tokens == 8);
  CHECK(p.chunks[0].all_logits_row == 0);
  CHECK(p.chunks[0].logits_row == 7);  // its last row samples

  // The rows the plan numbers are the rows the batch returns.
  BatchBuilder b(kB);
  std::vector<int32_t> table = {0, 1, 2, 3, 4};
  b.add(ids(3, 1), 0, table, LogitsWanted::kAll);
  b.add(ids(2, 1), 0, table, LogitsWanted::kLast);
  CHECK(b.batch().output_rows == std::vector<int32_t>{0, 1, 2, 4});
}

namespace {

struct Outcome {
  std::vector<PositionLogprobs> prompt;
  std::vector<PositionLogprobs> tokens;
  std::vector<int32_t> ids;
  Usage usage;
  FinishReason finish = FinishReason::kNone;
  int prompt_events = 0;
};

Outcome collect_logprobs(const std::shared_ptr<RequestChannel>& ch) {
  Outcome o;
  for (;;) {
    for (EngineEvent& e : ch->wait(std::chrono::milliseconds(1000))) {
      if (e.type == EngineEvent::Type::kPromptLogprobs) {
        CHECK(o.ids.empty());  // before the first token
        o.prompt = std::move(e.prompt_logprobs);
        o.prompt_events++;
      } else if (e.type == EngineEvent::Type::kToken) {
        o.ids.push_back(e.token);
        REQUIRE(e.logprobs.has_value());
        o.tokens.push_back(*e.logprobs);
      } else {
        REQUIRE(e.type == EngineEvent::Type::kFinished);
        o.finish = e.finish;
        o.usage = e.usage;
        return o;
      }
    }
  }
}

Request scoring_request(const std::vector<int32_t>& prompt, int32_t max_tokens) {
  Request r = greedy_request(prompt, max_tokens);
  r.logprobs = LogprobsOptions{true, 5, true};
  return r;
}

void check_same(const std::vector<PositionLogprobs>& a, const std::vector<PositionLogprobs>& b,
                double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].chosen.token == b[i].chosen.token);
    CHECK(std::fabs(a[i].chosen.logprob - b[i].chosen.logprob) <= tol);
    REQUIRE(a[i].top.size() == b[i].top.size());
    for (size_t r = 0; r < a[i].top.size(); ++r) {
      CHECK(a[i].top[r].token == b[i].top[r].token);
      CHECK(std::fabs(a[i].top[r].logprob - b[i].top[r].logprob) <= tol);
    }
  }
}

}  // namespace

TEST_CASE("engine: prompt logprobs in small passes and under preemption equal one whole pass") {
  const std::string model = prefixd::testing::shared_dir() + "/models/stories260K.gguf";
  const std::vector<int32_t> prompt = ids(150, 3);  // arbitrary ids: any sequence scores
  EngineOptions whole_opts = f32_engine_options();
  whole_opts.max_prompt_logits_rows = 512;
  EngineUnderTest whole(model, whole_opts);
  Outcome ref = collect_logprobs(whole.engine->submit(scoring_request(prompt, 0)));
  CHECK(ref.finish == FinishReason::kLength);
  CHECK(ref.prompt_events == 1);
  CHECK(ref.ids.empty());
  REQUIRE(ref.prompt.size() == prompt.size() - 1);
  for (size_t i = 0; i < ref.prompt.size(); ++i) CHECK(ref.prompt[i].chosen.token == prompt[i + 1]);
  CHECK(ref.usage.prefill_tokens == 150);
  CHECK(ref.usage.completion_tokens == 0);

  // 7 rows per pass; a pool of 12 blocks shared with an older request that
  // keeps decoding: whenever it needs a block, the scoring request (newer,
  // mid-prompt) is preempted and later recomputes its prompt from position 0.
  EngineOptions small = f32_engine_options(12 * f32_block_bytes(model));
  small.max_prompt_logits_rows = 7;
  small.check_invariants_each_step = true;
  EngineUnderTest e(model, small);
  Request older = greedy_request(ids(16, 200), 100);
  older.logprobs.sampled = true;
  auto older_ch = e.engine->submit(older);
  auto scoring_ch = e.engine->submit(scoring_request(prompt, 6));
  Outcome older_out = collect_logprobs(older_ch);
  Outcome o = collect_logprobs(scoring_ch);
  CHECK(e.engine->stats().preemptions > 0);
  CHECK(older_out.tokens.size() == 100);
  CHECK(o.finish == FinishReason::kLength);
  CHECK(o.prompt_events == 1);
  check_same(o.prompt, ref.prompt, 1e-4);
  Outcome alone = collect_logprobs(whole.engine->submit(scoring_request(prompt, 6)));
  check_same(alone.prompt, ref.prompt, 1e-4);
  check_same(o.tokens, alone.tokens, 1e-4);
  CHECK(o.ids == alone.ids);
  std::vector<Outcome> outs = {o};
  // The first generated token's logprob comes from the prompt's last row.
  Outcome one = collect_logprobs(whole.engine->submit(scoring_request(prompt, 1)));
  REQUIRE(one.tokens.size() == 1);
  check_same(one.tokens, {outs[0].tokens[0]}, 1e-4);
}

TEST_CASE("logprobs JSON: completions and chat shapes, token writing") {
  auto file = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE(file.ok());
  auto tok = Tokenizer::from_gguf(*file.value());
  REQUIRE(tok.ok());
  const Tokenizer& t = *tok.value();
  const TokenWriter text{&t, false};
  const TokenWriter as_ids{&t, true};
  const int32_t byte_e2 = t.find_token("<0xE2>");
  REQUIRE(byte_e2 >= 0);
  CHECK(text.text(1) == "<s>");  // control token: its vocabulary text
  CHECK(text.text(403) == " Once");
  CHECK(text.text(byte_e2) == "bytes:\\xe2");  // not UTF-8 by itself
  CHECK(text.bytes(byte_e2) == json{0xE2});
  CHECK(as_ids.text(403) == "token_id:403");
  CHECK(as_ids.bytes(403) == json{' ', 'O', 'n', 'c', 'e'});
  CHECK(TokenWriter{}.text(7) == "token_id:7");
  CHECK(TokenWriter{}.bytes(7).is_null());

  PositionLogprobs in_top{{403, -0.25f}, {{403, -0.25f}, {385, -1.5f}}};
  PositionLogprobs not_in_top{{407, -3.0f}, {{403, -0.25f}, {385, -1.5f}}};
  PositionLogprobs alone{{261, -0.5f}, {}};
  const std::vector<LogprobsItem> items = {
      {1, nullptr, 0}, {403, &in_top, 0}, {407, &not_in_top, 4}, {261, &alone, 9}};
  const json c = completion_logprobs_json(items, text);
  CHECK(c["tokens"] == json{"<s>", " Once", " upon", " a"});
  CHECK(c["token_logprobs"] == json{nullptr, -0.25, -3.0, -0.5});
  CHECK(c["text_offset"] == json{0, 0, 4, 9});
  CHECK(c["top_logprobs"][0].is_null());
  CHECK(c["top_logprobs"][1] == json{{" Once", -0.25}, {" One", -1.5}});
  CHECK(c["top_logprobs"][2] == json{{" Once", -0.25}, {" One", -1.5}, {" upon", -3.0}});  // N + 1
  CHECK(c["top_logprobs"][3] == json{{" a", -0.5}});  // N = 0: the chosen token alone

  const json chat = chat_logprobs_json(items, text);
  CHECK(chat["refusal"].is_null());
  REQUIRE(chat["content"].size() == 3);  // the item without logprobs is skipped
  CHECK(chat["content"][1] ==
        json{{"token", " upon"},
             {"logprob", -3.0},
             {"bytes", {' ', 'u', 'p', 'o', 'n'}},
             {"top_logprobs",
              {{{"token", " Once"}, {"logprob", -0.25}, {"bytes", {' ', 'O', 'n', 'c', 'e'}}},
               {{"token", " One"}, {"logprob", -1.5}, {"bytes", {' ', 'O', 'n', 'e'}}}}}});

  // The echoed prompt: decoded text and each token's offset in code points.
  const EchoedPrompt echo = echo_prompt({1, 403, 407, 261, 378}, &t);
  CHECK(echo.text == "Once upon a time");
  CHECK(echo.text_offsets == std::vector<int32_t>{0, 0, 4, 9, 11});
  CHECK(utf8_chars("h\xC3\xA9llo \xE2\x82\xAC") == 7);

  // The fold keeps offsets in code points of the generated text.
  CompletionFold fold;
  std::vector<EngineEvent> events(3);
  events[0].token = 5, events[0].text = "\xC3\xA9t";
  events[1].token = 6, events[1].text = "";
  events[2].token = 7, events[2].text = "\xC3\xA9";
  for (EngineEvent& e : events) e.logprobs = alone;
  fold.add(events);
  CHECK(fold.text_offsets == std::vector<int32_t>{0, 2, 2});
  CompletionHead head{"id", 0, "m", false};
  head.logprobs = true;
  head.tokens = as_ids;
  head.echo = std::make_shared<EchoedPrompt>(echo);
  const json lp = tokens_logprobs_json(head, fold, 1, 2);
  CHECK(lp["tokens"] == json{"token_id:6", "token_id:7"});
  CHECK(lp["text_offset"] == json{18, 18});  // after the 16 code points of the echoed prompt
}

TEST_CASE("validate_generation: logprobs, top_logprobs, echo and max_tokens 0") {
  auto file = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE(file.ok());
  auto tok = Tokenizer::from_gguf(*file.value());
  REQUIRE(tok.ok());
  auto tmpl = ChatTemplate::detect("", "chatml");
  REQUIRE(tmpl.ok());
  ModelInfo m;
  m.id = "m";
  m.n_ctx = 64;
  m.n_vocab = 512;
  m.tokenizer = tok.value().get();
  m.chat_template = &tmpl.value();
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto ok = [&](json body, bool chat) {
    auto r = validate_generation(body, m, chat);
    if (!r.ok()) FAIL(r.error().message);
    return r.value();
  };
  auto error = [&](json body, bool chat) {
    auto r = validate_generation(body, m, chat);
    REQUIRE(!r.ok());
    return r.error();
  };
  const json prompt = {1, 2, 3};
  GenerationRequest g = ok(json{{"prompt", prompt}, {"logprobs", 3}, {"echo", true}}, false);
  CHECK(g.request.logprobs.sampled);
  CHECK(g.request.logprobs.top_n == 3);
  CHECK(g.request.logprobs.prompt);
  CHECK(g.echo);
  g = ok(json{{"prompt", prompt}, {"echo", true}}, false);
  CHECK_FALSE(g.request.logprobs.sampled);
  CHECK_FALSE(g.request.logprobs.prompt);
  g = ok(json{{"prompt", prompt}, {"logprobs", 0}, {"return_tokens_as_token_ids", true}}, false);
  CHECK(g.request.logprobs.sampled);
  CHECK(g.request.logprobs.top_n == 0);
  CHECK_FALSE(g.request.logprobs.prompt);
  CHECK(g.tokens_as_ids);

  // max_tokens 0 scores the prompt, which may then fill the whole context.
  g = ok(json{{"prompt", std::vector<int32_t>(64, 5)},
              {"echo", true},
              {"logprobs", 1},
              {"max_tokens", 0}},
         false);
  CHECK(g.request.max_tokens == 0);
  ApiError e = error(json{{"prompt", std::vector<int32_t>(64, 5)}, {"echo", true}}, false);
  CHECK(e.code == "context_length_exceeded");
  e = error(json{{"prompt", prompt}, {"max_tokens", 0}}, false);
  CHECK(e.param == "max_tokens");
  CHECK(e.message == "'max_tokens' must be at least 1 (0 only with echo: true) (got 0)");
  e = error(json{{"prompt", prompt}, {"max_tokens", -1}, {"echo", true}}, false);
  CHECK(e.param == "max_tokens");

  e = error(json{{"prompt", prompt}, {"logprobs", 21}}, false);
  CHECK(e.param == "logprobs");
  CHECK(e.message == "'logprobs' must be an integer from 0 to 20 (got 21)");
  e = error(json{{"prompt", prompt}, {"logprobs", false}}, false);
  CHECK(e.code == "invalid_type");

  g = ok(json{{"messages", messages}, {"logprobs", true}, {"top_logprobs", 20}}, true);
  CHECK(g.request.logprobs.sampled);
  CHECK(g.request.logprobs.top_n == 20);
  CHECK_FALSE(g.request.logprobs.prompt);
  e = error(json{{"messages", messages}, {"top_logprobs", 1}}, true);
  CHECK(e.param == "top_logprobs");
  CHECK(e.message == "'top_logprobs' needs 'logprobs': true");
  e = error(json{{"messages", messages}, {"logprobs", true}, {"top_logprobs", 1000000000000LL}},
            true);
  CHECK(e.param == "top_logprobs");
}
