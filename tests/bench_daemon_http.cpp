// HTTP overhead of the daemon: starts prefixd, sends streamed completions one
// at a time and prints the client-observed time to first token next to the
// engine's own ttft_ms (prefix_cache), and their difference (HTTP parsing,
// validation, tokenization, submit, SSE framing, loopback TCP).
// Usage: bench_daemon_http [--model PATH|demo|preset:NAME] [--requests N] [--prompt-tokens N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "tests/daemon_process.h"

using nlohmann::json;
using namespace prefixd::testing;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = stories_model_path();
  int n_requests = 200;
  int prompt_tokens = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--requests"))
      n_requests = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt-tokens"))
      prompt_tokens = std::atoi(argv[i + 1]);
  }
  std::string error;
  auto d =
      DaemonProcess::start({"--model", model, "--threads", "2", "--log-level", "warn"}, &error);
  if (!d) {
    std::fprintf(stderr, "bench_daemon_http: %s\n", error.c_str());
    return 1;
  }
  auto c = d->client();
  c->set_keep_alive(true);
  std::vector<double> client_ttft_ms, engine_ttft_ms, overhead_ms, queue_ms, prefill_ms;
  for (int r = 0; r < n_requests + 5; ++r) {
    // Distinct prompts (token ids 100.. shifted per request) so nothing is cached.
    json ids = json::array({1});
    for (int k = 1; k < prompt_tokens; ++k) ids.push_back(100 + (r * 7 + k) % 300);
    json body{{"prompt", ids},
              {"max_tokens", 2},
              {"temperature", 0},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
    const auto t0 = std::chrono::steady_clock::now();
    double first_ms = -1;
    SseAnswer s = post_sse(*c, "/v1/completions", body, [&](size_t n) {
      if (n == 1) {
        first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count();
      }
      return true;
    });
    if (s.status != 200 || s.json.empty() || !s.json.back().contains("prefix_cache")) {
      std::fprintf(stderr, "request %d failed (status %d)\n", r, s.status);
      return 1;
    }
    if (r < 5) continue;  // warm-up
    const double engine_ms = s.json.back()["prefix_cache"]["ttft_ms"].get<double>();
    client_ttft_ms.push_back(first_ms);
    engine_ttft_ms.push_back(engine_ms);
    overhead_ms.push_back(first_ms - engine_ms);
    queue_ms.push_back(s.json.back()["prefix_cache"]["queue_ms"].get<double>());
    prefill_ms.push_back(s.json.back()["prefix_cache"]["prefill_ms"].get<double>());
  }
  std::printf("model %s, %d sequential streamed requests, %d prompt tokens, keep-alive\n",
              model.c_str(), n_requests, prompt_tokens);
  std::printf("%-28s %8s %8s %8s\n", "", "p50", "p95", "p99");
  auto row = [](const char* name, const std::vector<double>& v) {
    std::printf("%-28s %8.3f %8.3f %8.3f\n", name, percentile(v, 0.5), percentile(v, 0.95),
                percentile(v, 0.99));
  };
  row("client TTFT (ms)", client_ttft_ms);
  row("engine TTFT (ms)", engine_ttft_ms);
  row("  engine queue (ms)", queue_ms);
  row("  engine prefill (ms)", prefill_ms);
  row("HTTP overhead (ms)", overhead_ms);
  return d->stop() == 0 ? 0 : 1;
}
