// Unit tests of the completion fold and envelope: one fold for the whole and
// the streamed answer, and the errors of failed and cancelled requests.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "daemon/api/completion_response.h"

using nlohmann::json;
using namespace prefixd;

namespace {

EngineEvent token_event(int32_t token, const std::string& text) {
  EngineEvent e;
  e.type = EngineEvent::Type::kToken;
  e.token = token;
  e.text = text;
  return e;
}

EngineEvent finished_event(FinishReason finish, const std::string& held_back_text = "") {
  EngineEvent e;
  e.type = EngineEvent::Type::kFinished;
  e.finish = finish;
  e.text = held_back_text;
  e.usage.prompt_tokens = 4;
  e.usage.completion_tokens = 3;
  e.usage.cached_tokens = 2;
  return e;
}

}  // namespace

TEST_CASE("one fold for both deliveries: a stream's chunks add up to the whole answer") {
  const std::vector<EngineEvent> wakeup1 = {token_event(5, "Once"), token_event(6, "")};
  const std::vector<EngineEvent> wakeup2 = {token_event(7, " upon"),
                                            finished_event(FinishReason::kLength, " a"),
                                            token_event(8, " never folded")};
  for (const bool chat : {false, true}) {
    CAPTURE(chat);
    const CompletionHead head{"id-1", 1700000000, "m", chat};
    CompletionFold whole;
    CHECK(whole.add(wakeup1) == 2);
    CHECK(whole.add(wakeup2) == 2);  // stops at the event that ends the request
    CHECK(whole.add(wakeup2) == 0);
    CHECK(whole.finished);
    CHECK(whole.text == "Once upon a");
    CHECK(whole.token_ids == std::vector<int32_t>{5, 6, 7});
    CHECK(whole.outcome() == RequestOutcome::kCompleted);
    CHECK(completion_error(whole, Delivery::kWhole).ok());
    CHECK(completion_error(whole, Delivery::kStream).ok());

    const json w = completion_json(head, whole);
    CHECK(w["id"] == "id-1");
    CHECK(w["created"] == 1700000000);
    CHECK(w["model"] == "m");
    CHECK(w["object"] == (chat ? "chat.completion" : "text_completion"));
    const json& choice = w["choices"][0];
    CHECK(choice["finish_reason"] == "length");
    CHECK(choice["logprobs"].is_null());
    CHECK(choice["token_ids"] == json{5, 6, 7});
    if (chat) {
      CHECK(choice["message"] == json{{"role", "assistant"}, {"content", "Once upon a"}});
    } else {
      CHECK(choice["text"] == "Once upon a");
    }
    CHECK(w["usage"]["total_tokens"] == 7);
    CHECK(w["usage"]["prompt_tokens_details"]["cached_tokens"] == 2);
    CHECK(w["prefix_cache"]["cached_tokens"] == 2);

    // The chunks a stream sends for the same events carry the same text.
    std::string streamed;
    for (const EngineEvent& e : {wakeup1[0], wakeup1[1], wakeup2[0]}) {
      const json c = chunk_json(head, e.text, {&e.token, 1});
      CHECK(c["object"] == (chat ? "chat.completion.chunk" : "text_completion"));
      CHECK(c["choices"][0]["finish_reason"].is_null());
      streamed += chat ? c["choices"][0]["delta"].value("content", "")
                       : c["choices"][0]["text"].get<std::string>();
    }
    streamed += wakeup2[1].text;
    CHECK(streamed == whole.text);
    const json last = chunk_json(head, "", {}, whole.finish);
    CHECK(last["choices"][0]["finish_reason"] == "length");
    CHECK(last["id"] == w["id"]);
    const json usage = usage_chunk_json(head, whole.usage);
    CHECK(usage["choices"] == json::array());
    CHECK(usage["usage"] == w["usage"]);
    CHECK(usage["prefix_cache"] == w["prefix_cache"]);
  }
  const json role = role_chunk_json(CompletionHead{"id-2", 0, "m", true});
  CHECK(role["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
}

TEST_CASE("a failed request answers 500 and a cancelled one 503 (no code inside a stream)") {
  EngineEvent error;
  error.type = EngineEvent::Type::kError;
  error.error = "out of blocks";
  CompletionFold failed;
  failed.add(std::vector<EngineEvent>{token_event(1, "x"), error});
  CHECK(failed.failed);
  CHECK(failed.outcome() == RequestOutcome::kError);
  for (const Delivery d : {Delivery::kWhole, Delivery::kStream}) {
    ApiResult<void> e = completion_error(failed, d);
    REQUIRE(!e.ok());
    CHECK(e.error().status == 500);
    CHECK(e.error().type == "server_error");
    CHECK(e.error().message == "the engine failed this request: out of blocks");
  }
  CompletionFold engine_error;
  engine_error.add(std::vector<EngineEvent>{finished_event(FinishReason::kError)});
  CHECK(completion_error(engine_error, Delivery::kWhole).error().message ==
        "the engine failed this request");

  CompletionFold cancelled;
  cancelled.add(std::vector<EngineEvent>{finished_event(FinishReason::kCancelled)});
  CHECK(cancelled.outcome() == RequestOutcome::kCancelled);
  ApiResult<void> whole = completion_error(cancelled, Delivery::kWhole);
  ApiResult<void> stream = completion_error(cancelled, Delivery::kStream);
  REQUIRE(!whole.ok());
  REQUIRE(!stream.ok());
  CHECK(whole.error().status == 503);
  CHECK(whole.error().code == "shutting_down");
  CHECK(stream.error().status == 503);
  CHECK(stream.error().code.empty());
  CHECK(stream.error().message == "the request was cancelled (server shutting down)");
}
