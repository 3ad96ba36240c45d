// Unit tests of the daemon's options: ServerOptions::validate, the bundled
// model as the default source, and the CPU instruction set option.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iterator>
#include <sstream>

#include "daemon/commands/generate_command.h"
#include "daemon/cpu_isa_option.h"
#include "daemon/model_source.h"
#include "daemon/server_options.h"
#include "tests/shared_dir.h"

using namespace prefixd;

TEST_CASE("ServerOptions::validate checks every range and name") {
  ServerOptions o;
  CHECK(o.validate().ok());
  CHECK(o.http_threads == std::max(4096, o.max_concurrent_requests + o.max_queued_requests + 8));
  auto bad = [](auto mutate) {
    ServerOptions x;
    mutate(x);
    return !x.validate().ok();
  };
  CHECK(bad([](ServerOptions& x) { x.port = 70000; }));
  CHECK(bad([](ServerOptions& x) { x.backend = "tpu"; }));
  CHECK(bad([](ServerOptions& x) { x.cuda_graphs = "auto"; }));
  CHECK(bad([](ServerOptions& x) { x.kv_dtype = "q4"; }));
  CHECK(bad([](ServerOptions& x) { x.block_size = 0; }));
  CHECK(bad([](ServerOptions& x) { x.n_threads = 0; }));
  CHECK(bad([](ServerOptions& x) { x.kv_pool_mib = 0; }));
  CHECK(bad([](ServerOptions& x) { x.max_concurrent_requests = 0; }));
  CHECK(bad([](ServerOptions& x) { x.max_queued_requests = -1; }));
  CHECK(bad([](ServerOptions& x) { x.max_body_bytes = 10; }));
  CHECK(bad([](ServerOptions& x) { x.write_policy = "sometimes"; }));
  CHECK(bad([](ServerOptions& x) { x.log_level_name = "loud"; }));
  CHECK(bad([](ServerOptions& x) { x.host_cache_gb = -1; }));
  CHECK(bad([](ServerOptions& x) { x.disk_cache_gb = -1; }));
  CHECK(bad([](ServerOptions& x) { x.host.clear(); }));
  CHECK(bad([](ServerOptions& x) { x.cpu_isa_option.requested = "bogus"; }));
  ServerOptions w;
  w.kv_window_share = 0.97;
  CHECK(w.validate().message() == "--kv-window-share 0.97 is out of range (0..0.95)");
  w.kv_window_share = 0;
  CHECK(w.validate().ok());
  ServerOptions g;
  g.cuda_graphs = "off";
  CHECK(g.validate().ok());
  g.cuda_graphs = "yes";
  CHECK(g.validate().message() == "--cuda-graphs 'yes' is not one of on, off");
  ServerOptions d;
  d.log_level_name = "debug";
  REQUIRE(d.validate().ok());
  CHECK(d.log_level == LogLevel::kDebug);
}

TEST_CASE("without --model, serve and generate use the bundled stories260K in models/") {
  CHECK(ServerOptions{}.model == "stories260K");
  CHECK(GenerateOptions{}.model == "stories260K");
  const std::string bundled = std::string(PREFIXD_SOURCE_DIR) + "/models/stories260K.gguf";
  CHECK(bundled_model_path() == bundled);
  // The name resolves to the bundled file without touching the cache directory.
  Result<std::string> path = resolve_model_path("stories260K", "/nonexistent/prefixd-cache");
  REQUIRE_MESSAGE(path.ok(), path.message());
  CHECK(*path == bundled);
  // It is the shared test model, byte for byte.
  auto read_all = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string bytes = read_all(bundled);
  CHECK(bytes.size() == 1185376);
  CHECK(bytes == read_all(prefixd::testing::shared_dir() + "/models/stories260K.gguf"));
  // Any other name is still a path, and a missing path is an error naming it.
  Result<std::string> missing = resolve_model_path("no-such-model.gguf", "/nonexistent");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message() == "model file 'no-such-model.gguf' does not exist");
}

TEST_CASE("$PREFIXD_MODELS_DIR, when set and not empty, is where the bundled model is looked up") {
  const std::string compiled = std::string(PREFIXD_SOURCE_DIR) + "/models/stories260K.gguf";
  REQUIRE(::setenv("PREFIXD_MODELS_DIR", "/nonexistent/bundle/models", 1) == 0);
  CHECK(bundled_model_path() == "/nonexistent/bundle/models/stories260K.gguf");
  Result<std::string> missing = resolve_model_path("stories260K", "/nonexistent/prefixd-cache");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.message().find("'/nonexistent/bundle/models/stories260K.gguf'") != std::string::npos);
  CHECK(missing.message().find("$PREFIXD_MODELS_DIR") != std::string::npos);
  REQUIRE(::setenv("PREFIXD_MODELS_DIR", (prefixd::testing::shared_dir() + "/models").c_str(), 1) == 0);
  Result<std::string> shared = resolve_model_path("stories260K", "/nonexistent/prefixd-cache");
  REQUIRE_MESSAGE(shared.ok(), shared.message());
  CHECK(*shared == prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  REQUIRE(::setenv("PREFIXD_MODELS_DIR", "", 1) == 0);  // empty counts as unset
  CHECK(bundled_model_path() == compiled);
  REQUIRE(::unsetenv("PREFIXD_MODELS_DIR") == 0);
  CHECK(bundled_model_path() == compiled);
}

TEST_CASE("--cpu-isa wins over PREFIXD_CPU_ISA, which wins over auto; validate resolves it") {
  auto parsed = [](const std::string& command_line, const char* env) {
    CLI::App app;
    ServerOptions o;
    register_server_flags(app, o);
    app.parse(command_line);
    o.cpu_isa_option.take_env(env);
    return o;
  };
  ServerOptions none = parsed("", nullptr);
  CHECK(none.cpu_isa_option.source == "auto");
  REQUIRE(none.validate().ok());
  CHECK(none.cpu_isa == cpu::best_cpu_isa());
  CHECK(none.cpu_isa_option.describe(none.cpu_isa) ==
        std::string("CPU instruction set ") + cpu::cpu_isa_name(cpu::best_cpu_isa()) +
            " (auto; CPU features: " + cpu::cpu_feature_string() + ")");

  ServerOptions empty_env = parsed("", "");
  CHECK(empty_env.cpu_isa_option.source == "auto");

  ServerOptions env = parsed("", "portable");
  CHECK(env.cpu_isa_option.source == "PREFIXD_CPU_ISA");
  CHECK(env.cpu_isa_option.requested == "portable");
  REQUIRE(env.validate().ok());
  CHECK(env.cpu_isa == cpu::CpuIsa::kPortable);
  CHECK(env.cpu_isa_option.describe(env.cpu_isa) ==
        "CPU instruction set portable (PREFIXD_CPU_ISA=portable; CPU features: " +
            cpu::cpu_feature_string() + ")");

  ServerOptions flag = parsed("--cpu-isa portable", "bogus");
  CHECK(flag.cpu_isa_option.source == "--cpu-isa");
  CHECK(flag.cpu_isa_option.requested == "portable");
  REQUIRE(flag.validate().ok());
  CHECK(flag.cpu_isa == cpu::CpuIsa::kPortable);
  CHECK(flag.cpu_isa_option.describe(flag.cpu_isa) ==
        "CPU instruction set portable (--cpu-isa portable; CPU features: " +
            cpu::cpu_feature_string() + ")");

  ServerOptions flag_auto = parsed("--cpu-isa auto", "portable");
  REQUIRE(flag_auto.validate().ok());
  CHECK(flag_auto.cpu_isa == cpu::best_cpu_isa());
}

TEST_CASE("an unknown or unsupported CPU instruction set is an error naming its source") {
  CpuIsaOption flag;
  flag.requested = "bogus";
  flag.source = "--cpu-isa";
  Result<cpu::CpuIsa> unknown = flag.choose();
  REQUIRE(!unknown.ok());
  CHECK(unknown.message().rfind("--cpu-isa: ", 0) == 0);
  CHECK(unknown.message().find("'bogus'") != std::string::npos);
  CHECK(unknown.message().find(cpu::cpu_isa_choices()) != std::string::npos);

  CpuIsaOption env;
  env.take_env("bogus");
  REQUIRE(!env.choose().ok());
  CHECK(env.choose().message().rfind("PREFIXD_CPU_ISA: ", 0) == 0);

  for (cpu::CpuIsa isa : cpu::all_cpu_isas()) {
    CpuIsaOption o;
    o.requested = cpu::cpu_isa_name(isa);
    o.source = "--cpu-isa";
    Result<cpu::CpuIsa> r = o.choose();
    CHECK(r.ok() == cpu::cpu_supports(isa));
    if (r.ok()) {
      CHECK(r.value() == isa);
    } else {
      CHECK(r.message().find(cpu::cpu_feature_string()) != std::string::npos);
    }
  }
}
