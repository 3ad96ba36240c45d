// `prefixd generate`: one prompt in, its continuation out, with prefill and
// decode speed; no server. Useful to try a model and for scripts (--json).
#pragma once

#include <string>
#include <vector>

#include "daemon/cpu_isa_option.h"
#include "daemon/model_source.h"

namespace prefixd {

struct GenerateOptions {
  std::string model = kDefaultModel;  // as resolve_model_path takes it
  std::string cache_dir;
  std::string prompt;                // text (needs the model's tokenizer)
  std::vector<int32_t> prompt_ids;   // or token ids
  int32_t n_predict = 64;
  int32_t n_threads = 2;
  CpuIsaOption cpu_isa_option;       // --cpu-isa / PREFIXD_CPU_ISA
  std::string kv_dtype = "f32";
  bool json = false;
};

// Returns the process exit code.
int run_generate(const GenerateOptions& opts);

}  // namespace prefixd
