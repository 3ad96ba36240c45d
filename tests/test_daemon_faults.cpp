// Faults the real daemon must survive (issue 13): SIGTERM with 64 streams
// open, a damaged RocksDB directory, unreadable records, and the model file
// truncated or replaced while it runs. Each test starts prefixd on a free
// loopback port with its own temporary directories.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <rocksdb/db.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "tests/daemon_process.h"
#include "tests/daemon_start.h"
#include "tests/golden.h"
#include "tests/temp_dir.h"

using nlohmann::json;
using namespace prefixd::testing;
using SteadyClock = std::chrono::steady_clock;

namespace {

json completion(const std::vector<int32_t>& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

int64_t disk_blocks(httplib::Client& c) {
  return stats(c)["tiers"]["disk"]["blocks"].get<int64_t>();
}

double seconds_since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

}  // namespace

namespace {

constexpr int kSigtermStreams = 64;
constexpr int kPromptTokens = 180;
constexpr int kBlockTokens = 16;                                // stories260K's block size
constexpr int kFullBlockTokens = kPromptTokens / kBlockTokens * kBlockTokens;  // 176

// Processes that spin on a CPU until destroyed: load on the machine. They
// are children of this test, so of its session (Linux's autogroup scheduling
// shares the CPU per session: loops started elsewhere barely compete).
class BusyLoops {
 public:
  explicit BusyLoops(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        for (;;) asm volatile("" ::: "memory");
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  size_t size() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last number before `label` in the daemon's final log line
// ("prefixd: stopped ...; W records written ..., D dropped at the ... bound,
// P dropped while serving ..."); -1 when the line is missing.
int64_t stopped_line_count(const std::string& log, const std::string& label) {
  const size_t line_at = log.rfind("prefixd: stopped");
  if (line_at == std::string::npos) return -1;
  const std::string line = log.substr(line_at, log.find('\n', line_at) - line_at);
  const size_t at = line.find(label);
  if (at == std::string::npos) return -1;
  size_t begin = line.rfind(' ', at - 2);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return std::stoll(line.substr(begin, at - begin));
}

struct SigtermOutcome {
  int exit_code = -1;
  double exit_after_s = 0;     // from SIGTERM to the exit
  int64_t blocks_before = 0;   // disk blocks counted just before SIGTERM
  int64_t dropped = 0;         // records dropped (flush bound + queue full), from the last log line
  std::string log;             // the daemon's stderr
};

// 64 streams of 300 tokens each (EOS ignored), far more than the grace lets
// them finish; SIGTERM once every stream has produced an event (so every
// prompt's prefill is done and its blocks are published). Checks that every
// stream ends properly.
SigtermOutcome sigterm_with_open_streams(const std::vector<std::string>& args,
                                         const std::string& log_path) {
  auto d = start_or_fail(args, log_path);
  std::vector<SseAnswer> answers(kSigtermStreams);
  std::vector<double> ended_at_s(kSigtermStreams, -1);
  std::atomic<int> n_started{0};
  const SteadyClock::time_point t0 = SteadyClock::now();
  std::vector<std::thread> clients;
  for (int i = 0; i < kSigtermStreams; ++i) {
    clients.emplace_back([&, i] {
      auto c = d->client();
      json body = completion(prompt_for(i, kPromptTokens), 300);
      body["stream"] = true;
      body["ignore_eos"] = true;
      bool counted = false;
      answers[static_cast<size_t>(i)] = post_sse(*c, "/v1/completions", body, [&](size_t) {
        if (!counted) n_started.fetch_add(1);
        counted = true;
        return true;
      });
      ended_at_s[static_cast<size_t>(i)] = seconds_since(t0);
    });
  }
  const auto deadline = SteadyClock::now() + std::chrono::seconds(120);
  while (n_started.load() < kSigtermStreams && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(n_started.load() == kSigtermStreams);
  SigtermOutcome out;
  {
    // Write-through is asynchronous and its writer runs on idle CPU time
    // only: give it a short, bounded chance to have written something (on a
    // busy machine it may not; the shutdown drain writes the rest). Short, so
    // that the streams are still open at SIGTERM.
    auto c = d->client();
    (void)wait_disk_blocks(*c, 1, std::chrono::seconds(1));
    out.blocks_before = disk_blocks(*c);
  }
  const double t_sigterm = seconds_since(t0);
  out.exit_code = d->stop(std::chrono::seconds(90));
  const double t_exit = seconds_since(t0);
  out.exit_after_s = t_exit - t_sigterm;
  for (auto& t : clients) t.join();
  int n_done = 0, n_cancelled = 0;
  for (int i = 0; i < kSigtermStreams; ++i) {
    CAPTURE(i);
    const SseAnswer& a = answers[static_cast<size_t>(i)];
    CHECK(a.status == 200);
    REQUIRE(!a.data.empty());
    // Every stream ends with [DONE], right after a finish chunk or an error event.
    CHECK(a.data.back() == "[DONE]");
    REQUIRE(a.json.size() >= 1);
    const json& last = a.json.back();
    if (last.contains("error")) {
      CHECK(last["error"]["message"].get<std::string>().find("shutting down") != std::string::npos);
      ++n_cancelled;
    } else {
      CHECK(last["choices"][0]["finish_reason"] == "length");
      ++n_done;
    }
    CHECK(ended_at_s[static_cast<size_t>(i)] <= t_exit + 1);
  }
  CHECK(n_done + n_cancelled == kSigtermStreams);
  out.log = read_file(log_path);
  const int64_t dropped_at_bound = stopped_line_count(out.log, "dropped at the");
  const int64_t dropped_serving = stopped_line_count(out.log, "dropped while serving");
  out.dropped = dropped_at_bound + dropped_serving;
  MESSAGE(n_done << " streams finished, " << n_cancelled << " cancelled at shutdown; "
                 << out.blocks_before << " disk blocks before SIGTERM; " << out.dropped
                 << " records dropped; exit " << out.exit_after_s << " s after it");
  INFO("daemon log:\n" << out.log);
  REQUIRE(dropped_at_bound >= 0);
  REQUIRE(dropped_serving >= 0);
  return out;
}

// Restarts on `args`' directory: at least the blocks counted before SIGTERM
// are there, and every prompt's full blocks are a disk hit, except that each
// dropped record may cost one prompt its hit.
void check_prompts_are_disk_hits(const std::vector<std::string>& args, const SigtermOutcome& o) {
  auto d = start_or_fail(args);
  auto c = d->client();
  CHECK(disk_blocks(*c) >= o.blocks_before);
  int n_full_hits = 0;
  for (int i = 0; i < kSigtermStreams; ++i) {
    HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i, kPromptTokens), 2));
    REQUIRE(a.status == 200);
    const int64_t disk_tokens = a.body["prefix_cache"]["disk_tokens"].get<int64_t>();
    CHECK(a.body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>() == disk_tokens);
    if (disk_tokens == kFullBlockTokens) ++n_full_hits;
  }
  CAPTURE(o.dropped);
  CHECK(n_full_hits >= kSigtermStreams - o.dropped);
  if (o.dropped == 0) CHECK(n_full_hits == kSigtermStreams);
  std::string m = c->Get("/metrics")->body;
  CHECK(metric(m, "prefixd_corrupt_records_total{tier=\"disk\"}") == 0);
  CHECK(d->stop() == 0);
}

}  // namespace

TEST_CASE("SIGTERM with 64 streams open: every stream ends properly, exit 0, disk blocks kept") {
  TempDir dir, logs;
  std::vector<std::string> args = forced_onboard_args(stories_model_path(), dir.path);
  constexpr double kGraceS = 2;
  args.insert(args.end(), {"--shutdown-grace-s", "2"});
  const SigtermOutcome o = sigterm_with_open_streams(args, logs.path + "/prefixd.log");
  CHECK(o.exit_code == 0);
  // The grace period, then at most a few seconds of cancelling, draining and closing.
  CHECK(o.exit_after_s < kGraceS + 8);
  check_prompts_are_disk_hits(forced_onboard_args(stories_model_path(), dir.path), o);
}

TEST_CASE("SIGTERM beside two busy loops: the stop stays within grace + flush bound, prefixes kept") {
  TempDir dir, logs;
  std::vector<std::string> args = forced_onboard_args(stories_model_path(), dir.path);
  constexpr double kGraceS = 2, kFlushS = 3;
  args.insert(args.end(), {"--shutdown-grace-s", "2", "--shutdown-flush-s", "3"});
  SigtermOutcome o;
  {
    BusyLoops load(2);
    REQUIRE(load.size() == 2);
    o = sigterm_with_open_streams(args, logs.path + "/prefixd.log");
  }
  CHECK(o.exit_code == 0);
  CHECK(o.exit_after_s < kGraceS + kFlushS + 2);
  check_prompts_are_disk_hits(forced_onboard_args(stories_model_path(), dir.path), o);
}

namespace {

// Runs a daemon on `dir` that answers `n_prompts` prompts (their blocks go to
// disk), stops it, and returns its answers.
std::vector<json> fill_disk_cache(const std::string& dir, int n_prompts) {
  std::vector<json> answers;
  auto d = start_or_fail(forced_onboard_args(stories_model_path(), dir));
  auto c = d->client();
  for (int i = 0; i < n_prompts; ++i) {
    HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i), 8));
    REQUIRE(a.status == 200);
    answers.push_back(a.body["choices"][0]["token_ids"]);
  }
  REQUIRE(wait_disk_blocks(*c, n_prompts * (180 / 16)));
  REQUIRE(d->stop() == 0);
  return answers;
}

std::vector<std::filesystem::path> files_named(const std::string& dir, const std::string& prefix,
                                               const std::string& suffix) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(e.path());
  }
  return out;
}

void truncate_to_half(const std::filesystem::path& p) {
  std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
}

// Directories beside `dir` named DIR.corrupt-*.
std::vector<std::filesystem::path> moved_aside(const std::string& dir) {
  const std::filesystem::path d(dir);
  return files_named(d.parent_path().string(), d.filename().string() + ".corrupt-", "");
}

}  // namespace

TEST_CASE("a damaged disk cache directory is refused, or moved aside with --disk-cache-reset-on-corruption") {
  struct Damage {
    const char* what;
    void (*apply)(const std::string& dir);
  };
  const Damage damages[] = {
      {"every table file truncated to half",
       [](const std::string& dir) {
         auto ssts = files_named(dir, "", ".sst");
         REQUIRE(!ssts.empty());
         for (const auto& p : ssts) truncate_to_half(p);
       }},
      {"MANIFEST deleted",
       [](const std::string& dir) {
         for (const auto& p : files_named(dir, "MANIFEST-", "")) std::filesystem::remove(p);
       }},
      {"CURRENT deleted", [](const std::string& dir) { std::filesystem::remove(dir + "/CURRENT"); }},
      {"CURRENT truncated to 0 bytes",
       [](const std::string& dir) { std::filesystem::resize_file(dir + "/CURRENT", 0); }},
  };
  for (const Damage& damage : damages) {
    const std::string what = damage.what;
    CAPTURE(what);
    TempDir parent;
    const std::string dir = parent.path + "/disk";
    const std::vector<json> first = fill_disk_cache(dir, 2);
    damage.apply(dir);

    // Refused, with a message naming the directory and what to do.
    std::vector<std::string> args = forced_onboard_args(stories_model_path(), dir);
    args.insert(args.end(), {"--port", "0", "--cache-dir", test_cache_dir()});
    ProcessExit refused = run_prefixd(args, {}, std::chrono::seconds(60));
    CAPTURE(refused.output);
    CHECK(refused.code == 1);
    CHECK(refused.output.find("the database in '" + dir + "' is damaged") != std::string::npos);
    CHECK(refused.output.find("--disk-cache-reset-on-corruption") != std::string::npos);
    CHECK(moved_aside(dir).empty());

    // With the flag: moved aside (0700), an empty tier, the same answers.
    std::vector<std::string> reset = forced_onboard_args(stories_model_path(), dir);
    reset.push_back("--disk-cache-reset-on-corruption");
    auto d = start_or_fail(reset);
    const auto aside = moved_aside(dir);
    REQUIRE(aside.size() == 1);
    struct stat st {};
    REQUIRE(::stat(aside[0].c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    auto c = d->client();
    CHECK(disk_blocks(*c) == 0);
    for (int i = 0; i < 2; ++i) {
      HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i), 8));
      REQUIRE(a.status == 200);
      CHECK(a.body["prefix_cache"]["cached_tokens"] == 0);
      CHECK(a.body["choices"][0]["token_ids"] == first[static_cast<size_t>(i)]);
    }
    CHECK(d->stop() == 0);
  }
}

// RocksDB reads a MANIFEST cut short as one whose writer crashed: it opens the
// last state that was whole (older; files newer than it are deleted). The
// daemon starts on it, and whatever it serves from it passes every check.
TEST_CASE("a truncated MANIFEST opens at an older state and never gives a wrong answer") {
  TempDir parent;
  const std::string dir = parent.path + "/disk";
  const std::vector<json> first = fill_disk_cache(dir, 3);
  auto m = files_named(dir, "MANIFEST-", "");
  REQUIRE(!m.empty());
  for (const auto& p : m) truncate_to_half(p);
  auto d = start_or_fail(forced_onboard_args(stories_model_path(), dir));
  auto c = d->client();
  int64_t onboarded_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i), 8));
    REQUIRE(a.status == 200);
    // What the older state onboards is whole blocks of the prompt's cached
    // prefix (11 full blocks of 16 in 180 tokens), never more.
    const int64_t disk_tokens = a.body["prefix_cache"]["disk_tokens"].get<int64_t>();
    CHECK(disk_tokens % 16 == 0);
    CHECK(disk_tokens <= (180 / 16) * 16);
    onboarded_tokens += disk_tokens;
    CHECK(a.body["choices"][0]["token_ids"] == first[static_cast<size_t>(i)]);
  }
  MESSAGE(onboarded_tokens << " prompt tokens onboarded from the older state");
  // Opened, not refused or stopped: at the older state the disk tier takes
  // the three prompts' blocks again and reports no error.
  REQUIRE(wait_disk_blocks(*c, 3 * (180 / 16)));
  const json disk = stats(*c)["tiers"]["disk"];
  CHECK(disk["writes_stopped"] == false);
  CHECK(disk["io_errors"] == 0);
  CHECK(disk["write_errors"] == 0);
  CHECK(d->stop() == 0);
}

TEST_CASE("a table block that fails its checksum on read is a counted miss, never a crash") {
  TempDir dir;
  const int n_prompts = 3;
  const std::vector<json> first = fill_disk_cache(dir.path, n_prompts);
  // The records family's table files hold the blob references of every
  // record; their first data block starts at offset 0. Flip bytes in it.
  std::vector<std::string> record_tables;
  {
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"access", {}}, {"meta", {}}, {"pins", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s =
        rocksdb::DB::OpenForReadOnly(rocksdb::DBOptions(), dir.path, families, &handles, &db);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    std::vector<rocksdb::LiveFileMetaData> files;
    db->GetLiveFilesMetaData(&files);
    for (const auto& f : files) {
      if (f.column_family_name == rocksdb::kDefaultColumnFamilyName)
        record_tables.push_back(dir.path + f.name);
    }
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  REQUIRE(!record_tables.empty());
  for (const std::string& path : record_tables) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    char bytes[32];
    f.seekg(16);
    f.read(bytes, sizeof(bytes));
    for (char& b : bytes) b = static_cast<char>(b ^ 0x5a);
    f.seekp(16);
    f.write(bytes, sizeof(bytes));
    REQUIRE(f.good());
  }
  auto d = start_or_fail(forced_onboard_args(stories_model_path(), dir.path));
  auto c = d->client();
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < n_prompts; ++i) {
      CAPTURE(round);
      CAPTURE(i);
      HttpAnswer a = post_json(*c, "/v1/completions", completion(prompt_for(i), 8));
      REQUIRE(a.status == 200);
      CHECK(a.body["prefix_cache"]["disk_tokens"] == 0);
      CHECK(a.body["choices"][0]["token_ids"] == first[static_cast<size_t>(i)]);
    }
  }
  const std::string m = c->Get("/metrics")->body;
  CHECK(metric(m, "prefixd_corrupt_records_total{tier=\"disk\"}") >= 1);
  CHECK(metric(m, "prefixd_disk_io_errors_total") >= 1);
  CHECK(d->stop() == 0);
}

TEST_CASE("the model file truncated, then replaced, while the daemon runs: same answers, no crash") {
  TempDir dir;
  const std::string model = dir.path + "/model.gguf";
  std::filesystem::copy_file(stories_model_path(), model);
  auto d = start_or_fail({"--model", model, "--threads", "1", "--kv-dtype", "f32",
                          "--host-cache-gb", "0"});
  auto c = d->client();
  // Short prompts and long continuations: every answer runs the whole model.
  auto ask = [&](int i) {
    HttpAnswer a = post_json(*c, "/v1/completions",
                             json{{"prompt", prompt_for(50 + i, 20)},
                                  {"max_tokens", 48},
                                  {"temperature", 0},
                                  {"ignore_eos", true}});
    REQUIRE(a.status == 200);
    return a.body["choices"][0]["token_ids"];
  };
  std::vector<json> before;
  for (int i = 0; i < 4; ++i) before.push_back(ask(i));
  // Once serving, the daemon has no mapping of the file left (the weights
  // were copied out at load), so nothing it does can touch the file.
  {
    std::ifstream maps("/proc/" + std::to_string(d->pid()) + "/maps");
    REQUIRE(maps.good());
    std::string line;
    while (std::getline(maps, line)) CHECK_MESSAGE(line.find(model) == std::string::npos, line);
  }

  truncate_to_half(model);
  for (int i = 0; i < 4; ++i) CHECK(ask(i) == before[static_cast<size_t>(i)]);

  // Replaced by rename with another model of other weights.
  const std::string other = dir.path + "/other.gguf";
  std::filesystem::copy_file(shared_path("models/rand-mqa-f16.gguf"), other);
  std::filesystem::rename(other, model);
  for (int i = 0; i < 4; ++i) CHECK(ask(i) == before[static_cast<size_t>(i)]);

  // And truncated to nothing.
  std::filesystem::resize_file(model, 0);
  for (int i = 0; i < 4; ++i) CHECK(ask(i) == before[static_cast<size_t>(i)]);
  CHECK(get(*c, "/health").status == 200);
  CHECK(d->stop() == 0);
}
