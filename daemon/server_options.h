// ServerOptions: every setting of `prefixd` in serve mode, one struct, filled
// from command-line flags (register_server_flags) and validated once
// (validate) before anything is loaded.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/auth/api_keys.h"
#include "daemon/cpu_isa_option.h"
#include "daemon/http/request_origin.h"
#include "daemon/model_source.h"
#include "storage/remote_tier.h"

namespace CLI {
class App;
}

namespace prefixd {

enum class LogLevel : uint8_t { kError, kWarn, kInfo, kDebug };

struct ServerOptions {
  // Network.
  std::string host = "127.0.0.1";
  int32_t port = 8080;                 // 0 = any free port (printed at start)
  std::string api_key;                 // empty = no auth; else `Authorization: Bearer KEY`
  std::string api_key_file;            // --api-key-file: the key from a 0600 file
  std::string api_key_source;          // where api_key came from: "--api-key", the file, PREFIXD_API_KEY
  std::string api_keys_file;           // --api-keys: tenants, roles and limits (daemon/auth/api_keys.h)
  // The keys the daemon accepts (filled by validate): from --api-keys, or the
  // one admin key of api_key; null = no auth.
  std::shared_ptr<const ApiKeys> api_keys;
  std::vector<std::string> allowed_hosts;    // --allowed-hosts, beyond the defaults ('*': any)
  std::vector<std::string> allowed_origins;  // --allowed-origins ('*': any)
  std::string tls_cert_path;           // --tls-cert: PEM certificate chain; with tls_key_path, HTTPS
  std::string tls_key_path;            // --tls-key: PEM private key of that certificate (private file)
  OriginPolicy origin_policy;                // derived from host and the two lists
  int64_t max_body_bytes = 8ll << 20;  // request bodies above this get 413
  int32_t http_threads = 0;            // connections served at once, a thread each; 0 = auto
  double http_idle_timeout_s = 5;      // a connection with no request in progress is closed after
  double http_head_timeout_s = 10;     // a request's line and headers, in total, from its first byte
  double http_body_timeout_s = 60;     // a request's body, in total, from the end of its headers
  double shutdown_grace_s = 10;        // on SIGINT/SIGTERM: time in-flight requests get to finish
  double shutdown_flush_s = 10;        // then: time queued disk writes get (the rest is dropped, counted)

  // Model and engine.
  std::string model = kDefaultModel;     // GGUF path, stories260K, demo, or preset:NAME[:dtype]
  std::string cache_dir;                 // where generated models live (default_cache_dir())
  std::string backend = "auto";          // cpu | cuda | auto
  std::string cuda_graphs = "on";        // on | off: decode steps as CUDA graphs (cuda backend)
  int32_t n_threads = 2;                 // compute threads of the CPU backend
  CpuIsaOption cpu_isa_option;           // --cpu-isa / PREFIXD_CPU_ISA, as given
  cpu::CpuIsa cpu_isa{};                 // the set it resolves to (filled by validate)
  // cuDNN for the CUDA backend's prefill attention (CudaBackendOptions):
  // --cudnn-lib, else PREFIXD_CUDNN_LIB: a libcudnn.so.9 or its folder,
  // "auto" (the library path, then Python environments) or "off"; empty
  // (neither given): auto.
  std::string cudnn_lib;
  // --cudnn-probe, else PREFIXD_CUDNN_PROBE: the child-process check program
  // of cuDNN plans (CudaBackendOptions::cudnn_probe); empty: beside prefixd.
  std::string cudnn_probe;
  std::vector<std::string> cudnn_python_prefixes;  // $VIRTUAL_ENV, $CONDA_PREFIX, python3's on $PATH, ~/.local (main.cpp)
  int64_t kv_pool_mib = 256;             // device KV pool budget, MiB
  // Share of the pool that holds a sliding-window model's window layers in a
  // space of their own (EngineOptions::window_share); 0: one space. [0, 0.95]
  double kv_window_share = 0.5;
  int32_t block_size = 16;               // tokens per KV block
  std::string kv_dtype = "auto";         // auto | f32 | f16 | bf16 (auto: Model::auto_kv_dtype)
  int32_t max_batch_tokens = 512;        // tokens per forward pass (chunked prefill budget)
  // Recurrent models (qwen35): device state snapshot slots (-1: the engine's
  // default, 0: none) and a snapshot every that many prompt blocks (0: only
  // at a prompt's last full block). EngineOptions::state_snapshots.
  int32_t state_snapshots = -1;
  int32_t snapshot_interval_blocks = 32;
  // Sequences running in the engine at once. A model with recurrent layers
  // gets a count from its pool when the flag is not given (state_budget.h),
  // as does state_snapshots when it is -1.
  int32_t max_concurrent_requests = 64;
  bool max_concurrent_given = false;     // --max-concurrent was on the command line
  int32_t max_queued_requests = 256;     // requests admitted beyond those; more get 429
  int32_t max_pinned_blocks = 0;         // 0 = a quarter of the pool
  std::string chat_template;             // override of the GGUF's template name; empty = detect
  // Cache breakpoints and retention (daemon/api/ttl_pins.h).
  int32_t min_cache_tokens = 1024;       // breakpoints before this token are not pinned
  double cache_ttl_scale = 1.0;          // every pin TTL (5m, 1h, 24h) times this (tests: 0.01)

  // Storage tiers below the device pool.
  double host_cache_gb = 1.0;                  // host-RAM tier capacity, GB (0 disables)
  std::string disk_cache_dir;                  // RocksDB directory; empty disables the disk tier
  double disk_cache_gb = 10.0;                 // disk tier capacity, GB
  bool disk_cache_reset_on_corruption = false;  // move a damaged database aside, start empty
  std::string write_policy = "write-through";  // write-through | evict-only
  std::string cache_writer_priority = "batch:10";  // idle | batch:N (storage/writer_priority.h)
  std::string onboard_policy = "auto";         // --restore-policy: auto | always | never (onboard vs recompute)
  // A memcached pool shared by replicas: "memcached://HOST:PORT[,HOST:PORT...]"; empty = none.
  std::string remote_cache;
  std::vector<RemoteServer> remote_servers;    // parsed from it by validate()
  int32_t remote_cache_timeout_ms = 200;       // per memcached operation
  // Timeouts in a row that take a memcached server out of the ring (for the
  // retry interval): RemoteTierOptions::timeout_limit.
  int32_t remote_cache_timeout_limit = 3;
  // The deployment secret shared by replicas (daemon/deployment_secret.h);
  // empty: the disk directory's own, or random per process. Required by --remote-cache.
  std::string cache_secret_file;
  std::optional<std::array<uint8_t, 16>> deployment_secret;  // read from it by validate()

  LogLevel log_level = LogLevel::kInfo;
  std::string log_level_name = "info";  // error | warn | info | debug

  // Checks ranges and names, fills derived fields (log_level, http_threads,
  // cpu_isa, origin_policy), reads the API key from --api-key-file or
  // PREFIXD_API_KEY when --api-key is not given, or the key file of
  // --api-keys (api_keys), reads --cache-secret-file, checks --remote-cache's
  // URL, and checks the TLS pair
  // (both or neither; readable, private key, OpenSSL accepts them).
  Status validate();

  bool tls_enabled() const { return !tls_cert_path.empty(); }  // after validate()

  size_t kv_pool_bytes() const { return static_cast<size_t>(kv_pool_mib) << 20; }
  uint64_t host_cache_bytes() const { return static_cast<uint64_t>(host_cache_gb * 1e9); }
  uint64_t disk_cache_bytes() const { return static_cast<uint64_t>(disk_cache_gb * 1e9); }
};

// Adds the serve-mode flags to `app` (the root command of prefixd), writing
// into `opts`, which must outlive parsing.
void register_server_flags(CLI::App& app, ServerOptions& opts);

}  // namespace prefixd
