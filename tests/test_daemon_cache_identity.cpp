// The cache identity (daemon/cache_identity.h): blocks are stored under the
// model fingerprint mixed with the CPU plan that computed them. Unit checks of
// the identity, then the real daemon on one disk tier: a prompt computed under
// the `portable` plan is not found by a daemon running `avx2` (it would not
// give the uncached answer bit for bit there), and is found again, with the
// same answer, when the daemon runs `portable` once more.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "daemon/cache_identity.h"
#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/greedy_answers.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using namespace prefixd::testing;

TEST_CASE("the cache identity changes with the model and with the backend's numerics") {
  const Hash128 model{0x1234, 0x5678};
  const Hash128 other_model{0x1235, 0x5678};
  CHECK(backend_numerics("cpu", "avx2") == "cpu:avx2");
  CHECK(backend_numerics("cuda", "") == "cuda");
  const Hash128 a = cache_fingerprint(model, backend_numerics("cpu", "avx2"));
  CHECK(a == cache_fingerprint(model, "cpu:avx2"));
  CHECK_FALSE(a == model);
  CHECK_FALSE(a == cache_fingerprint(model, "cpu:portable"));
  CHECK_FALSE(a == cache_fingerprint(model, "cpu:avx2,attention=portable"));
  CHECK_FALSE(a == cache_fingerprint(other_model, "cpu:avx2"));
  CHECK_FALSE(cache_fingerprint(model, "cuda") == cache_fingerprint(model, "cpu:avx2"));
}

namespace {

// A daemon on `disk_dir` running `plan`; its answer to `prompt` once the
// disk tier holds at least `min_disk_blocks` blocks.
Answer ask_under_plan(const std::string& plan, const std::string& disk_dir, const std::vector<int32_t>& prompt,
                      int64_t min_disk_blocks) {
  std::vector<std::string> args = forced_onboard_args(stories_model_path(), disk_dir);
  args.insert(args.end(), {"--cpu-isa", plan});
  auto d = start_or_fail(args);
  auto c = d->client();
  Answer a = ask(*c, prompt);
  CHECK(wait_disk_blocks(*c, min_disk_blocks));
  d->stop();
  return a;
}

}  // namespace

TEST_CASE("blocks computed under one CPU plan are not served under another") {
  if (!__builtin_cpu_supports("avx2")) {
    MESSAGE("this CPU has no AVX2: one plan only, nothing to tell apart");
    return;
  }
  TempDir tmp;
  const std::string disk = tmp.path + "/disk";
  const std::vector<int32_t> prompt = tokens(7, 180, true);  // 11 full blocks of 16
  const int64_t full_blocks = 180 / 16;

  const Answer cold = ask_under_plan("portable", disk, prompt, full_blocks);
  CHECK(cold.prefix_cache["cached_tokens"] == 0);

  // Another plan on the same disk tier: the portable blocks are not its own.
  const Answer other = ask_under_plan("avx2", disk, prompt, 2 * full_blocks);
  CHECK(other.prefix_cache["cached_tokens"] == 0);
  CHECK(other.prefix_cache["disk_tokens"] == 0);

  // The first plan again: its blocks come back from disk, same answer.
  const Answer warm = ask_under_plan("portable", disk, prompt, 2 * full_blocks);
  CHECK(warm.prefix_cache["disk_tokens"] == full_blocks * 16);
  CHECK(warm.ids == cold.ids);
  CHECK(warm.logprobs == cold.logprobs);
}
