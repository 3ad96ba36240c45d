// Integration tests of --cpu-isa and PREFIXD_CPU_ISA on the real prefixd
// binary: unknown and unsupported sets stop it with one line that says why;
// the chosen set shows in /health, /metrics and `generate --json`; the flag
// wins over the environment variable.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "tests/daemon_process.h"

using nlohmann::json;
using namespace prefixd;
using namespace prefixd::testing;

namespace {

const std::string kUnsetIsaEnv = "PREFIXD_CPU_ISA";  // child_environment: remove the variable

// Serve mode on stories260K with the CPU backend (so that the labels are the
// same on machines with a GPU).
std::vector<std::string> serve_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--model", stories_model_path(), "--threads",
                                "1",       "--backend",          "cpu"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A start-up that must fail: --port 0 so that it could never block a port.
ProcessExit run_serve_expecting_failure(const std::vector<std::string>& extra,
                                        const std::vector<std::string>& env) {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  std::vector<std::string> args = {"--port", "0", "--cache-dir", test_cache_dir()};
  std::vector<std::string> serve = serve_args(extra);
  args.insert(args.end(), serve.begin(), serve.end());
  return run_prefixd(args, env);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The output is exactly one line starting with `prefix`.
void check_one_line(const std::string& output, const std::string& prefix) {
  CHECK_MESSAGE(output.rfind(prefix, 0) == 0, output);
  REQUIRE(!output.empty());
  CHECK_MESSAGE(output.find('\n') == output.size() - 1, output);
}

// What a started daemon reports: /health's cpu_isa, and whether /metrics has
// prefixd_build_info{cpu_isa="<that>",backend="cpu"} 1 with HELP and TYPE.
struct Reported {
  std::string health_cpu_isa;
  bool build_info = false;
};

Reported start_and_read(const std::vector<std::string>& extra,
                        const std::vector<std::string>& env) {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  std::string error;
  auto d = DaemonProcess::start(serve_args(extra), &error, env);
  REQUIRE_MESSAGE(d != nullptr, error);
  auto c = d->client();
  Reported r;
  HttpAnswer h = get(*c, "/health");
  REQUIRE(h.status == 200);
  CHECK(h.body["status"] == "ok");
  CHECK(h.body["backend"] == "cpu");
  r.health_cpu_isa = h.body.value("cpu_isa", "");
  auto m = c->Get("/metrics");
  REQUIRE(m);
  REQUIRE(m->status == 200);
  r.build_info = contains(m->body, "# HELP prefixd_build_info ") &&
                 contains(m->body, "# TYPE prefixd_build_info gauge\n") &&
                 metric(m->body, "prefixd_build_info{cpu_isa=\"" + r.health_cpu_isa +
                                     "\",backend=\"cpu\"}") == 1;
  // The backend runs on that set: a completion is answered.
  HttpAnswer a = post_json(
      *c, "/v1/completions",
      json{
          {"prompt", json::array({1, 403, 407, 261, 378})}, {"max_tokens", 4}, {"temperature", 0}});
  CHECK(a.status == 200);
  CHECK(a.body["usage"]["completion_tokens"] == 4);
  CHECK(d->stop() == 0);
  return r;
}

}  // namespace

TEST_CASE("--cpu-isa bogus exits 2 with one line naming the value and the accepted values") {
  ProcessExit e = run_serve_expecting_failure({"--cpu-isa", "bogus"}, {kUnsetIsaEnv});
  CHECK(e.code == 2);
  check_one_line(e.output, "prefixd: --cpu-isa: ");
  CHECK_MESSAGE(contains(e.output, "'bogus'"), e.output);
  CHECK_MESSAGE(contains(e.output, cpu::cpu_isa_choices()), e.output);
  CHECK_MESSAGE(contains(e.output, cpu::cpu_feature_string()), e.output);
}

TEST_CASE("PREFIXD_CPU_ISA=bogus exits 2 with one line naming the variable and the value") {
  ProcessExit e = run_serve_expecting_failure({}, {"PREFIXD_CPU_ISA=bogus"});
  CHECK(e.code == 2);
  check_one_line(e.output, "prefixd: PREFIXD_CPU_ISA: ");
  CHECK_MESSAGE(contains(e.output, "'bogus'"), e.output);
  CHECK_MESSAGE(contains(e.output, cpu::cpu_isa_choices()), e.output);
}

// Per set that needs cpuid features (every one of kernels/cpu/isa_sets.def
// but portable), a feature whose absence makes it unusable: its first one
// that the set ranked below it does not need (avx2: avx2, avx512: avx512f,
// avx512bf16: avx512_bf16).
std::vector<std::pair<cpu::CpuIsa, std::string>> set_features() {
  std::vector<std::pair<cpu::CpuIsa, std::string>> out;
  std::vector<std::string_view> below;
  for (cpu::CpuIsa isa : cpu::all_cpu_isas()) {
    const std::vector<std::string_view> features = cpu::cpu_isa_features(isa);
    for (std::string_view f : features) {
      if (std::find(below.begin(), below.end(), f) != below.end()) continue;
      out.emplace_back(isa, std::string(f));
      break;
    }
    below = features;
  }
  return out;
}

TEST_CASE("a set this CPU lacks, or whose feature PREFIXD_CPU_HIDE_FEATURES hides, exits 2 naming the features") {
  const auto set_feature = set_features();
  REQUIRE(set_feature.size() == cpu::all_cpu_isas().size() - 1);  // all but portable
  for (const auto& [isa, feature] : set_feature) {
    const std::string name = cpu::cpu_isa_name(isa);
    CAPTURE(name);
    // On a CPU that has the set, its feature is hidden; on one that lacks it, nothing is.
    const bool hide = cpu::cpu_supports(isa);
    const std::vector<std::string> env = {kUnsetIsaEnv, hide ? "PREFIXD_CPU_HIDE_FEATURES=" + feature
                                                             : std::string("PREFIXD_CPU_HIDE_FEATURES")};
    ProcessExit e = run_serve_expecting_failure({"--cpu-isa", name}, env);
    CHECK(e.code == 2);
    check_one_line(e.output, "prefixd: --cpu-isa: ");
    CHECK_MESSAGE(contains(e.output, "'" + name + "' is not supported by this CPU"), e.output);
    if (hide) {
      CHECK_MESSAGE(contains(e.output, "(hidden by PREFIXD_CPU_HIDE_FEATURES: " + feature + ")"), e.output);
    } else {
      CHECK_MESSAGE(contains(e.output, cpu::cpu_feature_string()), e.output);
    }
  }
}

TEST_CASE("PREFIXD_CPU_HIDE_FEATURES: auto runs the best set left; an unknown feature name exits 2") {
  if (cpu::cpu_supports(cpu::CpuIsa::kAvx512)) {
    Reported r = start_and_read({}, {kUnsetIsaEnv, "PREFIXD_CPU_HIDE_FEATURES=avx512f"});
    CHECK(r.health_cpu_isa == "avx2");
    CHECK(r.build_info);
  }
  ProcessExit e = run_serve_expecting_failure({}, {kUnsetIsaEnv, "PREFIXD_CPU_HIDE_FEATURES=avx512f,sse9"});
  CHECK(e.code == 2);
  check_one_line(e.output, "prefixd: auto: PREFIXD_CPU_HIDE_FEATURES names unknown features 'sse9'");
}

TEST_CASE("--cpu-isa portable: /health and /metrics report portable") {
  Reported r = start_and_read({"--cpu-isa", "portable"}, {kUnsetIsaEnv});
  CHECK(r.health_cpu_isa == "portable");
  CHECK(r.build_info);
}

TEST_CASE("PREFIXD_CPU_ISA=portable without the flag: /health and /metrics report portable") {
  Reported r = start_and_read({}, {"PREFIXD_CPU_ISA=portable"});
  CHECK(r.health_cpu_isa == "portable");
  CHECK(r.build_info);
}

TEST_CASE("--cpu-isa wins over PREFIXD_CPU_ISA") {
  Reported over_bogus = start_and_read({"--cpu-isa", "portable"}, {"PREFIXD_CPU_ISA=bogus"});
  CHECK(over_bogus.health_cpu_isa == "portable");
  CHECK(over_bogus.build_info);
  Reported auto_over_portable = start_and_read({"--cpu-isa", "auto"}, {"PREFIXD_CPU_ISA=portable"});
  CHECK(auto_over_portable.health_cpu_isa == cpu::cpu_isa_name(cpu::best_cpu_isa()));
  CHECK(auto_over_portable.build_info);
}

TEST_CASE("with neither flag nor variable the daemon runs the best set this CPU has") {
  Reported r = start_and_read({}, {kUnsetIsaEnv});
  CHECK(r.health_cpu_isa == cpu::cpu_isa_name(cpu::best_cpu_isa()));
  CHECK(r.build_info);
}

TEST_CASE("prefixd generate: --cpu-isa is logged and reported in --json; a bad value exits 2") {
  REQUIRE_MESSAGE(std::filesystem::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  const std::vector<std::string> args = {
      "generate", "--model", stories_model_path(), "--prompt-ids",   "1,403,407,261,378", "-n",
      "4",        "--json",  "--cache-dir",        test_cache_dir(), "--threads",         "1"};
  std::vector<std::string> portable = args;
  portable.insert(portable.end(), {"--cpu-isa", "portable"});
  ProcessExit e = run_prefixd(portable, {"PREFIXD_CPU_ISA=bogus"});
  CHECK_MESSAGE(e.code == 0, e.output);
  CHECK_MESSAGE(contains(e.output,
                         "prefixd generate: CPU instruction set portable (--cpu-isa "
                         "portable; CPU features: " +
                             cpu::cpu_feature_string() + ")\n"),
                e.output);
  std::istringstream lines(e.output);
  std::string line;
  json j;
  while (std::getline(lines, line)) {
    if (line.rfind("{", 0) == 0) j = json::parse(line, nullptr, false);
  }
  REQUIRE_MESSAGE(j.is_object(), e.output);
  CHECK(j["cpu_isa"] == "portable");
  CHECK(j["ids"].size() == 4);

  ProcessExit bad = run_prefixd(args, {"PREFIXD_CPU_ISA=bogus"});
  CHECK(bad.code == 2);
  check_one_line(bad.output, "prefixd generate: PREFIXD_CPU_ISA: ");
  CHECK_MESSAGE(contains(bad.output, "'bogus'"), bad.output);
}
