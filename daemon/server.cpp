// Serve mode: model and engine set-up, the httplib server (worker pool,
// body limit, auth, JSON errors) and the routes.
#include "daemon/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/cache_handlers.h"
#include "daemon/daemon_context.h"
#include "daemon/dashboard.h"
#include "daemon/http_util.h"
#include "daemon/metrics.h"
#include "daemon/model_source.h"
#include "daemon/openai_handlers.h"
#include "daemon/signals.h"
#include "engine/text/chat_template.h"
#include "engine/engine.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_fingerprint.h"
#include "engine/text/tokenizer.h"
#include "kernels/backend.h"
#include "storage/tier_manager.h"

namespace prefixd {

using nlohmann::json;

struct Server::State {
  ServerOptions options;
  std::string model_id;
  // Destruction order matters: the engine goes before the model, the model
  // before its backend and file (members are destroyed bottom-up).
  std::shared_ptr<GgufFile> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<TierManager> tiers;
  std::unique_ptr<Engine> engine;
  Metrics metrics;
  std::unique_ptr<AdmissionGate> admission;
  DaemonContext ctx;
  httplib::Server http;
  int port = 0;
  int listen_fd = -1;  // the listening socket (set while httplib creates it)
  std::atomic<bool> stopped{false};
};

namespace {

void log_line(const ServerOptions& o, LogLevel level, const std::string& msg) {
  if (static_cast<int>(level) > static_cast<int>(o.log_level)) return;
  static const char* kNames[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "prefixd [%s] %s\n", kNames[static_cast<int>(level)], msg.c_str());
}

std::string model_id_for(const std::string& model_arg) {
  if (model_arg == "demo" || model_arg.rfind("preset:", 0) == 0) return model_arg;
  return std::filesystem::path(model_arg).stem().string();
}

// Constant-time comparison of the presented and the configured key.
bool keys_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::string& ref = a.size() == b.size() ? b : a;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ ref[i]);
  return diff == 0;
}

Result<std::unique_ptr<Backend>> make_backend(const ServerOptions& o, std::string* name) {
#if defined(PREFIXD_HAVE_CUDA)
  if (o.backend == "cuda" || o.backend == "auto") {
    auto b = make_cuda_backend(0);
    if (b.ok()) {
      *name = "cuda";
      return std::move(b.value());
    }
    if (o.backend == "cuda") return Status::error("CUDA backend unavailable: " + b.message());
    log_line(o, LogLevel::kInfo, "--backend auto: no usable CUDA device (" + b.message() + "); using the CPU");
  }
#else
  if (o.backend == "cuda") return Status::error("this build of prefixd has no CUDA backend");
#endif
  *name = "cpu";
  return make_cpu_backend(o.n_threads, o.cpu_isa);
}

void install_routes(Server::State& s);

}  // namespace

Server::Server(std::unique_ptr<State> state) : s_(std::move(state)) {}

Server::~Server() {
  if (!s_) return;
  s_->http.stop();
}

int Server::port() const { return s_->port; }
const std::string& Server::model_id() const { return s_->model_id; }

Result<std::unique_ptr<Server>> Server::create(const ServerOptions& options) {
  auto s = std::make_unique<State>();
  s->options = options;
  const ServerOptions& o = s->options;
  const std::string cache_dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  Result<std::string> path = resolve_model_path(o.model, cache_dir);
  if (!path.ok()) return path.status();
  auto file = GgufFile::open(*path);
  if (!file.ok()) return Status::error("cannot open model '" + *path + "': " + file.message());
  s->file = std::move(file.value());
  log_line(o, LogLevel::kInfo, o.cpu_isa_option.describe(o.cpu_isa));
  std::string backend_name;
  auto backend = make_backend(o, &backend_name);
  if (!backend.ok()) return backend.status();
  s->backend = std::move(backend.value());
  auto model = Model::load(s->file, *s->backend);
  if (!model.ok()) return Status::error("cannot load model '" + *path + "': " + model.message());
  s->model = std::move(model.value());
  const ModelConfig& cfg = s->model->config();

  if (auto t = Tokenizer::from_gguf(*s->file); t.ok()) {
    s->tokenizer = std::move(t.value());
  } else {
    log_line(o, LogLevel::kWarn,
             "no usable tokenizer (" + t.message() + "); only token-id prompts are served");
  }
  if (s->tokenizer) {
    std::string template_text;
    if (auto t = s->file->get_string("tokenizer.chat_template"); t.ok()) template_text = t.value();
    auto tmpl = ChatTemplate::detect(template_text, o.chat_template);
    if (tmpl.ok()) {
      s->chat_template = std::make_unique<ChatTemplate>(std::move(tmpl.value()));
    } else if (!o.chat_template.empty()) {
      return Status::error("--chat-template: " + tmpl.message());
    } else {
      log_line(o, LogLevel::kWarn,
               "no chat template (" + tmpl.message() + "); /v1/chat/completions is refused");
    }
  }

  EngineOptions eo;
  eo.block_size = o.block_size;
  eo.kv_dtype = o.kv_dtype == "f32" ? DType::F32 : o.kv_dtype == "bf16" ? DType::BF16 : DType::F16;
  eo.kv_pool_bytes = o.kv_pool_bytes();
  eo.max_batch_tokens = o.max_batch_tokens;
  eo.max_running = o.max_concurrent_requests;
  eo.max_pinned_blocks = o.max_pinned_blocks;
  eo.restore_mode = o.restore_policy == "always"  ? EngineOptions::RestoreMode::kAlways
                    : o.restore_policy == "never" ? EngineOptions::RestoreMode::kNever
                                                  : EngineOptions::RestoreMode::kAuto;
  auto fingerprint = model_fingerprint(*s->file, cache_dir);
  if (!fingerprint.ok())
    return Status::error("cannot fingerprint the model: " + fingerprint.message());
  eo.model_fingerprint_lo = fingerprint->lo;
  eo.model_fingerprint_hi = fingerprint->hi;
  if (Status st = eo.validate(cfg); !st.ok()) return st;

  // The tiers below the device pool: host RAM and, with a directory, disk.
  if (o.host_cache_gb > 0 || !o.disk_cache_dir.empty()) {
    TierManagerOptions to;
    to.model_fingerprint = Hash128{fingerprint->lo, fingerprint->hi};
    to.geometry = eo.record_geometry(cfg);
    to.host_capacity_bytes = o.host_cache_bytes();
    // Record memory from the backend: pinned when the pool is on a GPU.
    to.allocator.ctx = s->backend.get();
    to.allocator.alloc = [](size_t n, void* ctx) { return static_cast<Backend*>(ctx)->alloc_host(n); };
    to.allocator.free = [](void* p, size_t, void* ctx) { static_cast<Backend*>(ctx)->free_host(p); };
    if (!o.disk_cache_dir.empty()) {
      DiskTierOptions d;
      d.path = o.disk_cache_dir;
      d.capacity_bytes = o.disk_cache_bytes();
      d.allocator = to.allocator;
      to.disk = d;
    }
    auto wp = parse_write_policy(o.write_policy);
    if (!wp.ok()) return wp.status();
    to.write_policy = *wp;
    auto tiers = TierManager::create(to);
    if (!tiers.ok()) return Status::error("cannot open the cache tiers: " + tiers.message());
    s->tiers = std::move(tiers.value());
    eo.deployment_secret = s->tiers->deployment_secret();
    // Fault in the first host-tier records while the daemon is idle, so that
    // the first cold prompts' write-through does not page-fault on the engine thread.
    s->tiers->prefault_async(std::min<uint64_t>(o.host_cache_bytes(), 256ull << 20));
    log_line(o, LogLevel::kInfo,
             "cache tiers: host " + std::to_string(o.host_cache_bytes() >> 20) + " MiB, disk " +
                 (o.disk_cache_dir.empty()
                      ? std::string("off")
                      : o.disk_cache_dir + " (" + std::to_string(o.disk_cache_bytes() >> 20) + " MiB)") +
                 ", " + o.write_policy);
  } else {
    std::random_device rd;
    for (auto& b : eo.deployment_secret) b = static_cast<uint8_t>(rd());
  }
  auto engine = Engine::create(*s->model, s->tokenizer.get(), s->tiers.get(), eo);
  if (!engine.ok()) return Status::error("cannot start the engine: " + engine.message());
  s->engine = std::move(engine.value());

  s->model_id = model_id_for(o.model);
  s->admission = std::make_unique<AdmissionGate>(o.max_concurrent_requests + o.max_queued_requests);
  DaemonContext& ctx = s->ctx;
  ctx.engine = s->engine.get();
  ctx.model.id = s->model_id;
  ctx.model.n_ctx = cfg.n_ctx_train;
  ctx.model.n_vocab = cfg.n_vocab;
  ctx.model.tokenizer = s->tokenizer.get();
  ctx.model.chat_template = s->chat_template.get();
  ctx.backend_name = backend_name;
  ctx.cpu_isa_name = cpu::cpu_isa_name(o.cpu_isa);
  ctx.metrics = &s->metrics;
  ctx.admission = s->admission.get();
  ctx.tiers = s->tiers.get();

  install_routes(*s);
  if (o.port == 0) {
    s->port = s->http.bind_to_any_port(o.host);
    if (s->port < 0) return Status::error("cannot bind " + o.host + " to any port");
  } else {
    if (!s->http.bind_to_port(o.host, o.port)) {
      return Status::error("cannot bind " + o.host + ":" + std::to_string(o.port) +
                           " (in use, or no permission)");
    }
    s->port = o.port;
  }
  // httplib listens with a backlog of 5, which drops connections when many
  // clients connect at once; listen() again raises it (Linux updates it).
  if (s->listen_fd >= 0) ::listen(s->listen_fd, SOMAXCONN);
  log_line(o, LogLevel::kInfo,
           "model " + s->model_id + " (" + cfg.arch_name + ", " + std::to_string(cfg.n_layers) +
               " layers, context " + std::to_string(cfg.n_ctx_train) + ") on " + backend_name +
               "; " + std::to_string(o.http_threads) + " HTTP threads");
  return std::unique_ptr<Server>(new Server(std::move(s)));
}

bool Server::run() {
  std::printf("prefixd listening on http://%s:%d\n", s_->options.host.c_str(), s_->port);
  std::fflush(stdout);
  return s_->http.listen_after_bind() || s_->stopped.load();
}

void Server::shutdown(std::chrono::milliseconds grace) {
  if (s_->stopped.exchange(true)) return;
  DaemonContext& ctx = s_->ctx;
  ctx.draining.store(true);
  log_line(s_->options, LogLevel::kInfo,
           "shutting down: " + std::to_string(ctx.admission->in_flight()) + " requests in flight");
  auto wait_idle = [&](std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (ctx.admission->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_idle(grace);
  ctx.cancel_all.store(true);
  wait_idle(std::chrono::milliseconds(5000));
  s_->http.stop();
}

int run_serve(ServerOptions options) {
  SignalWatcher signals;  // first: every thread created from here on has the signals blocked
  if (Status st = options.validate(); !st.ok()) {
    std::fprintf(stderr, "prefixd: %s\n", st.message().c_str());
    return 2;
  }
  auto server = Server::create(options);
  if (!server.ok()) {
    std::fprintf(stderr, "prefixd: %s\n", server.message().c_str());
    return 1;
  }
  Server* srv = server.value().get();
  const auto grace =
      std::chrono::milliseconds(static_cast<int64_t>(options.shutdown_grace_s * 1000));
  signals.start([srv, grace](int signo) {
    std::fprintf(stderr, "prefixd: signal %d, shutting down\n", signo);
    srv->shutdown(grace);
  });
  const bool ok = srv->run();
  if (signals.received() == 0 && !ok) {
    std::fprintf(stderr, "prefixd: the HTTP listener failed\n");
    return 1;
  }
  server.value().reset();
  std::fprintf(stderr, "prefixd: stopped\n");
  return 0;
}

namespace {

void install_routes(Server::State& s) {
  httplib::Server& h = s.http;
  DaemonContext* ctx = &s.ctx;
  const ServerOptions* o = &s.options;
  const size_t n_threads = static_cast<size_t>(o->http_threads);
  h.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  h.set_payload_max_length(static_cast<size_t>(o->max_body_bytes));
  h.set_tcp_nodelay(true);
  h.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    s.listen_fd = sock;
  });
  h.set_keep_alive_max_count(10000);
  h.set_read_timeout(30, 0);
  h.set_write_timeout(30, 0);

  h.set_pre_routing_handler([ctx, o](const httplib::Request& req, httplib::Response& res) {
    if (o->api_key.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
        keys_equal(auth.substr(prefix.size()), o->api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, ApiError{401,
                             auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                          : "invalid API key",
                             "authentication_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });

  // Errors httplib produces itself (no route, body too large, bad request
  // line) get the JSON error shape; answers that already have a body keep it.
  h.set_error_handler(httplib::Server::HandlerWithResponse(
      [ctx, o](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
          ctx->metrics->count_request(RequestOutcome::kInvalid);  // e.g. 413 before the handler ran
        }
        ApiError e;
        e.status = res.status;
        if (res.status == 404) {
          e.message = "no endpoint " + req.method + " " + req.path;
          e.code = "not_found";
        } else if (res.status == 413) {
          e.message = "the request body is larger than the limit of " +
                      std::to_string(o->max_body_bytes) + " bytes";
          e.code = "request_too_large";
        } else {
          e.message = std::string("HTTP error ") + std::to_string(res.status);
          e.type = res.status >= 500 ? "server_error" : "invalid_request_error";
        }
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }));
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        send_error(res, ApiError{500, what, "server_error", "", ""});
      });
  if (o->log_level >= LogLevel::kDebug) {
    h.set_logger([o](const httplib::Request& req, const httplib::Response& res) {
      log_line(*o, LogLevel::kDebug,
               req.method + " " + req.path + " -> " + std::to_string(res.status));
    });
  }

  // POST routes read their body themselves: httplib would cap bodies sent
  // as application/x-www-form-urlencoded (what `curl -d` sends) at 8 KiB and
  // parse them as form fields; here every body is JSON text up to the limit.
  auto post = [&h, ctx, o](const std::string& path,
                           std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    h.Post(path, [fn, ctx, o](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) {
      const bool generation = req.path == "/v1/completions" || req.path == "/v1/chat/completions";
      if (req.is_multipart_form_data()) {
        if (generation) ctx->metrics->count_request(RequestOutcome::kInvalid);
        return send_error(res, ApiError{415, "multipart bodies are not accepted; send JSON",
                                        "invalid_request_error", "", "unsupported_media_type"});
      }
      std::string body;
      bool too_large = false;
      const size_t limit = static_cast<size_t>(o->max_body_bytes);
      const bool read_ok = reader([&](const char* data, size_t n) {
        if (body.size() + n > limit) {
          too_large = true;
          return false;
        }
        body.append(data, n);
        return true;
      });
      // httplib refuses a declared Content-Length above its limit without
      // calling the receiver.
      if (!read_ok &&
          std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > limit)
        too_large = true;
      if (!read_ok && !too_large) {
        if (generation) ctx->metrics->count_request(RequestOutcome::kInvalid);
        return send_error(
            res, ApiError::invalid("the request body could not be read", "", "invalid_body"));
      }
      if (too_large) {
        if (generation) ctx->metrics->count_request(RequestOutcome::kInvalid);
        return send_error(res, ApiError{413,
                                        "the request body is larger than the limit of " +
                                            std::to_string(o->max_body_bytes) + " bytes",
                                        "invalid_request_error", "", "request_too_large"});
      }
      httplib::Request with_body = req;
      with_body.body = std::move(body);
      fn(with_body, res);
    });
  };

  h.Get("/health", [ctx](const httplib::Request&, httplib::Response& res) {
    if (ctx->draining.load()) {
      return send_json(res,
                       json{{"status", "shutting_down"},
                            {"backend", ctx->backend_name},
                            {"cpu_isa", ctx->cpu_isa_name}},
                       503);
    }
    send_json(res, json{{"status", "ok"},
                        {"backend", ctx->backend_name},
                        {"cpu_isa", ctx->cpu_isa_name}});
  });
  h.Get("/v1/models", [ctx](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", ctx->model.id},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "prefixd"},
              {"context_length", ctx->model.n_ctx},
              {"backend", ctx->backend_name}};
    send_json(res, json{{"object", "list"}, {"data", json::array({m})}});
  });
  post("/v1/completions", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_generation(*ctx, req, res, /*chat=*/false);
  });
  post("/v1/chat/completions", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_generation(*ctx, req, res, /*chat=*/true);
  });
  post("/tokenize", [ctx](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto ids = validate_tokenize(std::get<json>(body), ctx->model);
    if (auto* e = std::get_if<ApiError>(&ids)) return send_error(res, *e);
    send_json(res, json{{"tokens", std::get<std::vector<int32_t>>(ids)}});
  });
  post("/detokenize", [ctx](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto ids = validate_detokenize(std::get<json>(body), ctx->model);
    if (auto* e = std::get_if<ApiError>(&ids)) return send_error(res, *e);
    send_json(res,
              json{{"content", ctx->model.tokenizer->decode(std::get<std::vector<int32_t>>(ids))}});
  });
  h.Get("/v1/cache/stats", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_cache_stats(*ctx, req, res);
  });
  post("/v1/cache/lookup", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_cache_lookup(*ctx, req, res);
  });
  post("/v1/cache/prefetch", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_cache_prefetch(*ctx, req, res);
  });
  post("/v1/cache/pin", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_cache_pin(*ctx, req, res, /*pin=*/true);
  });
  post("/v1/cache/unpin", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_cache_pin(*ctx, req, res, /*pin=*/false);
  });
  h.Delete("/v1/cache", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle_cache_clear(*ctx, req, res);
  });
  h.Get("/metrics", [ctx](const httplib::Request&, httplib::Response& res) {
    EngineStats es = ctx->engine->stats();
    MetricsSnapshot m;
    m.backend_name = ctx->backend_name;
    m.cpu_isa_name = ctx->cpu_isa_name;
    m.prompt_tokens = es.prompt_tokens;
    m.cached_tokens_device = es.cached_tokens_device;
    m.cached_tokens_host = es.cached_tokens_host;
    m.cached_tokens_disk = es.cached_tokens_disk;
    m.prefill_tokens = es.prefill_tokens;
    m.generated_tokens = es.generated_tokens;
    m.device_evictions = es.device_evictions;
    m.pool_used_bytes = es.pool_used_bytes;
    m.pool_capacity_bytes = es.pool_capacity_bytes;
    m.running = es.running;
    m.waiting = es.waiting;
    if (ctx->tiers) {
      TierManagerStats ts = ctx->tiers->stats();
      m.has_host_tier = true;
      m.host_evictions = static_cast<int64_t>(ts.host.evictions);
      m.has_disk_tier = ts.has_disk;
      m.disk_evictions = static_cast<int64_t>(ts.disk.evictions);
      m.host_used_bytes = static_cast<int64_t>(ts.host.used_bytes);
      m.host_capacity_bytes = static_cast<int64_t>(ts.host.capacity_bytes);
      m.disk_used_bytes = static_cast<int64_t>(ts.disk.used_bytes);
      m.disk_capacity_bytes = static_cast<int64_t>(ts.disk.capacity_bytes);
      m.offload_host_blocks = static_cast<int64_t>(ts.offload_host_blocks);
      m.offload_disk_blocks = static_cast<int64_t>(ts.offload_disk_blocks);
      m.onboard_host_blocks = static_cast<int64_t>(ts.onboard_host_blocks);
      m.onboard_disk_blocks = static_cast<int64_t>(ts.onboard_disk_blocks);
      m.corrupt_records = static_cast<int64_t>(ts.disk.corrupt_records);
    }
    res.set_content(ctx->metrics->render(m), "text/plain; version=0.0.4; charset=utf-8");
  });
  install_dashboard_routes(h, ctx, o);
}

}  // namespace
}  // namespace prefixd
