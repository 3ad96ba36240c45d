// Security suite, files: what a local user can do to what prefixd keeps on
// disk. Directories prefixd creates are 0700 and files 0600; a cache or disk
// directory another user owns or may write is refused at start; no fallback
// into a shared /tmp; temporary files cannot be redirected by a planted link.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/private_files.h"
#include "daemon/model_source.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/model_fingerprint.h"
#include "tests/daemon_process.h"
#include "tests/temp_dir.h"

using namespace prefixd;
using namespace prefixd::testing;
namespace fs = std::filesystem;

namespace {

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Names in `dir` (not recursive).
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// Runs the process umask at `mask` for the scope, so that a test shows a mode
// does not come from the umask.
struct ScopedUmask {
  explicit ScopedUmask(mode_t mask) : old(::umask(mask)) {}
  ~ScopedUmask() { ::umask(old); }
  mode_t old;
};

// A directory made with exactly `mode` (chmod after mkdir: the umask would narrow it).
std::string make_dir_with_mode(const std::string& path, mode_t mode) {
  REQUIRE(::mkdir(path.c_str(), 0700) == 0);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

// Serve flags with a cache directory of this test's own (`dir`/cache, not
// created: the refusals below come first).
std::vector<std::string> serve_args(const TempDir& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {
      "--port",    "0", "--cache-dir", dir.path + "/cache", "--model", stories_model_path(),
      "--threads", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Runs the daemon expecting it to refuse to start; returns what it printed.
std::string refused_start(const std::vector<std::string>& args,
                          const std::vector<std::string>& env = {}) {
  REQUIRE_MESSAGE(fs::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  ProcessExit e = run_prefixd(args, env, std::chrono::seconds(60));
  INFO("output: " << e.output);
  CHECK(e.code != 0);
  CHECK(e.code != -1);  // it exited by itself: it did not start serving
  CHECK(e.output.find("listening on") == std::string::npos);
  return e.output;
}

// The environment changes that unset every variable the cache directory comes from.
const std::vector<std::string> kNoCacheEnv = {"PREFIXD_CACHE_DIR", "XDG_CACHE_HOME", "HOME",
                                              "XDG_RUNTIME_DIR"};

}  // namespace

// --- start-up refusals -------------------------------------------------------

TEST_CASE("the daemon refuses a world-writable --disk-cache-dir, naming it and the fix") {
  TempDir t;
  const std::string dir = make_dir_with_mode(t.path + "/disk", 0777);
  std::string out = refused_start(serve_args(t, {"--disk-cache-dir", dir}));
  CHECK(out.find("prefixd: --disk-cache-dir: directory '" + dir +
                 "' is writable by group and others (mode 0777)") != std::string::npos);
  CHECK(out.find("chmod 700 '" + dir + "'") != std::string::npos);
  CHECK(names_in(dir).empty());  // nothing was written into it
  CHECK(mode_of(dir) == 0777);   // nor was it changed
}

TEST_CASE("the daemon refuses a group-writable --disk-cache-dir") {
  TempDir t;
  const std::string dir = make_dir_with_mode(t.path + "/disk", 0770);
  std::string out = refused_start(serve_args(t, {"--disk-cache-dir", dir}));
  CHECK(out.find("prefixd: --disk-cache-dir: directory '" + dir +
                 "' is writable by its group (mode 0770)") != std::string::npos);
  CHECK(names_in(dir).empty());
}

TEST_CASE("the daemon refuses a sticky world-writable --disk-cache-dir (a /tmp-like one)") {
  TempDir t;
  const std::string dir = make_dir_with_mode(t.path + "/disk", 01777);
  std::string out = refused_start(serve_args(t, {"--disk-cache-dir", dir}));
  CHECK(out.find("directory '" + dir + "' is writable by group and others (mode 1777)") !=
        std::string::npos);
}

TEST_CASE("the daemon refuses a --disk-cache-dir owned by another user") {
  TempDir t;
  std::string dir;
  std::string owner;
  if (::geteuid() == 0) {
    dir = make_dir_with_mode(t.path + "/disk", 0700);
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    owner = "65534";
  } else {
    // Without root nothing can be given away; / is root's (and not ours).
    struct stat st {};
    REQUIRE(::stat("/", &st) == 0);
    if (st.st_uid == ::geteuid()) {
      MESSAGE("skipped: not root, and / is this user's; no directory of another user to try");
      return;
    }
    dir = "/";
    owner = std::to_string(st.st_uid);
  }
  std::string out = refused_start(serve_args(t, {"--disk-cache-dir", dir}));
  CHECK(out.find("prefixd: --disk-cache-dir: directory '" + dir + "' is owned by uid " + owner +
                 ", not by this user (uid " + std::to_string(::geteuid()) + ")") !=
        std::string::npos);
  CHECK(out.find("chown " + std::to_string(::geteuid()) + " '" + dir + "'") != std::string::npos);
}

TEST_CASE("the daemon refuses a world-writable --cache-dir") {
  TempDir t;
  const std::string dir = make_dir_with_mode(t.path + "/cache", 0777);
  std::vector<std::string> args = {"--port", "0",       "--cache-dir",
                                   dir,      "--model", stories_model_path()};
  std::string out = refused_start(args);
  CHECK(out.find("prefixd: --cache-dir: directory '" + dir +
                 "' is writable by group and others (mode 0777)") != std::string::npos);
  CHECK(names_in(dir).empty());
}

// --- what a run leaves on disk -------------------------------------------------

TEST_CASE(
    "after a daemon run the disk directory is 0700 and no file under it is "
    "readable by others") {
  REQUIRE_MESSAGE(fs::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  TempDir t;
  const std::string dir = t.path + "/tiers/disk";  // missing: the daemon creates both levels
  {
    std::string error;
    auto d = DaemonProcess::start({"--model", stories_model_path(), "--threads", "1", "--kv-dtype",
                                   "f32", "--disk-cache-dir", dir, "--disk-cache-gb", "0.1"},
                                  &error);
    REQUIRE_MESSAGE(d != nullptr, error);
    // 40 tokens: two full 16-token blocks go down to the disk tier (write-through).
    std::string prompt = "[1";
    for (int i = 0; i < 39; ++i) prompt += ", " + std::to_string(300 + i);
    prompt += "]";
    auto r = d->client()->Post(
        "/v1/completions", R"({"prompt": )" + prompt + R"(, "max_tokens": 2})", "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(d->stop() == 0);
  }
  CHECK(mode_of(t.path + "/tiers") == 0700);
  CHECK(mode_of(dir) == 0700);
  size_t n_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    INFO(e.path().string());
    CHECK((mode_of(e.path().string()) & 077) == 0);
    ++n_files;
  }
  CHECK(n_files >= 5);  // RocksDB's CURRENT, IDENTITY, LOCK, LOG, MANIFEST, OPTIONS, tables
}

TEST_CASE("an existing disk directory of this user's that others can read is narrowed to 0700") {
  REQUIRE_MESSAGE(fs::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  TempDir t;
  const std::string dir = make_dir_with_mode(t.path + "/disk", 0755);
  std::string error;
  auto d = DaemonProcess::start({"--model", stories_model_path(), "--threads", "1",
                                 "--disk-cache-dir", dir, "--disk-cache-gb", "0.1"},
                                &error);
  REQUIRE_MESSAGE(d != nullptr, error);
  CHECK(mode_of(dir) == 0700);
  // One answer first: a SIGTERM in the instant between the "listening" line
  // and the listener's start is not seen by the listener (server.cpp).
  auto health = d->client()->Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  CHECK(d->stop() == 0);
}

// --- the helpers, directly ------------------------------------------------------

TEST_CASE("make_private_dir creates every missing level 0700, whatever the umask") {
  TempDir t;
  ScopedUmask loose(0);
  const std::string dir = t.path + "/a/b/c";
  REQUIRE(make_private_dir(dir).ok());
  CHECK(mode_of(t.path + "/a") == 0700);
  CHECK(mode_of(t.path + "/a/b") == 0700);
  CHECK(mode_of(dir) == 0700);
  CHECK(make_private_dir(dir + "/").ok());  // again, with a trailing slash: nothing to do
  CHECK(mode_of(dir) == 0700);
}

TEST_CASE("check_private_dir names the path and the problem") {
  TempDir t;
  const std::string open_dir = make_dir_with_mode(t.path + "/open", 0703);
  Status s = check_private_dir(open_dir);
  CHECK_FALSE(s.ok());
  CHECK(s.message() == "directory '" + open_dir +
                           "' is writable by others (mode 0703), who could plant or replace files "
                           "in it: run `chmod 700 '" +
                           open_dir + "'`, or use another directory");
  CHECK_FALSE(make_private_dir(open_dir).ok());  // refused, not repaired
  CHECK(mode_of(open_dir) == 0703);

  write_text(t.path + "/file", "x");
  s = check_private_dir(t.path + "/file");
  CHECK(s.message() == "'" + t.path + "/file' is not a directory");
  s = check_private_dir(t.path + "/missing");
  CHECK(s.message() == "cannot use directory '" + t.path + "/missing': No such file or directory");
  CHECK(check_private_dir(t.path).ok());  // mkdtemp's 0700
}

TEST_CASE("a planted symlink at the target's name is replaced, not followed") {
  TempDir t;
  const std::string victim = t.path + "/victim";
  write_text(victim, "precious");
  const std::string target = t.path + "/out.bin";
  REQUIRE(::symlink(victim.c_str(), target.c_str()) == 0);
  REQUIRE(write_file_atomically(target, "new bytes", 9).ok());
  CHECK(read_text(victim) == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(target)));
  CHECK(read_text(target) == "new bytes");
  CHECK(mode_of(target) == 0600);
  CHECK(names_in(t.path).size() == 2);  // victim, out.bin: no temporary left
}

TEST_CASE("symlinks planted at the old predictable temporary names are never followed") {
  // Before, the GGUF writer and the fingerprint cache wrote `<file>.tmp.<pid>.<n>`.
  TempDir t;
  const std::string victim = t.path + "/victim";
  write_text(victim, "precious");
  const std::string target = t.path + "/model.gguf";
  for (int n = 0; n < 8; ++n) {
    const std::string name =
        target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(n);
    REQUIRE(::symlink(victim.c_str(), name.c_str()) == 0);
  }
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.add_tensor("t", GgmlType::F32, {4}, std::vector<uint8_t>(16, 7));
  REQUIRE(w.write_file(target).ok());
  CHECK(read_text(victim) == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(target)));
  CHECK(mode_of(target) == 0600);
  auto file = GgufFile::open(target);
  REQUIRE(file.ok());
  CHECK(file.value()->tensors().size() == 1);
  CHECK(names_in(t.path).size() == 10);  // victim, model.gguf and the 8 links, nothing else
}

TEST_CASE("a temporary file is 0600 under any umask and removed when not committed") {
  TempDir t;
  ScopedUmask loose(0);
  const std::string target = t.path + "/f";
  std::string tmp_path;
  {
    Result<PrivateTempFile> tmp = PrivateTempFile::create(target);
    REQUIRE(tmp.ok());
    tmp_path = tmp->path();
    CHECK(tmp_path.rfind(target + ".tmp.", 0) == 0);
    CHECK(mode_of(tmp_path) == 0600);
    REQUIRE(tmp->write("abc", 3).ok());
  }
  CHECK_FALSE(fs::exists(tmp_path));
  CHECK_FALSE(fs::exists(target));
  CHECK(names_in(t.path).empty());
}

TEST_CASE("a failed rename leaves the target as it was and removes the temporary file") {
  TempDir t;
  const std::string target = t.path + "/is_a_dir";
  REQUIRE(::mkdir(target.c_str(), 0700) == 0);
  write_text(target + "/inside", "kept");
  Status s = write_file_atomically(target, "x", 1);
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("cannot rename '" + target + ".tmp.") == 0);
  CHECK(read_text(target + "/inside") == "kept");
  CHECK(names_in(t.path) == std::vector<std::string>{"is_a_dir"});
  // A target in a missing directory: nothing is created anywhere.
  s = write_file_atomically(t.path + "/missing/f", "x", 1);
  CHECK(s.message().find("cannot create a temporary file for '" + t.path + "/missing/f'") == 0);
}

TEST_CASE("the fingerprint cache is private: 0700 directories, 0600 files, whatever the umask") {
  TempDir t;
  ScopedUmask usual(022);
  auto file = GgufFile::open(stories_model_path());
  REQUIRE(file.ok());
  const std::string cache = t.path + "/cache";
  auto fp = model_fingerprint(*file.value(), cache);
  REQUIRE(fp.ok());
  CHECK(mode_of(cache) == 0700);
  CHECK(mode_of(cache + "/fingerprints") == 0700);
  std::vector<std::string> names = names_in(cache + "/fingerprints");
  REQUIRE(names.size() == 1);
  CHECK(mode_of(cache + "/fingerprints/" + names[0]) == 0600);
  // A second call reads the cache and agrees.
  auto again = model_fingerprint(*file.value(), cache);
  REQUIRE(again.ok());
  CHECK(again.value() == fp.value());
}

// --- no shared /tmp fallback -------------------------------------------------------

TEST_CASE("the cache directory comes from the environment, never from a shared /tmp") {
  std::map<std::string, std::string> env;
  auto lookup = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env = {{"PREFIXD_CACHE_DIR", "/p"},
         {"XDG_CACHE_HOME", "/x"},
         {"HOME", "/h"},
         {"XDG_RUNTIME_DIR", "/run/user/1000"}};
  CHECK(find_cache_dir(lookup).value() == "/p");
  env.erase("PREFIXD_CACHE_DIR");
  CHECK(find_cache_dir(lookup).value() == "/x/prefixd");
  env.erase("XDG_CACHE_HOME");
  CHECK(find_cache_dir(lookup).value() == "/h/.cache/prefixd");
  env["HOME"] = "";  // empty counts as unset
  CHECK(find_cache_dir(lookup).value() == "/run/user/1000/prefixd");
  env.clear();
  Result<std::string> none = find_cache_dir(lookup);
  REQUIRE_FALSE(none.ok());
  CHECK(none.message().find("PREFIXD_CACHE_DIR, XDG_CACHE_HOME, HOME and XDG_RUNTIME_DIR are all "
                            "unset") != std::string::npos);
  CHECK(none.message().find("set PREFIXD_CACHE_DIR (or HOME), or pass --cache-dir DIR") !=
        std::string::npos);
}

TEST_CASE("with no cache variable set, `--model demo` is refused and nothing goes to /tmp") {
  const bool had_tmp_cache = fs::exists("/tmp/prefixd-cache");
  std::string out = refused_start({"--port", "0", "--model", "demo"}, kNoCacheEnv);
  CHECK(out.find("prefixd: --model demo: no cache directory: PREFIXD_CACHE_DIR, XDG_CACHE_HOME, "
                 "HOME and XDG_RUNTIME_DIR are all unset") != std::string::npos);
  CHECK(fs::exists("/tmp/prefixd-cache") == had_tmp_cache);
}

TEST_CASE("with no cache variable set, a model that needs no cache still runs") {
  REQUIRE_MESSAGE(fs::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  ProcessExit e = run_prefixd({"generate", "--model", stories_model_path(), "--prompt-ids",
                               "1,403,407", "-n", "2", "--threads", "1"},
                              kNoCacheEnv, std::chrono::seconds(60));
  INFO("output: " << e.output);
  CHECK(e.code == 0);
}

TEST_CASE("with only XDG_RUNTIME_DIR set, generated models go under $XDG_RUNTIME_DIR/prefixd") {
  REQUIRE_MESSAGE(fs::exists(prefixd_binary()),
                  "build the prefixd target first: " << prefixd_binary());
  TempDir t;
  std::vector<std::string> env = {"PREFIXD_CACHE_DIR", "XDG_CACHE_HOME", "HOME",
                                  "XDG_RUNTIME_DIR=" + t.path};
  ProcessExit e = run_prefixd({"generate", "--model", "preset:tiny:f32", "--prompt-ids", "1,2,3",
                               "-n", "1", "--threads", "1"},
                              env, std::chrono::seconds(120));
  INFO("output: " << e.output);
  CHECK(e.code == 0);
  CHECK(mode_of(t.path + "/prefixd") == 0700);
  CHECK(mode_of(t.path + "/prefixd/models") == 0700);
  CHECK(mode_of(t.path + "/prefixd/models/tiny-f32.gguf") == 0600);
  CHECK(names_in(t.path + "/prefixd/models") == std::vector<std::string>{"tiny-f32.gguf"});
}

TEST_CASE("read_private_file refuses a symbolic link by name and follows one only for a public file") {
  TempDir t;
  const std::string secret = t.path + "/secret";
  write_text(secret, "s3cret");
  REQUIRE(::chmod(secret.c_str(), 0600) == 0);
  const std::string link = t.path + "/link";
  REQUIRE(::symlink(secret.c_str(), link.c_str()) == 0);
  Result<std::string> direct = read_private_file(secret, 64, "--tls-key", FileAccess::kOwnerOrGroupShared);
  REQUIRE(direct.ok());
  CHECK(direct.value() == "s3cret");
  Result<std::string> linked = read_private_file(link, 64, "--tls-key", FileAccess::kOwnerOrGroupShared);
  REQUIRE_FALSE(linked.ok());
  CHECK(linked.message() == "--tls-key " + link +
                                " is a symbolic link, which is refused for a private file: name the file it points to");
  Result<std::string> cert = read_private_file(link, 64, "--tls-cert", FileAccess::kPublic);
  REQUIRE(cert.ok());
  CHECK(cert.value() == "s3cret");
}
