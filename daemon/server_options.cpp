// Serve-mode flags and their validation.
#include "daemon/server_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "common/private_files.h"
#include "daemon/auth/secret_file.h"
#include "daemon/deployment_secret.h"
#include "storage/writer_priority.h"
#include "daemon/http/listener.h"

namespace prefixd {
namespace {

Status range_error(const std::string& flag, const std::string& value, const std::string& range) {
  return Status::error("--" + flag + " " + value + " is out of range (" + range + ")");
}

// Refuses an existing --cache-dir (or the default one) or --disk-cache-dir that
// another user owns or may write (common/private_files.h). A missing one is
// fine: it is created 0700 when first needed.
Status check_cache_dirs(const std::string& cache_dir, const std::string& disk_cache_dir) {
  auto check = [](const char* flag, const std::string& dir) {
    std::error_code ec;
    if (dir.empty() || !std::filesystem::exists(dir, ec)) return Status::ok_status();
    Status s = check_private_dir(dir);
    return s.ok() ? s : Status::error(std::string(flag) + ": " + s.message());
  };
  Status s = check("--cache-dir", cache_dir.empty() ? default_cache_dir() : cache_dir);
  return s.ok() ? check("--disk-cache-dir", disk_cache_dir) : s;
}

// The listener's address and body limit, the model, the backend and the
// engine's sizes and limits; resolves the CPU instruction set.
Status check_engine_flags(ServerOptions& o) {
  if (o.host.empty()) return Status::error("--host must not be empty");
  if (o.port < 0 || o.port > 65535) return range_error("port", std::to_string(o.port), "0..65535");
  if (o.max_body_bytes < 1024 || o.max_body_bytes > (1ll << 32)) {
    return range_error("max-body-bytes", std::to_string(o.max_body_bytes), "1024..4294967296");
  }
  if (o.model.empty()) return Status::error("--model must not be empty");
  if (o.backend != "cpu" && o.backend != "cuda" && o.backend != "auto") {
    return Status::error("--backend '" + o.backend + "' is not one of cpu, cuda, auto");
  }
  if (o.cuda_graphs != "on" && o.cuda_graphs != "off") {
    return Status::error("--cuda-graphs '" + o.cuda_graphs + "' is not one of on, off");
  }
  if (o.n_threads < 1 || o.n_threads > 256)
    return range_error("threads", std::to_string(o.n_threads), "1..256");
  Result<cpu::CpuIsa> isa = o.cpu_isa_option.choose();
  if (!isa.ok()) return isa.status();
  o.cpu_isa = isa.value();
  if (o.kv_pool_mib < 1 || o.kv_pool_mib > (1ll << 22)) {
    return range_error("kv-pool-mib", std::to_string(o.kv_pool_mib), "1..4194304");
  }
  if (!(o.kv_window_share >= 0.0 && o.kv_window_share <= 0.95)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", o.kv_window_share);
    return range_error("kv-window-share", value, "0..0.95");
  }
  if (o.block_size < 1 || o.block_size > 1024)
    return range_error("block-size", std::to_string(o.block_size), "1..1024");
  if (o.kv_dtype != "auto" && o.kv_dtype != "f32" && o.kv_dtype != "f16" && o.kv_dtype != "bf16") {
    return Status::error("--kv-dtype '" + o.kv_dtype + "' is not one of auto, f32, f16, bf16");
  }
  if (o.state_snapshots < -1 || o.state_snapshots > 4096) {
    return range_error("state-snapshots", std::to_string(o.state_snapshots), "-1..4096");
  }
  if (o.snapshot_interval_blocks < 0 || o.snapshot_interval_blocks > (1 << 20)) {
    return range_error("snapshot-interval-blocks", std::to_string(o.snapshot_interval_blocks), "0..1048576");
  }
  if (o.max_batch_tokens < 1 || o.max_batch_tokens > (1 << 20)) {
    return range_error("max-batch-tokens", std::to_string(o.max_batch_tokens), "1..1048576");
  }
  if (o.max_concurrent_requests < 1 || o.max_concurrent_requests > 4096) {
    return range_error("max-concurrent", std::to_string(o.max_concurrent_requests), "1..4096");
  }
  if (o.max_queued_requests < 0 || o.max_queued_requests > 65536) {
    return range_error("max-queued", std::to_string(o.max_queued_requests), "0..65536");
  }
  if (o.max_pinned_blocks < 0)
    return range_error("max-pinned-blocks", std::to_string(o.max_pinned_blocks), ">= 0");
  if (o.min_cache_tokens < 0)
    return range_error("min-cache-tokens", std::to_string(o.min_cache_tokens), ">= 0");
  if (!(o.cache_ttl_scale > 0) || o.cache_ttl_scale > 1000)
    return range_error("cache-ttl-scale", std::to_string(o.cache_ttl_scale), "in (0, 1000]");
  return Status();
}

// The connection threads and time limits, and the shutdown bounds.
Status check_http_flags(const ServerOptions& o) {
  if (o.http_threads < 0 || o.http_threads > 16384) {
    return range_error("http-threads", std::to_string(o.http_threads), "0..16384");
  }
  for (auto [flag, value] : {std::pair{"http-idle-timeout-s", o.http_idle_timeout_s},
                             std::pair{"http-head-timeout-s", o.http_head_timeout_s},
                             std::pair{"http-body-timeout-s", o.http_body_timeout_s}}) {
    if (!std::isfinite(value) || value < 0.1 || value > 3600)
      return range_error(flag, std::to_string(value), "0.1..3600");
  }
  if (!std::isfinite(o.shutdown_grace_s) || o.shutdown_grace_s < 0 || o.shutdown_grace_s > 3600) {
    return range_error("shutdown-grace-s", std::to_string(o.shutdown_grace_s), "0..3600");
  }
  if (!std::isfinite(o.shutdown_flush_s) || o.shutdown_flush_s < 0 || o.shutdown_flush_s > 3600) {
    return range_error("shutdown-flush-s", std::to_string(o.shutdown_flush_s), "0..3600");
  }
  return Status();
}

// The host and disk tiers' sizes and policies, the remote tier and the
// deployment secret (read here).
Status check_tier_flags(ServerOptions& o) {
  if (!std::isfinite(o.host_cache_gb) || o.host_cache_gb < 0 || o.host_cache_gb > 1e5) {
    return range_error("host-cache-gb", std::to_string(o.host_cache_gb), "0..100000");
  }
  if (!std::isfinite(o.disk_cache_gb) || o.disk_cache_gb < 0 || o.disk_cache_gb > 1e6) {
    return range_error("disk-cache-gb", std::to_string(o.disk_cache_gb), "0..1000000");
  }
  if (o.write_policy != "write-through" && o.write_policy != "evict-only") {
    return Status::error("--write-policy '" + o.write_policy +
                         "' is not one of write-through, evict-only");
  }
  if (auto priority = parse_writer_priority(o.cache_writer_priority); !priority.ok()) {
    return Status::error("--cache-writer-priority: " + priority.message());
  }
  if (o.onboard_policy != "auto" && o.onboard_policy != "always" && o.onboard_policy != "never") {
    return Status::error("--restore-policy '" + o.onboard_policy +
                         "' is not one of auto, always, never");
  }
  if (!o.remote_cache.empty()) {
    auto servers = parse_remote_cache_url(o.remote_cache);
    if (!servers.ok()) return Status::error("--remote-cache: " + servers.message());
    o.remote_servers = std::move(servers).value();
    if (o.cache_secret_file.empty()) {
      return Status::error(
          "--remote-cache needs --cache-secret-file FILE: replicas share blocks only under one "
          "deployment secret, and the remote tier's records are authenticated with it");
    }
  }
  if (o.remote_cache_timeout_ms < 1 || o.remote_cache_timeout_ms > 60000) {
    return range_error("remote-cache-timeout-ms", std::to_string(o.remote_cache_timeout_ms),
                       "1..60000");
  }
  if (o.remote_cache_timeout_limit < 1 || o.remote_cache_timeout_limit > 1000) {
    return range_error("remote-cache-timeout-limit", std::to_string(o.remote_cache_timeout_limit),
                       "1..1000");
  }
  if (!o.cache_secret_file.empty()) {
    auto secret = read_deployment_secret(o.cache_secret_file);
    if (!secret.ok()) return secret.status();
    o.deployment_secret = *secret;
  }
  return Status();
}

// --log-level into LogLevel.
Status parse_log_level(ServerOptions& o) {
  if (o.log_level_name == "error")
    o.log_level = LogLevel::kError;
  else if (o.log_level_name == "warn")
    o.log_level = LogLevel::kWarn;
  else if (o.log_level_name == "info")
    o.log_level = LogLevel::kInfo;
  else if (o.log_level_name == "debug")
    o.log_level = LogLevel::kDebug;
  else
    return Status::error("--log-level '" + o.log_level_name +
                         "' is not one of error, warn, info, debug");
  return Status();
}

// The caller keys: --api-keys, --api-key, --api-key-file or
// PREFIXD_API_KEY (one of them), loaded into o.api_keys.
Status load_api_keys(ServerOptions& o) {
  if (!o.api_key.empty() && !o.api_key_file.empty())
    return Status::error("--api-key and --api-key-file are both given: use one");
  const char* env_key = std::getenv("PREFIXD_API_KEY");
  if (!o.api_keys_file.empty()) {
    if (!o.api_key.empty() || !o.api_key_file.empty())
      return Status::error(std::string(o.api_key.empty() ? "--api-key-file" : "--api-key") +
                           " and --api-keys are both given: use one (an admin entry of the "
                           "--api-keys file replaces the single key)");
    if (env_key != nullptr && *env_key != '\0')
      return Status::error("PREFIXD_API_KEY is set and --api-keys is given: use one (unset "
                           "PREFIXD_API_KEY, or add its key to the file as an admin entry)");
    Result<ApiKeys> keys = ApiKeys::load_file(o.api_keys_file);
    if (!keys.ok()) return Status::error("--api-keys: " + keys.message());
    o.api_keys = std::make_shared<const ApiKeys>(std::move(keys.value()));
    o.api_key_source = o.api_keys_file;
  } else if (!o.api_key.empty()) {
    o.api_key_source = "--api-key";
  } else if (!o.api_key_file.empty()) {
    Result<std::string> key = read_secret_file(o.api_key_file);
    if (!key.ok()) return Status::error("--api-key-file: " + key.message());
    o.api_key = key.value();
    o.api_key_source = o.api_key_file;
  } else if (env_key != nullptr && *env_key != '\0') {
    o.api_key = env_key;
    o.api_key_source = "PREFIXD_API_KEY";
  }
  if (!o.api_key.empty())
    o.api_keys = std::make_shared<const ApiKeys>(ApiKeys::single_key(o.api_key));
  return Status();
}

}  // namespace

Status ServerOptions::validate() {
  if (Status st = check_engine_flags(*this); !st.ok()) return st;
  if (Status st = check_http_flags(*this); !st.ok()) return st;
  if (Status st = check_tier_flags(*this); !st.ok()) return st;
  if (Status st = parse_log_level(*this); !st.ok()) return st;
  // Every running or queued request holds its connection's thread; idle and
  // slow connections hold one each until their timeout.
  if (http_threads == 0)
    http_threads = std::max(4096, max_concurrent_requests + max_queued_requests + 8);

  if (Status st = load_api_keys(*this); !st.ok()) return st;
  if (Status st = check_cache_dirs(cache_dir, disk_cache_dir); !st.ok()) return st;
  origin_policy = make_origin_policy(host, allowed_hosts, allowed_origins);
  if (tls_cert_path.empty() != tls_key_path.empty()) {
    return Status::error(tls_cert_path.empty() ? "--tls-key needs --tls-cert (give both or neither)"
                                               : "--tls-cert needs --tls-key (give both or neither)");
  }
  if (!tls_cert_path.empty()) {
    if (Status st = check_tls_files(tls_cert_path, tls_key_path); !st.ok()) return st;
  }
  return Status();
}

namespace {

// The listener's address, the model and the engine's sizes and limits.
void add_engine_flags(CLI::App& app, ServerOptions& o) {
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", o.port, "TCP port (0 = any free port)")->capture_default_str();
  app.add_option("--model,-m", o.model,
                 "GGUF file, `stories260K` (bundled), `demo` (has a chat template), or "
                 "preset:NAME[:f32|f16|bf16]")
      ->capture_default_str();
  app.add_option("--cache-dir", o.cache_dir, "where generated models are kept")
      ->capture_default_str();
  app.add_option("--backend", o.backend, "cpu, cuda or auto")->capture_default_str();
  app.add_option("--threads,-t", o.n_threads, "compute threads")->capture_default_str();
  add_cpu_isa_flag(app, o.cpu_isa_option);
  app.add_option("--kv-pool-mib", o.kv_pool_mib, "device KV pool size in MiB")
      ->capture_default_str();
  app.add_option("--kv-window-share", o.kv_window_share,
                 "share of the KV pool for a sliding-window model's window layers (0: one space)")
      ->capture_default_str();
  app.add_option("--block-size", o.block_size, "tokens per KV block")->capture_default_str();
  app.add_option("--kv-dtype", o.kv_dtype,
                 "KV cache type: auto (bf16 for a model with BF16 K/V weights, else f16), f32, f16, bf16")->capture_default_str();
  app.add_option("--state-snapshots", o.state_snapshots,
                 "recurrent models (qwen35): device state snapshot slots, out of the KV pool "
                 "(-1: up to 16, as half the pool allows; 0: no prefix reuse for such models)")
      ->capture_default_str();
  app.add_option("--snapshot-interval-blocks", o.snapshot_interval_blocks,
                 "recurrent models: a state snapshot every this many prompt blocks (0: only at "
                 "a prompt's last full block)")
      ->capture_default_str();
  app.add_option("--max-batch-tokens", o.max_batch_tokens,
                 "tokens per forward pass (chunked prefill budget)")
      ->capture_default_str();
  app.add_option("--max-concurrent", o.max_concurrent_requests,
                 "requests running at once (recurrent models: chosen from the KV pool when not given)")
      ->each([&o](const std::string&) { o.max_concurrent_given = true; })
      ->capture_default_str();
  app.add_option("--max-queued", o.max_queued_requests,
                 "requests waiting beyond those; more get 429")
      ->capture_default_str();
  app.add_option("--max-pinned-blocks", o.max_pinned_blocks,
                 "cap on pinned blocks (0 = a quarter of the pool)")
      ->capture_default_str();
  app.add_option("--min-cache-tokens", o.min_cache_tokens,
                 "cache breakpoints (Anthropic cache_control) and prompt_cache_retention pin "
                 "nothing for a prefix shorter than this many tokens")
      ->capture_default_str();
  app.add_option("--cache-ttl-scale", o.cache_ttl_scale,
                 "multiplies every pin TTL (5m, 1h, 24h); for tests, e.g. 0.01 makes 5m 3 s")
      ->capture_default_str();
}

// The CUDA backend's fast paths: decode graphs, cuDNN and its child-process check.
void add_cuda_flags(CLI::App& app, ServerOptions& o) {
  app.add_option("--cuda-graphs", o.cuda_graphs,
                 "on: the CUDA backend replays decode steps as CUDA graphs (checked bit for bit "
                 "against an eager run first); off: every op launched on its own")
      ->capture_default_str();
  app.add_option("--cudnn-lib", o.cudnn_lib,
                 "CUDA backend: cuDNN for prefill attention: a libcudnn.so.9 (or its folder), `auto` (the "
                 "library path, then Python environments' nvidia/cudnn/lib) or `off`; default "
                 "$PREFIXD_CUDNN_LIB, else auto");
  app.add_option("--cudnn-probe", o.cudnn_probe,
                 "CUDA backend: the program that checks each cuDNN plan bucket in a child process before it "
                 "serves (a crash there only switches cuDNN off): a path, or `off` to check in the daemon's "
                 "own process; default $PREFIXD_CUDNN_PROBE, else prefixd-cudnn-probe beside prefixd");
}

// Connections, shutdown and who may call (keys, hosts, origins, TLS).
void add_http_flags(CLI::App& app, ServerOptions& o) {
  app.add_option("--http-threads", o.http_threads,
                 "most HTTP connections served at once, a thread each, started on demand; more "
                 "wait for a thread (0 = the larger of 4096 and concurrent + queued + 8)")
      ->capture_default_str();
  app.add_option("--http-idle-timeout-s", o.http_idle_timeout_s,
                 "close a connection that starts no request (new, or kept alive) within this")
      ->capture_default_str();
  app.add_option("--http-head-timeout-s", o.http_head_timeout_s,
                 "close a connection whose request line and headers take longer than this in all")
      ->capture_default_str();
  app.add_option("--http-body-timeout-s", o.http_body_timeout_s,
                 "close a connection whose request body takes longer than this in all")
      ->capture_default_str();
  app.add_option("--shutdown-grace-s", o.shutdown_grace_s,
                 "on SIGINT/SIGTERM, seconds in-flight requests get to finish")
      ->capture_default_str();
  app.add_option("--shutdown-flush-s", o.shutdown_flush_s,
                 "then, seconds queued disk writes get before RocksDB closes (what does not fit "
                 "is dropped and counted in the last log line)")
      ->capture_default_str();
  app.add_option("--api-key", o.api_key,
                 "require `Authorization: Bearer KEY` (all but /health); visible in the process "
                 "list: prefer --api-key-file or PREFIXD_API_KEY");
  app.add_option("--api-key-file", o.api_key_file,
                 "read the API key from FILE (this user's, mode 0600 or stricter)");
  app.add_option("--api-keys", o.api_keys_file,
                 "JSON file of keys with tenants, roles (user, admin), limits and cache namespaces "
                 "(this user's, mode 0600 or stricter; see docs/access.md)");
  app.add_option("--allowed-hosts", o.allowed_hosts,
                 "Host names served besides the bind address, localhost, 127.0.0.1 and [::1] "
                 "(comma-separated; '*' = any)")
      ->delimiter(',');
  app.add_option("--allowed-origins", o.allowed_origins,
                 "browser Origins allowed to call the API besides the daemon's own "
                 "(comma-separated, e.g. https://app.example; '*' = any)")
      ->delimiter(',');
  app.add_option("--tls-cert", o.tls_cert_path,
                 "serve HTTPS with this PEM certificate (chain); needs --tls-key");
  app.add_option("--tls-key", o.tls_key_path,
                 "PEM private key of --tls-cert, unencrypted; refused when others may read it (chmod 600)");
  app.add_option("--max-body-bytes", o.max_body_bytes, "largest accepted request body")
      ->capture_default_str();
  app.add_option("--chat-template", o.chat_template, "chat template name, overriding the model's");
}

// The host, disk and remote tiers, the deployment secret and the log level.
void add_tier_flags(CLI::App& app, ServerOptions& o) {
  app.add_option("--host-cache-gb", o.host_cache_gb, "host-RAM tier capacity in GB (0 disables)")
      ->capture_default_str();
  app.add_option("--disk-cache-dir", o.disk_cache_dir,
                 "RocksDB directory of the disk tier (empty disables)");
  app.add_option("--disk-cache-gb", o.disk_cache_gb, "disk tier capacity in GB")
      ->capture_default_str();
  app.add_flag("--disk-cache-reset-on-corruption", o.disk_cache_reset_on_corruption,
               "when the RocksDB database in --disk-cache-dir is damaged, rename it to "
               "DIR.corrupt-<time> and start with an empty one (default: refuse to start)");
  app.add_option("--write-policy", o.write_policy, "write-through or evict-only")
      ->capture_default_str();
  app.add_option("--cache-writer-priority", o.cache_writer_priority,
                 "CPU share of the disk and remote writers: batch:N (SCHED_BATCH at nice N, 0..19: keeps "
                 "write-through up under load) or idle (SCHED_IDLE: only idle CPU time)")
      ->capture_default_str();
  app.add_option("--restore-policy", o.onboard_policy,
                 "blocks found in host/disk: auto (restore when faster than recompute), always, never")
      ->capture_default_str();
  app.add_option("--remote-cache", o.remote_cache,
                 "memcached://HOST:PORT[,HOST:PORT...]: a memcached pool shared by replicas as the "
                 "tier below disk (needs --cache-secret-file)");
  app.add_option("--remote-cache-timeout-ms", o.remote_cache_timeout_ms,
                 "bound on each memcached operation, ms")
      ->capture_default_str();
  app.add_option("--remote-cache-timeout-limit", o.remote_cache_timeout_limit,
                 "a memcached server that times out this many operations in a row (stalled, "
                 "answering nothing) leaves the ring for 2 s, then is tried again")
      ->capture_default_str();
  app.add_option("--cache-secret-file", o.cache_secret_file,
                 "private file (0600, >= 16 bytes) holding the deployment secret that replicas "
                 "sharing a cache must share (default: the disk directory's own, or random)");
  app.add_option("--log-level", o.log_level_name, "error, warn, info, debug")
      ->capture_default_str();
}

}  // namespace

void register_server_flags(CLI::App& app, ServerOptions& o) {
  add_engine_flags(app, o);
  add_cuda_flags(app, o);
  add_http_flags(app, o);
  add_tier_flags(app, o);
}

}  // namespace prefixd
