// Test support: several sequences of one model prefilled together, then
// greedy decode steps over a changing subset of them, so that the decode
// batches take every size from 1 to n_seqs (crossing the CUDA backend's
// decode-graph buckets 1, 2, 4, 8, 16) and sequences of different lengths
// decode side by side. Records every pass's logits and tokens, so that two
// backends (or two settings of one) can be compared step by step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "kernels/backend.h"

namespace prefixd::testing {

struct DecodeStreamsRun {
  std::vector<std::vector<float>> logits;    // per pass: (output rows, n_vocab) f32
  std::vector<std::vector<int32_t>> rows;    // per pass: the sequence of each output row
  std::vector<std::vector<int32_t>> tokens;  // per sequence: prompt, then every greedy token
};

// n_seqs sequences with prompts of 3 + 5 i tokens (sequence i), prefilled in
// one batch; then n_steps decode passes, pass t over the first sizes[t %
// sizes.size()] sequences (default: 1, 2, ... n_seqs), each fed its greedy
// token. Each sequence owns its blocks in reversed order. `max_outputs` is
// the forward pass's output-row limit (at least n_seqs).
inline DecodeStreamsRun run_decode_streams(const Model& model, DType kv_dtype, int32_t block_size,
                                           int32_t n_seqs, int32_t n_steps, int32_t max_outputs,
                                           std::vector<int32_t> sizes = {}) {
  if (sizes.empty())
    for (int32_t n = 1; n <= n_seqs; ++n) sizes.push_back(n);
  const ModelConfig& c = model.config();
  const int32_t longest = 3 + 5 * (n_seqs - 1) + n_steps + 1;
  const int32_t blocks_per_seq = (longest + block_size - 1) / block_size;
  KvGeometry g;
  g.n_layers = c.n_layers;
  g.n_blocks = blocks_per_seq * n_seqs;
  g.block_size = block_size;
  g.n_kv_heads = c.n_kv_heads;
  g.head_dim = c.head_dim;
  g.dtype = kv_dtype;
  Backend& be = model.backend();
  KvPool pool = be.allocate_kv_pool(g).value();
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seqs));
  for (int32_t s = 0; s < n_seqs; ++s)
    for (int32_t b = 0; b < blocks_per_seq; ++b)
      tables[s].push_back((s + 1) * blocks_per_seq - 1 - b);

  DecodeStreamsRun run;
  ForwardPass fwd(model, 3 + 5 * n_seqs * n_seqs + 64, max_outputs);
  run.tokens.resize(static_cast<size_t>(n_seqs));
  BatchBuilder b(block_size);
  for (int32_t s = 0; s < n_seqs; ++s) {
    for (int32_t i = 0; i < 3 + 5 * s; ++i)
      run.tokens[s].push_back(1 + (s * 131 + i * 17) % (c.n_vocab - 1));
    b.add(run.tokens[s], 0, tables[s], LogitsWanted::kLast);
  }
  std::vector<int32_t> rows(static_cast<size_t>(n_seqs));
  for (int32_t s = 0; s < n_seqs; ++s) rows[s] = s;
  for (int32_t t = 0; t <= n_steps; ++t) {
    std::vector<float> logits;
    fwd.run(b.batch(), pool, &logits);
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* l = logits.data() + r * static_cast<size_t>(c.n_vocab);
      run.tokens[rows[r]].push_back(static_cast<int32_t>(std::max_element(l, l + c.n_vocab) - l));
    }
    run.logits.push_back(std::move(logits));
    run.rows.push_back(rows);
    if (t == n_steps) break;
    b.clear();
    rows.clear();
    for (int32_t s = 0; s < sizes[static_cast<size_t>(t) % sizes.size()]; ++s) {
      const std::vector<int32_t>& seq = run.tokens[s];
      const int32_t pos = static_cast<int32_t>(seq.size()) - 1;
      b.add(std::vector<int32_t>{seq.back()}, pos, tables[s], LogitsWanted::kLast);
      rows.push_back(s);
    }
  }
  be.free_kv_pool(pool);
  return run;
}

}  // namespace prefixd::testing
