// prefixctl: command-line client of the prefixd daemon (completions, chat, cache endpoints) and
// the RAG load generator `prefixctl bench`. Exit status: 0 ok, 1 request failed, 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "client/bench.h"
#include "client/client.h"

namespace prefixd::client {
namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "prefixctl: error: %s\n", message.c_str());
  return 1;
}

// Parses token ids written as "1,2,3", "1 2 3" or "[1, 2, 3]".
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto is_sep = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']';
  };
  while (i < text.size()) {
    while (i < text.size() && is_sep(text[i])) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    std::string word = text.substr(i, j - i);
    char* end = nullptr;
    long long v = std::strtoll(word.c_str(), &end, 10);
    if (end != word.c_str() + word.size() || v < 0 || v > INT32_MAX) {
      return Status::error("--ids: '" + word + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) return Status::error("--ids: no token ids given");
  return ids;
}

// Prompt options shared by complete, lookup, prefetch, pin, unpin.
struct PromptArgs {
  std::string text;
  std::string ids;
  std::string cache_salt;
  void add_to(CLI::App* cmd) {
    cmd->add_option("prompt", text, "prompt text");
    cmd->add_option("--ids", ids, "prompt as token ids: \"1,2,3\"");
    cmd->add_option("--cache-salt", cache_salt, "cache_salt sent with the request");
  }
  Result<Prompt> prompt() const {
    if (!ids.empty()) {
      if (!text.empty()) return Status::error("give either prompt text or --ids, not both");
      Result<std::vector<int32_t>> parsed = parse_ids(ids);
      if (!parsed.ok()) return parsed.status();
      return Prompt(std::move(parsed.value()));
    }
    if (text.empty()) return Status::error("no prompt: give prompt text or --ids");
    return Prompt(text);
  }
};

// Sampling options shared by complete and chat.
struct SamplingArgs {
  int32_t max_tokens = 16;
  double temperature = -1;
  double top_p = -1;
  int32_t top_k = -1;
  double min_p = -1;
  int64_t seed = -1;
  std::vector<std::string> stop;
  bool stream = false;
  bool json = false;
  void add_to(CLI::App* cmd) {
    cmd->add_option("-n,--max-tokens", max_tokens, "tokens to generate")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--temperature", temperature, "0 = greedy (server default 1.0)");
    cmd->add_option("--top-p", top_p, "nucleus sampling");
    cmd->add_option("--top-k", top_k, "top-k sampling");
    cmd->add_option("--min-p", min_p, "min-p sampling");
    cmd->add_option("--seed", seed, "sampling seed");
    cmd->add_option("--stop", stop, "stop string (repeatable)");
    cmd->add_flag("--stream", stream, "stream the answer as it is generated");
    cmd->add_flag("--json", json, "print the raw JSON answer (not with --stream)");
  }
  SamplingParams params(const std::string& cache_salt) const {
    SamplingParams p;
    p.max_tokens = max_tokens;
    if (temperature >= 0) p.temperature = temperature;
    if (top_p >= 0) p.top_p = top_p;
    if (top_k >= 0) p.top_k = top_k;
    if (min_p >= 0) p.min_p = min_p;
    if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
    p.stop = stop;
    p.cache_salt = cache_salt;
    return p;
  }
};

void print_completion_footer(const Completion& c) {
  std::fprintf(stderr, "[finish_reason=%s",
               c.finish_reason.empty() ? "-" : c.finish_reason.c_str());
  if (c.usage) {
    std::fprintf(stderr, " prompt_tokens=%lld completion_tokens=%lld cached_tokens=%lld",
                 static_cast<long long>(c.usage->prompt_tokens),
                 static_cast<long long>(c.usage->completion_tokens),
                 static_cast<long long>(c.usage->cached_tokens));
  }
  if (c.prefix_cache) {
    const PrefixCacheInfo& p = *c.prefix_cache;
    std::fprintf(stderr, " device=%lld host=%lld disk=%lld remote=%lld prefill=%lld restore=%s ttft_ms=%.2f",
                 static_cast<long long>(p.device_tokens), static_cast<long long>(p.host_tokens),
                 static_cast<long long>(p.disk_tokens), static_cast<long long>(p.remote_tokens),
                 static_cast<long long>(p.prefill_tokens),
                 p.onboard_path.c_str(), p.ttft_ms);
  }
  std::fprintf(stderr, " total_ms=%.2f]\n", c.total_ms);
}

// Runs a completion (request) or a chat (chat), streamed or not, and prints it.
int print_generation(Client& client, const CompletionRequest* request, const ChatRequest* chat,
                     const SamplingArgs& s) {
  Result<Completion> r = Status::error("unset");
  if (s.stream) {
    auto on_delta = [](const StreamDelta& d) {
      std::fwrite(d.text.data(), 1, d.text.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    r = request ? client.complete_stream(*request, on_delta) : client.chat_stream(*chat, on_delta);
    if (!r.ok()) return fail(r.message());
    std::fputc('\n', stdout);
  } else {
    r = request ? client.complete(*request) : client.chat(*chat);
    if (!r.ok()) return fail(r.message());
    if (s.json) {
      std::cout << r->raw.dump(2) << "\n";
      return 0;
    }
    std::cout << r->text << "\n";
  }
  print_completion_footer(r.value());
  return 0;
}

void print_tier(const char* name, const TierStats& t) {
  std::printf("  %-7s %14lld %14lld %10lld %10lld %10lld %10lld\n", name,
              static_cast<long long>(t.capacity_bytes), static_cast<long long>(t.used_bytes),
              static_cast<long long>(t.blocks), static_cast<long long>(t.hits),
              static_cast<long long>(t.misses), static_cast<long long>(t.evictions));
}

// Global options: where the daemon is and how to talk to it.
struct ConnectionArgs {
  ClientOptions options;
  double timeout_s = 600;
  std::string url;
  bool no_prefix_key = false;

  void add_to(CLI::App& app) {
    app.add_option("--url", url,
                   "daemon base URL, http://HOST:PORT or https://HOST:PORT (replaces --host and "
                   "--port)");
    app.add_option("--host", options.host, "daemon host (plain http; see --url)")
        ->capture_default_str();
    app.add_option("--port", options.port, "daemon port")
        ->capture_default_str()
        ->check(CLI::Range(1, 65535));
    app.add_option("--ca-cert", options.ca_cert_path,
                   "https: PEM file of the CA (or the self-signed certificate) to trust instead of "
                   "the system's CAs")
        ->check(CLI::ExistingFile);
    app.add_flag("--insecure", options.insecure,
                 "https: do not verify the daemon's certificate (the connection can then be read "
                 "and changed by anyone on the path, the API key included)");
    app.add_option("--api-key", options.api_key, "bearer token")->envname("PREFIXD_API_KEY");
    app.add_flag("--no-prefix-key", no_prefix_key,
                 "do not send X-Prefix-Key (a hash of the prompt's leading part, which a load "
                 "balancer in front of several replicas routes on; ops/haproxy/haproxy.cfg)");
    app.add_option("--timeout", timeout_s, "read timeout, seconds")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
  }
  // After parsing: applies --timeout, --no-prefix-key and --url. Returns 0, or 2 (bad usage,
  // told on stderr).
  int finish() {
    options.read_timeout_s = timeout_s;
    options.prefix_key_header = !no_prefix_key;
    if (!url.empty()) {
      if (Status st = options.set_url(url); !st.ok()) {
        std::fprintf(stderr, "prefixctl: %s\n", st.message().c_str());
        return 2;
      }
    }
    if (!options.tls && (!options.ca_cert_path.empty() || options.insecure)) {
      std::fprintf(stderr, "prefixctl: --ca-cert and --insecure need an https:// --url\n");
      return 2;
    }
    return 0;
  }
};

struct ChatArgs {
  std::string system, message, cache_salt;
  SamplingArgs sampling;
};

struct TokenizeArgs {
  std::string text;
  bool add_special = false;
};

struct BenchArgs {
  BenchOptions options;
  std::string order = "round-robin";
  std::string json_path;
  bool quiet = false;
};

// Everything the command line sets, one member per subcommand.
struct Args {
  ConnectionArgs connection;
  PromptArgs complete_prompt;
  SamplingArgs complete_sampling;
  ChatArgs chat;
  bool stats_json = false;
  PromptArgs lookup_prompt, prefetch_prompt, pin_prompt, unpin_prompt;
  TokenizeArgs tokenize;
  BenchArgs bench;
};

// The subcommands, as CLI11 registered them (one is parsed).
struct Subcommands {
  CLI::App *complete, *chat, *stats, *lookup, *prefetch, *pin, *unpin, *clear, *health, *models,
      *tokenize, *bench;
};

void add_bench_options(CLI::App* cmd, BenchArgs* b) {
  BenchOptions& o = b->options;
  cmd->add_option("--system-prompts", o.n_system_prompts, "K system prompts")->capture_default_str();
  cmd->add_option("--system-tokens", o.system_tokens, "S tokens per system prompt")
      ->capture_default_str();
  cmd->add_option("--question-tokens", o.question_tokens, "Q tokens per question")
      ->capture_default_str();
  cmd->add_option("--concurrency", o.concurrency, "C concurrent clients")->capture_default_str();
  cmd->add_option("--requests", o.n_requests, "N requests in total")->capture_default_str();
  cmd->add_option("--output-tokens", o.output_tokens, "O output tokens (max_tokens)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "workload seed")->capture_default_str();
  cmd->add_option("--first-question", o.first_question,
                  "request i asks question first-question + i (new questions on the same system prompts)")
      ->capture_default_str();
  cmd->add_option("--vocab-lo", o.vocab_lo, "smallest token id drawn")->capture_default_str();
  cmd->add_option("--vocab-hi", o.vocab_hi, "token ids drawn below this")->capture_default_str();
  cmd->add_option("--order", b->order, "round-robin | random")
      ->check(CLI::IsMember({"round-robin", "random"}))
      ->capture_default_str();
  cmd->add_flag("--warmup", o.warmup, "prefetch the system prompts before the run");
  cmd->add_flag("--text", o.text_prompts, "send text prompts (pseudo-words) instead of ids");
  cmd->add_option("--temperature", o.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--cache-salt", o.cache_salt, "cache_salt of every request");
  cmd->add_option("--max-retries", o.max_retries, "retries per request on 429")
      ->capture_default_str();
  cmd->add_option("--json", b->json_path, "write per-request records + summary as JSON here");
  cmd->add_flag("-q,--quiet", b->quiet, "no progress line");
}

Subcommands add_subcommands(CLI::App& app, Args& a) {
  Subcommands c{};
  c.complete = app.add_subcommand("complete", "POST /v1/completions");
  a.complete_prompt.add_to(c.complete);
  a.complete_sampling.add_to(c.complete);
  c.chat = app.add_subcommand("chat", "POST /v1/chat/completions");
  c.chat->add_option("message", a.chat.message, "the user message")->required();
  c.chat->add_option("--system", a.chat.system, "system message");
  c.chat->add_option("--cache-salt", a.chat.cache_salt, "cache_salt sent with the request");
  a.chat.sampling.add_to(c.chat);
  c.stats = app.add_subcommand("stats", "GET /v1/cache/stats");
  c.stats->add_flag("--json", a.stats_json, "print the raw JSON answer");
  c.lookup = app.add_subcommand("lookup", "POST /v1/cache/lookup: cached leading tokens");
  a.lookup_prompt.add_to(c.lookup);
  c.prefetch = app.add_subcommand("prefetch", "POST /v1/cache/prefetch: warm a prompt's blocks");
  a.prefetch_prompt.add_to(c.prefetch);
  c.pin = app.add_subcommand("pin", "POST /v1/cache/pin");
  a.pin_prompt.add_to(c.pin);
  c.unpin = app.add_subcommand("unpin", "POST /v1/cache/unpin");
  a.unpin_prompt.add_to(c.unpin);
  c.clear = app.add_subcommand("clear", "DELETE /v1/cache");
  c.health = app.add_subcommand("health", "GET /health");
  c.models = app.add_subcommand("models", "GET /v1/models");
  c.tokenize = app.add_subcommand("tokenize", "POST /tokenize");
  c.tokenize->add_option("text", a.tokenize.text, "text to tokenize")->required();
  c.tokenize->add_flag("--add-special", a.tokenize.add_special, "add BOS/special tokens");
  c.bench = app.add_subcommand("bench", "RAG load generator (streaming requests)");
  add_bench_options(c.bench, &a.bench);
  return c;
}

// ---- one function per subcommand: 0 ok, 1 request failed, 2 bad usage ----------------------

int complete_command(Client& client, const PromptArgs& prompt_args, const SamplingArgs& sampling) {
  Result<Prompt> prompt = prompt_args.prompt();
  if (!prompt.ok()) return fail(prompt.message());
  CompletionRequest req{prompt.value(), sampling.params(prompt_args.cache_salt)};
  return print_generation(client, &req, nullptr, sampling);
}

int chat_command(Client& client, const ChatArgs& a) {
  ChatRequest req;
  if (!a.system.empty()) req.messages.push_back({"system", a.system});
  req.messages.push_back({"user", a.message});
  req.params = a.sampling.params(a.cache_salt);
  return print_generation(client, nullptr, &req, a.sampling);
}

int stats_command(Client& client, bool json) {
  Result<CacheStats> s = client.stats();
  if (!s.ok()) return fail(s.message());
  if (json) {
    std::cout << s->raw.dump(2) << "\n";
    return 0;
  }
  std::printf("block_size %lld tokens, prompt_tokens %lld, tokens_saved %lld\n",
              static_cast<long long>(s->block_size), static_cast<long long>(s->prompt_tokens),
              static_cast<long long>(s->tokens_saved));
  std::printf("  %-7s %14s %14s %10s %10s %10s %10s\n", "tier", "capacity_bytes", "used_bytes",
              "blocks", "hits", "misses", "evictions");
  print_tier("device", s->device);
  print_tier("host", s->host);
  print_tier("disk", s->disk);
  if (s->has_remote) print_tier("remote", s->remote);
  return 0;
}

Result<CacheQuery> query_of(const PromptArgs& a) {
  Result<Prompt> p = a.prompt();
  if (!p.ok()) return p.status();
  CacheQuery q;
  q.prompt = p.value();
  q.cache_salt = a.cache_salt;
  return q;
}

int lookup_command(Client& client, const PromptArgs& prompt) {
  Result<CacheQuery> q = query_of(prompt);
  if (!q.ok()) return fail(q.message());
  Result<LookupResult> r = client.lookup(q.value());
  if (!r.ok()) return fail(r.message());
  std::printf("prompt_tokens %lld cached_tokens %lld (device %lld, host %lld, disk %lld, remote %lld)\n",
              static_cast<long long>(r->prompt_tokens), static_cast<long long>(r->cached_tokens),
              static_cast<long long>(r->device_tokens), static_cast<long long>(r->host_tokens),
              static_cast<long long>(r->disk_tokens), static_cast<long long>(r->remote_tokens));
  return 0;
}

int prefetch_command(Client& client, const PromptArgs& prompt) {
  Result<CacheQuery> q = query_of(prompt);
  if (!q.ok()) return fail(q.message());
  Result<PrefetchResult> r = client.prefetch(q.value());
  if (!r.ok()) return fail(r.message());
  std::printf("prompt_tokens %lld cached_before %lld prefill_tokens %lld blocks %lld\n",
              static_cast<long long>(r->prompt_tokens), static_cast<long long>(r->cached_tokens),
              static_cast<long long>(r->prefill_tokens), static_cast<long long>(r->blocks));
  return 0;
}

// pin (pin = true) or unpin.
int pin_command(Client& client, const PromptArgs& prompt, bool pin) {
  Result<CacheQuery> q = query_of(prompt);
  if (!q.ok()) return fail(q.message());
  Result<PinResult> r = pin ? client.pin(q.value()) : client.unpin(q.value());
  if (!r.ok()) return fail(r.message());
  std::printf("pinned_blocks %lld pinned_tokens %lld\n", static_cast<long long>(r->pinned_blocks),
              static_cast<long long>(r->pinned_tokens));
  return 0;
}

int clear_command(Client& client) {
  Result<int64_t> r = client.clear();
  if (!r.ok()) return fail(r.message());
  std::printf("cleared_blocks %lld\n", static_cast<long long>(r.value()));
  return 0;
}

int health_command(Client& client) {
  Result<HealthInfo> r = client.health();
  if (!r.ok()) return fail(r.message());
  std::printf("status %s backend %s\n", r->status.c_str(), r->backend.c_str());
  return 0;
}

int models_command(Client& client) {
  Result<std::vector<ModelInfo>> r = client.models();
  if (!r.ok()) return fail(r.message());
  for (const ModelInfo& m : r.value()) {
    std::printf("%s  context_length %lld  backend %s\n", m.id.c_str(),
                static_cast<long long>(m.context_length), m.backend.c_str());
  }
  return 0;
}

int tokenize_command(Client& client, const TokenizeArgs& a) {
  Result<std::vector<int32_t>> r = client.tokenize(a.text, a.add_special);
  if (!r.ok()) return fail(r.message());
  std::string line;
  for (size_t i = 0; i < r->size(); ++i) line += (i ? "," : "") + std::to_string((*r)[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int bench_command(const ClientOptions& copt, BenchArgs& a) {
  a.options.order = a.order == "random" ? BenchOrder::kRandom : BenchOrder::kRoundRobin;
  Status valid = a.options.validate();
  if (!valid.ok()) {
    std::fprintf(stderr, "prefixctl: %s\n", valid.message().c_str());
    return 2;
  }
  BenchProgress progress;
  if (!a.quiet) {
    progress = [](int32_t done, int32_t total) {
      std::fprintf(stderr, "\r%d/%d requests", done, total);
      if (done == total) std::fputc('\n', stderr);
    };
  }
  Result<BenchReport> report = run_bench(copt, a.options, progress);
  if (!report.ok()) return fail(report.message());
  std::fputs(format_bench_summary(report.value()).c_str(), stdout);
  if (!a.json_path.empty()) {
    std::ofstream f(a.json_path);
    f << bench_report_json(report.value()).dump(2) << "\n";
    f.close();
    if (!f) return fail("cannot write " + a.json_path);
  }
  return report->summary.n_failed > 0 ? 1 : 0;
}

// Runs the subcommand that was parsed.
int dispatch(const Subcommands& c, Args& a, Client& client) {
  if (*c.complete) return complete_command(client, a.complete_prompt, a.complete_sampling);
  if (*c.chat) return chat_command(client, a.chat);
  if (*c.stats) return stats_command(client, a.stats_json);
  if (*c.lookup) return lookup_command(client, a.lookup_prompt);
  if (*c.prefetch) return prefetch_command(client, a.prefetch_prompt);
  if (*c.pin) return pin_command(client, a.pin_prompt, /*pin=*/true);
  if (*c.unpin) return pin_command(client, a.unpin_prompt, /*pin=*/false);
  if (*c.clear) return clear_command(client);
  if (*c.health) return health_command(client);
  if (*c.models) return models_command(client);
  if (*c.tokenize) return tokenize_command(client, a.tokenize);
  if (*c.bench) return bench_command(a.connection.options, a.bench);
  return 2;
}

int run(int argc, char** argv) {
  CLI::App app{"prefixctl: client of the prefixd daemon"};
  Args args;
  args.connection.add_to(app);
  app.require_subcommand(1);
  const Subcommands commands = add_subcommands(app, args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (const int usage = args.connection.finish(); usage != 0) return usage;
  Client client(args.connection.options);
  return dispatch(commands, args, client);
}

}  // namespace
}  // namespace prefixd::client

int main(int argc, char** argv) { return prefixd::client::run(argc, argv); }
