// Tokenizer throughput on one core: ~1 MB of English prose (the licence texts
// in /usr/share/common-licenses, repeated to 1 MiB, or a file given with
// --text) with the Llama 3 BPE vocabulary and the Llama 2 SPM vocabulary (the
// JSON dumps written by tests/scripts/test_tokenizer_oracles.sh) and
// stories260K. Prints MB/s and tokens/s per tokenizer.
// Usage: bench_tokenizer [--oracle-dir DIR] [--text FILE] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/gguf.h"
#include "engine/text/tokenizer.h"
#include "tests/shared_dir.h"

using namespace prefixd;
using json = nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string default_prose(size_t target_bytes) {
  std::string corpus;
  std::vector<std::string> files;
  const std::filesystem::path dir = "/usr/share/common-licenses";
  if (std::filesystem::is_directory(dir)) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_regular_file()) files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) corpus += read_file(f);
  if (corpus.empty()) return {};
  std::string out;
  while (out.size() < target_bytes) out += corpus;
  out.resize(target_bytes);
  // Do not end inside a UTF-8 sequence.
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xC0) out.pop_back();
  return out;
}

void bench(const char* name, const Tokenizer& tok, const std::string& text, int reps) {
  size_t n_tokens = 0;
  double best_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(text, true, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best_s = std::min(best_s, s);
    n_tokens = ids.size();
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("%-22s %8.3f MB  %9zu tokens  %8.1f ms  %7.2f MB/s  %8.2f Mtok/s\n", name, mb,
              n_tokens, best_s * 1e3, mb / best_s, n_tokens / best_s / 1e6);
}

Result<std::unique_ptr<Tokenizer>> from_dump(const std::string& path, bool bpe) {
  std::ifstream in(path);
  if (!in.good()) return Status::error("cannot open " + path);
  const json j = json::parse(in);
  TokenizerVocab v;
  v.tokens = j["tokens"].get<std::vector<std::string>>();
  v.token_types = j["token_types"].get<std::vector<int32_t>>();
  if (bpe) {
    v.model = "gpt2";
    v.pre = "llama-bpe";
    v.merges = j["merges"].get<std::vector<std::string>>();
    v.bos_id = j["bos"];
    v.eos_id = j["eos"];
    v.add_bos = true;
  } else {
    v.model = "llama";
    v.scores = j["scores"].get<std::vector<float>>();
    v.bos_id = 1;
    v.eos_id = 2;
    v.unk_id = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  }
  return Tokenizer::create(std::move(v));
}

}  // namespace

int main(int argc, char** argv) {
  std::string oracle_dir = std::string(PREFIXD_BUILD_DIR) + "/tokenizer_oracles";
  std::string text_path;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--oracle-dir")) oracle_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--text")) text_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  const std::string text = text_path.empty() ? default_prose(1 << 20) : read_file(text_path);
  if (text.empty()) {
    std::fprintf(stderr, "no text to tokenize (give --text FILE)\n");
    return 1;
  }
  std::printf("text: %zu bytes, best of %d runs, one thread\n", text.size(), reps);

  auto llama3 = from_dump(oracle_dir + "/llama3.json", true);
  if (llama3.ok()) {
    bench("llama3 BPE (128k)", **llama3, text, reps);
  } else {
    std::printf("llama3 BPE: skipped (%s; run tests/scripts/test_tokenizer_oracles.sh)\n",
                llama3.message().c_str());
  }
  auto llama2 = from_dump(oracle_dir + "/llama2.json", false);
  if (llama2.ok()) {
    bench("llama2 SPM (32k)", **llama2, text, reps);
  } else {
    std::printf("llama2 SPM: skipped (%s)\n", llama2.message().c_str());
  }
  auto gguf = GgufFile::open(prefixd::testing::shared_dir() + "/models/stories260K.gguf");
  if (gguf.ok()) {
    auto stories = Tokenizer::from_gguf(**gguf);
    if (stories.ok()) bench("stories260K SPM (512)", **stories, text, reps);
  }
  return 0;
}
