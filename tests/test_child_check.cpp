// Checks in a child process (kernels/cuda/child_check.h), on the CPU with
// shell children: the exit status is the verdict, a signal or a timeout is a
// failed check that the parent survives, poll() never blocks, the queue runs
// one child at a time and keeps verdicts; and the request the CUDA backend
// sends prefixd-cudnn-probe (kernels/cuda/cudnn/probe_request.h) round-trips
// through its command line. Where the probe program is built, it runs too: on
// a machine without a usable GPU or cuDNN it says so and exits "not run".
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/child_check.h"
#include "kernels/cuda/cudnn/probe_request.h"

using namespace prefixd;
using namespace prefixd::cuda;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

ChildVerdict run_child(const std::string& script, std::chrono::milliseconds timeout = 60s) {
  Result<std::unique_ptr<ChildCheck>> c = ChildCheck::start(sh(script), timeout);
  REQUIRE(c.ok());
  return c.value()->wait();
}

ProbeRequest request() {
  ProbeRequest r;
  r.device = 1;
  r.cudnn_library = "/opt/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9";
  r.shape.dtype = DType::BF16;
  r.shape.out_dtype = DType::BF16;
  r.shape.n_heads = 32;
  r.shape.n_kv_heads = 8;
  r.shape.head_dim = 64;
  r.shape.block_size = 16;
  r.shape.n_pool_blocks = 4096;
  r.shape.max_q = 128;
  r.shape.max_kv = 1024;
  r.scale = 1.0f / std::sqrt(80.0f);  // not a short decimal: the hex float must carry every bit
  r.window_tokens = 0;
  return r;
}

}  // namespace

TEST_CASE("the exit status is the verdict and the last line its detail") {
  ChildVerdict v = run_child("echo building; echo 'max |error| 0.001'; exit 0");
  CHECK(v.kind == ChildVerdict::Kind::kPassed);
  CHECK(v.detail == "max |error| 0.001");
  v = run_child("echo 'self-check FAILED' >&2; exit 1");
  CHECK(v.kind == ChildVerdict::Kind::kFailed);
  CHECK(v.detail == "self-check FAILED");
  v = run_child("echo 'refused by cuDNN'; exit 2");
  CHECK(v.kind == ChildVerdict::Kind::kNotRun);
  CHECK(v.detail == "refused by cuDNN");
  v = run_child("echo odd; exit 7");
  CHECK(v.kind == ChildVerdict::Kind::kFailed);
  CHECK(v.detail == "exit status 7: odd");
  v = run_child("exit 0");
  CHECK(v.passed());
  CHECK(v.detail == "exit status 0");
}

TEST_CASE("a child that crashes is a failed check naming the signal, and the parent goes on") {
  ChildVerdict v = run_child("echo 'running the plan'; kill -SEGV $$");
  CHECK(v.failed());
  CHECK(v.detail.find("crashed: signal 11") == 0);
  CHECK(v.detail.find("last line: running the plan") != std::string::npos);
  v = run_child("kill -ABRT $$");
  CHECK(v.failed());
  CHECK(v.detail.find("signal 6") != std::string::npos);
}

TEST_CASE("a child past its time limit is killed and fails") {
  const ChildVerdict v = run_child("echo started; exec sleep 30", 300ms);
  CHECK(v.failed());
  CHECK(v.detail.find("timed out after 300 ms") == 0);
  CHECK(v.detail.find("last line: started") != std::string::npos);
}

TEST_CASE("poll() answers at once while the child runs, then the verdict") {
  Result<std::unique_ptr<ChildCheck>> c = ChildCheck::start(sh("sleep 5; echo done"), 60s);
  REQUIRE(c.ok());
  CHECK_FALSE(c.value()->poll().has_value());
  const ChildVerdict v = c.value()->wait();
  CHECK(v.passed());
  CHECK(v.detail == "done");
  REQUIRE(c.value()->poll().has_value());
  CHECK(c.value()->poll()->detail == "done");
  CHECK(c.value()->output() == "done\n");
}

TEST_CASE("the child holds none of the parent's descriptors but its output") {
  const int fd = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC: a child would inherit it
  REQUIRE(fd > 2);
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ChildVerdict v = run_child("if [ -e " + path + " ]; then echo open; else echo closed; fi");
  ::close(fd);
  CHECK(v.detail == "closed");
}

TEST_CASE("a program that cannot start is an error, and a failed verdict in the queue") {
  Result<std::unique_ptr<ChildCheck>> c = ChildCheck::start({"/nonexistent/prefixd-cudnn-probe"}, 1s);
  REQUIRE_FALSE(c.ok());
  CHECK(c.message().find("cannot start /nonexistent/prefixd-cudnn-probe") != std::string::npos);
  ChildCheckQueue q(1s);
  const auto v = q.verdict("k", [] { return std::vector<std::string>{"/nonexistent/x"}; }, false);
  REQUIRE(v.has_value());
  CHECK(v->failed());
}

TEST_CASE("the queue runs one child at a time and keeps every verdict") {
  ChildCheckQueue q(60s);
  int started_a = 0, started_b = 0;
  auto a = [&] {
    ++started_a;
    return sh("sleep 5; echo A; exit 0");  // still running at the next two calls, even on a loaded machine
  };
  auto b = [&] {
    ++started_b;
    return sh("echo B; exit 2");
  };
  CHECK_FALSE(q.verdict("a", a, false).has_value());  // started, running
  CHECK(q.running());
  CHECK_FALSE(q.verdict("b", b, false).has_value());  // waits for a's child
  CHECK(started_b == 0);
  const auto vb = q.verdict("b", b, true);  // finishes a, then runs b
  REQUIRE(vb.has_value());
  CHECK(vb->kind == ChildVerdict::Kind::kNotRun);
  CHECK(vb->detail == "B");
  const auto va = q.verdict("a", a, false);
  REQUIRE(va.has_value());
  CHECK(va->passed());
  CHECK(va->detail == "A");
  CHECK(started_a == 1);
  CHECK(started_b == 1);
  CHECK_FALSE(q.running());
  // A pending child is found by poll() without blocking, within a bound.
  CHECK_FALSE(q.verdict("c", [] { return sh("exit 0"); }, false).has_value());
  for (int i = 0; i < 3000 && !q.poll(); ++i) std::this_thread::sleep_for(10ms);
  const auto vc = q.verdict("c", [] { return sh("exit 1"); }, false);
  REQUIRE(vc.has_value());
  CHECK(vc->passed());
}

TEST_CASE("a probe request round-trips through the child's command line") {
  const ProbeRequest r = request();
  const std::vector<std::string> argv = probe_argv("/usr/bin/prefixd-cudnn-probe", r);
  CHECK(argv.front() == "/usr/bin/prefixd-cudnn-probe");
  Result<ProbeRequest> back = parse_probe_argv(argv);
  REQUIRE(back.ok());
  CHECK(back.value().device == 1);
  CHECK(back.value().cudnn_library == r.cudnn_library);
  CHECK(back.value().shape == r.shape);
  CHECK(back.value().scale == r.scale);
  CHECK(back.value().window_tokens == 0);
  CHECK(back.value().key() == r.key());
  CHECK(r.key().find("bf16 32/8 heads d64 block 16 q<=128 kv<=1024 pool 4096") == 0);

  ProbeRequest w = r;
  w.shape.dtype = w.shape.out_dtype = DType::F16;
  w.shape.windowed = true;
  w.window_tokens = 512;
  back = parse_probe_argv(probe_argv("p", w));
  REQUIRE(back.ok());
  CHECK(back.value().shape == w.shape);
  CHECK(back.value().key() != r.key());
}

TEST_CASE("a malformed probe command line is refused with the option named") {
  const std::vector<std::string> good = probe_argv("p", request());
  auto with = [&](const std::string& name, const std::string& value) {
    std::vector<std::string> a = good;
    for (size_t i = 1; i + 1 < a.size(); i += 2)
      if (a[i] == name) a[i + 1] = value;
    return parse_probe_argv(a);
  };
  CHECK(with("--dtype", "f32").message().find("--dtype 'f32' is not bf16 or f16") != std::string::npos);
  CHECK(with("--heads", "0").message().find("--heads '0' is not an integer") != std::string::npos);
  CHECK(with("--max-kv", "12x").message().find("--max-kv '12x'") != std::string::npos);
  CHECK(with("--scale", "-1").message().find("--scale '-1' is not a positive number") != std::string::npos);
  CHECK(with("--cudnn-lib", "").message().find("--cudnn-lib is empty") != std::string::npos);
  std::vector<std::string> short_argv(good.begin(), good.end() - 2);
  CHECK(parse_probe_argv(short_argv).message().find("expected 12 options, got 11") != std::string::npos);
  std::vector<std::string> twice = good;
  twice[3] = "--device";
  CHECK(parse_probe_argv(twice).message().find("--device given twice") != std::string::npos);
}

#if defined(PREFIXD_TEST_CUDNN_PROBE)
TEST_CASE("prefixd-cudnn-probe says when it cannot run the check, and exits 'not run'") {
  ProbeRequest r = request();
  r.device = 0;
  r.cudnn_library = "/nonexistent/libcudnn.so.9";
  Result<std::unique_ptr<ChildCheck>> c = ChildCheck::start(probe_argv(PREFIXD_TEST_CUDNN_PROBE, r), 120s);
  REQUIRE(c.ok());
  const ChildVerdict v = c.value()->wait();
  INFO(c.value()->output());
  CHECK(v.kind == ChildVerdict::Kind::kNotRun);
  // Without a usable device: the CUDA runtime's reason; on a GPU host: cuDNN not loaded from that path.
  const bool named = v.detail.find("not run: CUDA device 0:") == 0 || v.detail.find("not run: cuDNN not loaded") == 0;
  CHECK(named);
  std::vector<std::string> bad = probe_argv(PREFIXD_TEST_CUDNN_PROBE, r);
  bad.resize(bad.size() - 2);
  c = ChildCheck::start(bad, 120s);
  REQUIRE(c.ok());
  const ChildVerdict usage = c.value()->wait();
  CHECK(usage.kind == ChildVerdict::Kind::kNotRun);
  CHECK(usage.detail == "not run: probe: expected 12 options, got 11");
}
#endif
