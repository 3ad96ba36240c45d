// Serve mode: loads the model, tokenizer, chat template, cache tiers and
// engine from ServerOptions, sets up the listener (a thread per connection,
// daemon/http/connection_threads.h; limits, timeouts) with the route table of
// daemon/api/routes.h, runs it and stops it gracefully.
#include "daemon/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "daemon/api/daemon_context.h"
#include "daemon/api/routes.h"
#include "daemon/api/ttl_pins.h"
#include "daemon/cache_identity.h"
#include "daemon/cpu_plan_memory.h"
#include "daemon/auth/tenant_limits.h"
#include "daemon/http/connection_server.h"
#include "daemon/http/listener.h"
#include "daemon/model_source.h"
#include "daemon/monitoring/dashboard.h"
#include "daemon/monitoring/metrics.h"
#include "daemon/signals.h"
#include "daemon/state_budget.h"
#include "engine/engine.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_fingerprint.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_plan.h"
#if defined(PREFIXD_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif
#include "storage/tier_manager.h"

namespace prefixd {

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
  std::unique_ptr<TenantLimits> tenant_limits;  // with an --api-keys file
  DaemonContext ctx;
  std::unique_ptr<httplib::Server> http;  // an SSLServer with --tls-cert/--tls-key
  int port = 0;
  int listen_fd = -1;  // the listening socket (set while httplib creates it)
  std::atomic<bool> stopped{false};
  std::atomic<bool> in_run{false};  // run() has begun (set before it checks `stopped`)
  std::chrono::steady_clock::time_point stop_began;  // shutdown() called (set before `stopped`)
  bool closed = false;                               // close() has run
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

Result<std::unique_ptr<Backend>> make_backend(const ServerOptions& o, std::string* name) {
#if defined(PREFIXD_HAVE_CUDA)
  if (o.backend == "cuda" || o.backend == "auto") {
    CudaBackendOptions cuda_options;
    cuda_options.decode_graphs =
        o.cuda_graphs == "off" ? cuda::DecodeGraphMode::kOff : cuda::DecodeGraphMode::kOn;
    cuda_options.cudnn_lib = o.cudnn_lib.empty() ? std::string("auto") : o.cudnn_lib;
    cuda_options.cudnn_probe = o.cudnn_probe;
    cuda_options.python_prefixes = o.cudnn_python_prefixes;
    cuda_options.log = [&o](const std::string& line) { log_line(o, LogLevel::kInfo, line); };
    auto b = make_cuda_backend(0, cuda_options);
    if (b.ok()) {
      *name = "cuda";
      return std::move(b.value());
    }
    if (o.backend == "cuda") return Status::error("CUDA backend unavailable: " + b.message());
    log_line(o, LogLevel::kInfo,
             "--backend auto: no usable CUDA device (" + b.message() + "); using the CPU");
  }
#else
  if (o.backend == "cuda") return Status::error("this build of prefixd has no CUDA backend");
#endif
  *name = "cpu";
  return make_cpu_backend(o.n_threads, o.cpu_isa);
}

// The model file, the backend it runs on and the loaded weights.
Status load_model(Server::State& s, const std::string& path, std::string* backend_name) {
  const ServerOptions& o = s.options;
  auto file = GgufFile::open(path);
  if (!file.ok()) return Status::error("cannot open model '" + path + "': " + file.message());
  s.file = std::move(file.value());
  log_line(o, LogLevel::kInfo, o.cpu_isa_option.describe(o.cpu_isa));
  // `auto`: the plan this CPU was first calibrated to, kept in the cache
  // directory (cpu_plan_memory.h), so restarts compute the same bits.
  std::string plan_source = "forced";
  const std::string& requested = o.cpu_isa_option.requested;
  if ((requested.empty() || requested == "auto") && o.backend != "cuda") {
    const RememberedCpuPlan r = remember_auto_cpu_plan(o.cache_dir.empty() ? default_cache_dir() : o.cache_dir);
    if (!r.warning.empty()) log_line(o, LogLevel::kWarn, r.warning);
    cpu::remember_forced_plan(r.plan);  // plan_for_isa(o.cpu_isa) answers it
    plan_source = r.path.empty() ? "auto" : r.read_back ? "auto, kept in " + r.path
                                                        : "auto, calibrated now and kept in " + r.path;
  }
  auto backend = make_backend(o, backend_name);
  if (!backend.ok()) return backend.status();
  if (*backend_name == "cpu") {
    const cpu::CpuIsaPlan plan = cpu::plan_for_isa(o.cpu_isa);
    log_line(o, LogLevel::kInfo, "CPU kernel families (" + plan_source + "): " + plan.describe());
  }
  s.backend = std::move(backend.value());
  auto model = Model::load(s.file, *s.backend);
  if (!model.ok()) return Status::error("cannot load model '" + path + "': " + model.message());
  s.model = std::move(model.value());
  return Status::ok_status();
}

// The tokenizer and the chat template, when the model has them: without a
// tokenizer only token-id prompts are served, without a template chat
// completions are refused. A --chat-template that does not apply is an error.
Status load_text(Server::State& s) {
  const ServerOptions& o = s.options;
  if (auto t = Tokenizer::from_gguf(*s.file); t.ok()) {
    s.tokenizer = std::move(t.value());
  } else {
    log_line(o, LogLevel::kWarn,
             "no usable tokenizer (" + t.message() + "); only token-id prompts are served");
  }
  if (!s.tokenizer) return Status::ok_status();
  std::string template_text;
  if (auto t = s.file->get_string("tokenizer.chat_template"); t.ok()) template_text = t.value();
  auto tmpl = ChatTemplate::detect(template_text, o.chat_template);
  if (tmpl.ok()) {
    s.chat_template = std::make_unique<ChatTemplate>(std::move(tmpl.value()));
  } else if (!o.chat_template.empty()) {
    return Status::error("--chat-template: " + tmpl.message());
  } else {
    log_line(o, LogLevel::kWarn,
             "no chat template (" + tmpl.message() + "); /v1/chat/completions is refused");
  }
  return Status::ok_status();
}

// What blocks are stored under: the model and the numerics that computed them
// (cache_identity.h), so another CPU plan's blocks are misses, never used.
Hash128 cache_identity(const ServerOptions& o, const std::string& backend_name, const Hash128& model) {
  const std::string numerics =
      backend_numerics(backend_name, backend_name == "cpu" ? cpu::plan_for_isa(o.cpu_isa).describe() : "");
  const Hash128 id = cache_fingerprint(model, numerics);
  log_line(o, LogLevel::kInfo, "cache identity " + id.hex() + " (model " + model.hex() + ", " + numerics + ")");
  return id;
}

// A model with recurrent layers: --max-concurrent and --state-snapshots, when
// not given, from the pool (state_budget.h), logged.
void apply_state_budget(Server::State& s) {
  ServerOptions& o = s.options;
  const ModelConfig& cfg = s.model->config();
  if (cfg.state_floats() == 0) return;
  const StateBudget b =
      choose_state_budget(o.kv_pool_bytes(), static_cast<size_t>(cfg.state_floats()) * sizeof(float),
                          o.max_concurrent_given ? o.max_concurrent_requests : -1, o.state_snapshots);
  o.max_concurrent_requests = b.max_running;
  o.state_snapshots = b.state_snapshots;
  if (!b.note.empty()) log_line(o, LogLevel::kInfo, b.note);
}

// The engine's options from the serve options (the deployment secret is
// filled by open_tiers()).
EngineOptions engine_options(const ServerOptions& o, const Model& model, const Hash128& fingerprint) {
  EngineOptions eo;
  eo.block_size = o.block_size;
  eo.kv_dtype = o.kv_dtype == "auto"   ? model.auto_kv_dtype()
                : o.kv_dtype == "f32"  ? DType::F32
                : o.kv_dtype == "bf16" ? DType::BF16
                                       : DType::F16;
  eo.kv_pool_bytes = o.kv_pool_bytes();
  eo.window_share = o.kv_window_share;
  eo.max_batch_tokens = o.max_batch_tokens;
  eo.state_snapshots = o.state_snapshots;
  eo.snapshot_interval_blocks = o.snapshot_interval_blocks;
  eo.max_running = o.max_concurrent_requests;
  eo.max_pinned_blocks = o.max_pinned_blocks;
  eo.onboard_mode = o.onboard_policy == "always"  ? EngineOptions::OnboardMode::kAlways
                    : o.onboard_policy == "never" ? EngineOptions::OnboardMode::kNever
                                                  : EngineOptions::OnboardMode::kAuto;
  eo.model_fingerprint = fingerprint;
  return eo;
}

// The tiers below the device pool: host RAM and, with a directory, disk; the
// engine takes their deployment secret. Without tiers the secret is random
// (nothing the engine caches outlives the process).
// The disk and remote tiers' options from the flags (none where a flag is empty).
void add_lower_tiers(Server::State& s, TierManagerOptions* to) {
  const ServerOptions& o = s.options;
  auto warn = [opts = &s.options](const std::string& line) { log_line(*opts, LogLevel::kWarn, line); };
  if (!o.disk_cache_dir.empty()) {
    DiskTierOptions d;
    d.path = o.disk_cache_dir;
    d.capacity_bytes = o.disk_cache_bytes();
    d.allocator = to->allocator;
    d.reset_on_corruption = o.disk_cache_reset_on_corruption;
    d.log_warning = warn;
    to->disk = d;
  }
  if (!o.remote_cache.empty()) {
    RemoteTierOptions r;
    r.servers = o.remote_servers;
    r.timeout = std::chrono::milliseconds(o.remote_cache_timeout_ms);
    r.timeout_limit = o.remote_cache_timeout_limit;
    r.log_warning = warn;
    to->remote = r;
  }
}

Status open_tiers(Server::State& s, const Hash128& fingerprint, EngineOptions* eo) {
  const ServerOptions& o = s.options;
  const bool has_tiers = o.host_cache_gb > 0 || !o.disk_cache_dir.empty() || !o.remote_cache.empty();
  if (!has_tiers) {
    if (o.deployment_secret) {
      eo->deployment_secret = *o.deployment_secret;
      return Status::ok_status();
    }
    std::random_device rd;
    for (auto& b : eo->deployment_secret) b = static_cast<uint8_t>(rd());
    return Status::ok_status();
  }
  TierManagerOptions to;
  to.model_fingerprint = fingerprint;
  to.geometry = eo->record_geometry(s.model->config());
  to.host_capacity_bytes = o.host_cache_bytes();
  // Record memory from the backend: pinned when the pool is on a GPU.
  to.allocator.ctx = s.backend.get();
  to.allocator.alloc = [](size_t n, void* ctx) {
    return static_cast<Backend*>(ctx)->alloc_host(n);
  };
  to.allocator.free = [](void* p, size_t, void* ctx) { static_cast<Backend*>(ctx)->free_host(p); };
  add_lower_tiers(s, &to);
  to.deployment_secret = o.deployment_secret;
  auto wp = parse_write_policy(o.write_policy);
  if (!wp.ok()) return wp.status();
  to.write_policy = *wp;
  auto priority = parse_writer_priority(o.cache_writer_priority);
  if (!priority.ok()) return priority.status();
  to.writer_priority = *priority;
  auto tiers = TierManager::create(to);
  if (!tiers.ok()) return Status::error("cannot open the cache tiers: " + tiers.message());
  s.tiers = std::move(tiers.value());
  eo->deployment_secret = s.tiers->deployment_secret();
  // Fault in the first host-tier records while the daemon is idle, so that
  // the first cold prompts' write-through does not page-fault on the engine thread.
  s.tiers->prefault_async(std::min<uint64_t>(o.host_cache_bytes(), 256ull << 20));
  log_line(
      o, LogLevel::kInfo,
      "cache tiers: host " + std::to_string(o.host_cache_bytes() >> 20) + " MiB, disk " +
          (o.disk_cache_dir.empty()
               ? std::string("off")
               : o.disk_cache_dir + " (" + std::to_string(o.disk_cache_bytes() >> 20) + " MiB)") +
          ", remote " + (o.remote_cache.empty() ? std::string("off") : o.remote_cache) + ", " +
          o.write_policy + ", writers " + o.cache_writer_priority);
  return Status::ok_status();
}

// One line on the TTL pins taken back from the disk tier, and one per pin dropped.
void log_pin_restore(const ServerOptions& o, const PinRestoreReport& r) {
  if (!r.error.empty()) log_line(o, LogLevel::kWarn, "stored cache pins not read: " + r.error);
  for (const std::string& d : r.damaged)
    log_line(o, LogLevel::kWarn, "damaged cache pin record skipped (its prefix stays cached, unpinned): " + d);
  for (const std::string& d : r.dropped) log_line(o, LogLevel::kInfo, "stored cache pin dropped: " + d);
  if (r.restored + r.expired > 0 || !r.dropped.empty() || !r.damaged.empty())
    log_line(o, LogLevel::kInfo,
             "cache pins restored: " + std::to_string(r.restored) + " (" + std::to_string(r.expired) +
                 " expired, " + std::to_string(r.dropped.size()) + " dropped, " + std::to_string(r.damaged.size()) +
                 " damaged)");
}

// What every handler reads (DaemonContext), and the dashboard with its sampler.
void fill_context(Server::State& s, const std::string& backend_name) {
  const ServerOptions& o = s.options;
  const ModelConfig& cfg = s.model->config();
  s.model_id = model_id_for(o.model);
  s.admission = std::make_unique<AdmissionGate>(o.max_concurrent_requests + o.max_queued_requests);
  DaemonContext& ctx = s.ctx;
  ctx.engine = s.engine.get();
  ctx.model.id = s.model_id;
  ctx.model.n_ctx = cfg.n_ctx_train;
  ctx.model.n_vocab = cfg.n_vocab;
  ctx.model.tokenizer = s.tokenizer.get();
  ctx.model.chat_template = s.chat_template.get();
  ctx.build.backend_name = backend_name;
  ctx.build.cpu_isa_name = cpu::cpu_isa_name(o.cpu_isa);
  ctx.fast_paths = [backend = s.backend.get()] { return backend->fast_path_report(); };
  ctx.metrics = &s.metrics;
  ctx.admission = s.admission.get();
  ctx.tiers = s.tiers.get();
  ctx.api_keys = o.api_keys.get();
  if (o.api_keys && o.api_keys->from_file()) {
    s.tenant_limits = std::make_unique<TenantLimits>(o.api_keys->tenants());
    ctx.tenant_limits = s.tenant_limits.get();
    std::vector<std::string> names;
    for (const Tenant& t : o.api_keys->tenants()) names.push_back(t.name);
    s.metrics.set_tenants(std::move(names));
  }
  TtlPinOptions pins;
  pins.block_size = o.block_size;
  pins.min_cache_tokens = o.min_cache_tokens;
  pins.ttl_scale = o.cache_ttl_scale;
  std::vector<std::string> tenant_names;
  if (s.tenant_limits)
    for (const Tenant& t : o.api_keys->tenants()) tenant_names.push_back(t.name);
  ctx.ttl_pins = std::make_shared<TtlPins>(s.engine.get(), s.tenant_limits.get(), pins, s.tiers.get(),
                                           std::move(tenant_names));
  log_pin_restore(o, ctx.ttl_pins->restore());
  ctx.dashboard =
      std::make_shared<Dashboard>(ctx.engine, ctx.tiers, ctx.model.tokenizer, DashboardOptions{});
}

// The listener's connection threads and time limits (daemon/http/connection_server.h);
// raises the open-file limit to fit that many connections.
ConnectionOptions connection_options(const ServerOptions& o) {
  ConnectionOptions c;
  c.max_threads = static_cast<size_t>(o.http_threads);
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  c.idle_timeout = ms(o.http_idle_timeout_s);
  c.head_timeout = ms(o.http_head_timeout_s);
  c.body_timeout = ms(o.http_body_timeout_s);
  const size_t wanted = c.max_threads + 1024;  // the connections, and the model, tiers, logs
  if (const size_t got = raise_open_file_limit(wanted); got < wanted)
    log_line(o, LogLevel::kWarn,
             "the open-file limit is " + std::to_string(got) + " (hard limit), below the " +
                 std::to_string(wanted) + " that --http-threads " + std::to_string(o.http_threads) +
                 " connections need; beyond it new connections wait in the listen backlog");
  return c;
}

// The httplib server's limits and socket options (the connection threads and
// timeouts are the listener's, see connection_options), the debug request
// log, then the routes.
void configure_http(Server::State& s) {
  httplib::Server& h = *s.http;
  const ServerOptions* o = &s.options;
  h.set_payload_max_length(static_cast<size_t>(o->max_body_bytes));
  h.set_tcp_nodelay(true);
  h.set_socket_options([&s](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    s.listen_fd = sock;
  });
  if (o->log_level >= LogLevel::kDebug) {
    h.set_logger([o](const httplib::Request& req, const httplib::Response& res) {
      log_line(*o, LogLevel::kDebug,
               req.method + " " + req.path + " -> " + std::to_string(res.status));
    });
  }
  install_routes(h, s.ctx, RouteOptions{s.options.origin_policy, s.options.max_body_bytes});
}

// Binds the port (any free one with --port 0) and raises the listen backlog.
Status bind_port(Server::State& s) {
  const ServerOptions& o = s.options;
  if (o.port == 0) {
    s.port = s.http->bind_to_any_port(o.host);
    if (s.port < 0) return Status::error("cannot bind " + o.host + " to any port");
  } else {
    if (!s.http->bind_to_port(o.host, o.port)) {
      return Status::error("cannot bind " + o.host + ":" + std::to_string(o.port) +
                           " (in use, or no permission)");
    }
    s.port = o.port;
  }
  // httplib listens with a backlog of 5, which drops connections when many
  // clients connect at once; listen() again raises it (Linux updates it).
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);
  return Status::ok_status();
}

}  // namespace

Server::Server(std::unique_ptr<State> state) : s_(std::move(state)) {}

Server::~Server() {
  if (!s_) return;
  (void)close();
}

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f s", s);
  return buf;
}

}  // namespace

std::string Server::close() {
  State& s = *s_;
  if (s.closed) return "";
  s.closed = true;
  s.http->stop();
  const bool signalled = s.stopped.load();
  const auto t0 = signalled ? s.stop_began : std::chrono::steady_clock::now();
  auto since = [&] {
    return seconds_text(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  auto step = [&](const std::string& what) {
    log_line(s.options, LogLevel::kInfo, "shutdown +" + since() + ": " + what);
  };
  // The flush bound starts once the requests have ended (the grace is over).
  const auto flush_deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(s.options.shutdown_flush_s * 1000));
  if (s.tiers) s.tiers->begin_shutdown(flush_deadline);
  s.ctx.dashboard.reset();  // its sampler reads the engine and the tiers
  s.ctx.ttl_pins.reset();   // its sweeper unpins through the engine
  s.ctx.engine = nullptr;
  s.engine.reset();  // ends what is left; queued record builds run (or are dropped past the bound)
  step("engine stopped");
  std::string summary;
  if (s.tiers) {
    const ShutdownDrain d = s.tiers->drain_for_shutdown();
    const uint64_t dropped = d.dropped_builds + d.dropped_records;
    summary = std::to_string(d.records_written) + " records written to disk at shutdown, " +
              std::to_string(dropped) + " dropped at the --shutdown-flush-s bound, " +
              std::to_string(d.dropped_while_serving) + " dropped while serving (queue full)";
    if (s.tiers->has_remote())
      summary += "; " + std::to_string(d.remote_writes_dropped) + " remote writes dropped";
    step("disk writes drained in " + seconds_text(d.seconds) + " (writer at " +
         (d.writer_raised ? "normal priority" : "low priority, drained by this thread") + ")");
    s.ctx.tiers = nullptr;
    s.tiers.reset();  // flushes and closes RocksDB
    step("cache tiers closed");
  }
  return (signalled ? "stopped " + since() + " after the signal" : std::string("stopped")) +
         (summary.empty() ? "" : "; " + summary);
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
  std::string backend_name;
  if (Status st = load_model(*s, *path, &backend_name); !st.ok()) return st;
  if (Status st = load_text(*s); !st.ok()) return st;
  const ModelConfig& cfg = s->model->config();
  apply_state_budget(*s);

  auto fingerprint = model_fingerprint(*s->file, cache_dir);
  if (!fingerprint.ok())
    return Status::error("cannot fingerprint the model: " + fingerprint.message());
  // Weights, tokenizer and fingerprint are copied out: the file is never read
  // again, so replacing or truncating it while serving cannot SIGBUS.
  s->file->drop_mapping();
  const Hash128 cache_id = cache_identity(o, backend_name, *fingerprint);
  EngineOptions eo = engine_options(o, *s->model, cache_id);
  log_line(o, LogLevel::kInfo,
           std::string("KV cache: ") + dtype_name(eo.kv_dtype) + (o.kv_dtype == "auto" ? " (--kv-dtype auto)" : ""));
  if (Status st = eo.validate(cfg); !st.ok()) return st;
  if (Status st = open_tiers(*s, cache_id, &eo); !st.ok()) return st;
  auto engine = Engine::create(*s->model, s->tokenizer.get(), s->tiers.get(), eo);
  if (!engine.ok()) return Status::error("cannot start the engine: " + engine.message());
  s->engine = std::move(engine.value());

  fill_context(*s, backend_name);
  if (o.api_key_source == "--api-key")
    log_line(o, LogLevel::kWarn,
             "--api-key is visible to every local user in the process list (ps, /proc/PID/cmdline); "
             "prefer --api-key-file FILE or PREFIXD_API_KEY");
  if (o.api_keys && o.api_keys->from_file())
    log_line(o, LogLevel::kInfo,
             "API keys from " + o.api_keys_file + ": " +
                 std::to_string(o.api_keys->tenants().size()) + " tenants");
  if ((o.host == "0.0.0.0" || o.host == "::") && o.allowed_hosts.empty())
    log_line(o, LogLevel::kWarn,
             "listening on every address: requests must name localhost, 127.0.0.1 or [::1] in Host "
             "unless --allowed-hosts lists the names clients use");
  const bool loopback = o.host == "127.0.0.1" || o.host == "localhost" || o.host == "::1";
  if (!loopback && !o.api_keys)
    log_line(o, LogLevel::kWarn,
             "listening on " + o.host + " without an API key: anyone who can reach this port may "
             "use every route; set --api-key-file FILE (see SECURITY.md)");
  auto http = make_http_server(o.tls_cert_path, o.tls_key_path, connection_options(o));
  if (!http.ok()) return http.status();
  s->http = std::move(http.value());
  configure_http(*s);
  if (Status st = bind_port(*s); !st.ok()) return st;
  log_line(o, LogLevel::kInfo,
           "model " + s->model_id + " (" + cfg.arch_name + ", " + std::to_string(cfg.n_layers) +
               " layers, context " + std::to_string(cfg.n_ctx_train) + ") on " + backend_name +
               "; " + std::to_string(o.http_threads) + " HTTP threads");
  return std::unique_ptr<Server>(new Server(std::move(s)));
}

bool Server::run() {
  std::printf("prefixd listening on %s://%s:%d\n", s_->options.tls_enabled() ? "https" : "http",
              s_->options.host.c_str(), s_->port);
  std::fflush(stdout);
  s_->in_run.store(true);
  if (s_->stopped.load()) {  // a signal came before the listener started
    s_->in_run.store(false);
    return true;
  }
  return s_->http->listen_after_bind() || s_->stopped.load();
}

void Server::shutdown(std::chrono::milliseconds grace) {
  const auto began = std::chrono::steady_clock::now();
  if (s_->stopped.load()) return;
  s_->stop_began = began;
  if (s_->stopped.exchange(true)) return;
  DaemonContext& ctx = s_->ctx;
  ctx.draining.store(true);
  log_line(s_->options, LogLevel::kInfo,
           "shutting down: " + std::to_string(ctx.admission->in_flight()) + " requests in flight");
  auto since = [&] {
    return seconds_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  };
  auto wait_idle = [&](std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (ctx.admission->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_idle(grace);
  const int64_t n_left = ctx.admission->in_flight();
  ctx.cancel_all.store(true);
  wait_idle(std::chrono::milliseconds(5000));
  log_line(s_->options, LogLevel::kInfo,
           "shutdown +" + since() + ": " + std::to_string(n_left) +
               " requests cancelled after the grace period, " +
               std::to_string(ctx.admission->in_flight()) + " still in flight");
  // httplib's stop() does nothing until listen_after_bind() has started: when
  // run() is on its way there, wait for the listener to run, then stop it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s_->in_run.load() && !s_->http->is_running() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  s_->http->stop();
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
  const std::string summary = server.value()->close();
  server.value().reset();
  std::fprintf(stderr, "prefixd: %s\n", summary.c_str());
  return 0;
}

}  // namespace prefixd
