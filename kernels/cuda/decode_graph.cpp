// DecodeGraphs: recording, replaying and checking decode-step CUDA graphs
// (see decode_graph.h). The graph API calls are checked softly: a failure
// switches graphs off for the process and the step runs eagerly. Calls shared
// with the eager path (uploads, downloads) abort on failure as they do there.
#include "kernels/cuda/decode_graph.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace prefixd::cuda {
namespace {

inline constexpr size_t kMaxLiveGraphs = 64;  // least recently used dropped beyond
inline constexpr int kSettleRuns = 3;         // eager runs before a capture, at most

std::string describe(const DecodeGraphKey& k) {
  return "bucket " + std::to_string(k.bucket) + ", table capacity " +
         std::to_string(k.table_capacity) + ", block size " + std::to_string(k.block_size);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

struct DecodeGraphs::Graph {
  DecodeGraphKey key;
  PackedBatch layout;        // the recorded step's layout (words empty)
  int32_t* words = nullptr;  // device, (n_words) int32: the packed batch every replay reads
  size_t n_words = 0;
  cudaGraphExec_t exec = nullptr;
  uint64_t epoch = 0;  // CaptureState::epoch when recorded
  uint64_t last_use = 0;
  int32_t checks_left = 1;  // replays on later steps still to compare with their eager run

  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);  // in flight: freed on completion
    if (words != nullptr) cudaFree(words);            // waits for work using it
  }
};

DecodeGraphs::DecodeGraphs(StepHost& host, DecodeGraphMode mode, bool corrupt_checked_replays)
    : host_(host), mode_(mode), corrupt_checked_replays_(corrupt_checked_replays) {
  stats_.mode = mode;
  if (mode_ == DecodeGraphMode::kOff) return;
  if (cudaEventCreateWithFlags(&staging_read_, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    staging_read_ = nullptr;
    disable("cudaEventCreate failed");
  }
}

DecodeGraphs::~DecodeGraphs() {
  graphs_.clear();
  if (staging_read_ != nullptr) {
    cudaEventSynchronize(staging_read_);
    cudaEventDestroy(staging_read_);
  }
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

void DecodeGraphs::run_step(const Batch& batch, const KvPool& pool, const StepInfo& info,
                            const StepBody& body) {
  const int32_t bs = pool.geom.block_size;
  const bool one_row_each = std::all_of(batch.seqs.begin(), batch.seqs.end(),
                                        [](const BatchSeq& s) { return s.n_q == 1; });
  if (mode_ == DecodeGraphMode::kOff || stats_.disabled || !one_row_each ||
      info.logits == nullptr || pool.k.empty() || !validate_batch(batch, bs).ok()) {
    run_eager(batch, bs, body);  // prepare_batch reports an invalid batch
    return;
  }
  const DecodeStepPlan plan = plan_decode_step(batch, info.max_rows, bs);
  // Out-of-range ids: the eager ops refuse them with their own messages.
  if (plan.kind != StepKind::kGraph || plan.max_block_id >= pool.geom.n_blocks ||
      plan.max_token >= info.token_limit) {
    run_eager(batch, bs, body);
    return;
  }
  const Batch padded = pad_decode_batch(batch, plan, bs, pool.geom.n_blocks);
  PackedBatch packed = pack_decode_step(padded, plan, bs);
  if (mode_ == DecodeGraphMode::kPaddedEager) {
    host_.upload_packed(std::move(packed), bs);
    host_.forget_current_twin();
    body(padded);
    ++stats_.padded_eager_steps;
    return;
  }
  const DecodeGraphKey key{info.owner, pool.k[0], bs, plan.bucket, plan.table_capacity};
  run_recorded(key, padded, std::move(packed), info, body);
}

void DecodeGraphs::run_eager(const Batch& batch, int32_t block_size, const StepBody& body) {
  host_.prepare_step_batch(batch, block_size);
  body(batch);
  ++stats_.eager_steps;
}

void DecodeGraphs::run_recorded(const DecodeGraphKey& key, const Batch& padded, PackedBatch packed,
                                const StepInfo& info, const StepBody& body) {
  auto it = std::find_if(graphs_.begin(), graphs_.end(),
                         [&](const std::unique_ptr<Graph>& g) { return g->key == key; });
  if (it != graphs_.end() && (*it)->epoch != host_.capture_state().epoch) {
    graphs_.erase(it);  // memory it points at was replaced: record again
    it = graphs_.end();
  }
  if (it != graphs_.end() &&
      (!same_graph_layout((*it)->layout, packed) || (*it)->n_words != packed.words.size())) {
    // The layout of a padded step is a function of its key by construction;
    // a difference means that no longer holds, so no graph can be trusted.
    ++stats_.layout_misses;
    disable("a padded decode step (" + describe(key) + ") packed differently from its graph");
    host_.upload_packed(std::move(packed), key.block_size);
    host_.forget_current_twin();
    body(padded);
    ++stats_.padded_eager_steps;
    return;
  }
  if (it == graphs_.end()) {
    record(key, padded, std::move(packed), info, body);
  } else {
    replay(**it, padded, std::move(packed), info, body);
  }
}

void DecodeGraphs::upload_to(Graph& g, PackedBatch packed) {
  cudaStream_t s = host_.step_stream();
  const size_t n = packed.words.size();
  // The previous step's copy must have read the staging before it is refilled.
  PREFIXD_CUDA_CHECK(cudaEventSynchronize(staging_read_));
  if (n > staging_words_) {
    if (staging_ != nullptr) PREFIXD_CUDA_CHECK(cudaFreeHost(staging_));
    staging_ = nullptr;
    PREFIXD_CUDA_CHECK(cudaHostAlloc(&staging_, n * sizeof(int32_t), cudaHostAllocDefault));
    staging_words_ = n;
  }
  if (n > 0) {
    std::memcpy(staging_, packed.words.data(), n * sizeof(int32_t));
    PREFIXD_CUDA_CHECK(
        cudaMemcpyAsync(g.words, staging_, n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  }
  PREFIXD_CUDA_CHECK(cudaEventRecord(staging_read_, s));
  packed.words.clear();
  host_.use_packed(g.words, packed, g.key.block_size);
}

bool DecodeGraphs::settle(const Batch& padded, const StepBody& body) {
  CaptureState& cs = host_.capture_state();
  for (int run = 0; run < kSettleRuns; ++run) {
    const uint64_t before = cs.epoch;
    host_.forget_current_twin();
    body(padded);
    ++stats_.padded_eager_steps;
    if (cs.epoch == before) return true;
  }
  return false;
}

std::vector<float> DecodeGraphs::logits(const Graph& g, const StepInfo& info) {
  cudaStream_t s = host_.step_stream();
  std::vector<float> out(static_cast<size_t>(g.key.bucket) * static_cast<size_t>(info.logit_cols));
  PREFIXD_CUDA_CHECK(cudaMemcpyAsync(out.data(), info.logits, out.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost, s));
  PREFIXD_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

// Stays long: eager runs, capture and check in sequence over one stream and one
// graph, each a commented paragraph whose early return leaves the eager results.
void DecodeGraphs::record(const DecodeGraphKey& key, const Batch& padded, PackedBatch packed,
                          const StepInfo& info, const StepBody& body) {
  if (graphs_.size() >= kMaxLiveGraphs) evict_oldest();
  auto g = std::make_unique<Graph>();
  g->key = key;
  g->n_words = packed.words.size();
  g->layout = packed;
  g->layout.words.clear();
  cudaError_t err = cudaMalloc(&g->words, std::max<size_t>(g->n_words, 1) * sizeof(int32_t));
  if (err != cudaSuccess) {
    cudaGetLastError();
    g->words = nullptr;
    disable(std::string("cudaMalloc of a graph's batch buffer: ") + cudaGetErrorString(err));
    host_.upload_packed(std::move(packed), key.block_size);
    host_.forget_current_twin();
    body(padded);
    return;
  }
  upload_to(*g, std::move(packed));

  // Eager runs: the step's results, and every buffer the capture will use sized.
  CaptureState& cs = host_.capture_state();
  if (!settle(padded, body)) {
    disable("backend memory still changing after " + std::to_string(kSettleRuns) +
            " eager runs of a decode step (" + describe(key) + ")");
    return;  // the last eager run's results stand
  }
  g->epoch = cs.epoch;
  const std::vector<float> eager = logits(*g, info);

  // Capture: nothing runs; the eager results stay in place meanwhile.
  cudaStream_t s = host_.step_stream();
  host_.forget_current_twin();
  err = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    cudaGetLastError();
    disable(std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(err));
    return;
  }
  cs.capturing = true;
  cs.spoiled = false;
  body(padded);
  cs.capturing = false;
  cudaGraph_t graph = nullptr;
  err = cudaStreamEndCapture(s, &graph);
  if (err != cudaSuccess) cudaGetLastError();
  const bool spoiled = cs.spoiled || cs.epoch != g->epoch;
  for (void* p : cs.retired) PREFIXD_CUDA_CHECK(cudaFree(p));
  cs.retired.clear();
  if (err == cudaSuccess && graph != nullptr && !spoiled) {
    err = cudaGraphInstantiate(&g->exec, graph, 0);
    if (err != cudaSuccess) {
      cudaGetLastError();
      g->exec = nullptr;
    }
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (spoiled || g->exec == nullptr) {
    disable(spoiled ? "backend memory changed while capturing a decode step (" + describe(key) + ")"
                    : std::string("capturing a decode step: ") + cudaGetErrorString(err));
    return;  // the eager results stand (a capture runs nothing)
  }
  host_.forget_current_twin();

  // Check: the graph replayed on the step it recorded gives the eager logits.
  err = cudaGraphLaunch(g->exec, s);
  if (err != cudaSuccess) {
    cudaGetLastError();
    disable(std::string("cudaGraphLaunch: ") + cudaGetErrorString(err));
    return;  // nothing ran: the eager results stand
  }
  corrupt_for_test(info);
  const std::vector<float> replayed = logits(*g, info);
  if (!same_bits(replayed, eager)) {
    disable("the graph of a decode step (" + describe(key) +
            ") gave logits that differ from its eager run");
    host_.forget_current_twin();
    body(padded);  // rewrites the step's K/V slots and logits eagerly
    ++stats_.padded_eager_steps;
    return;
  }
  ++stats_.captures;
  g->last_use = ++use_clock_;
  graphs_.push_back(std::move(g));
}

void DecodeGraphs::replay(Graph& g, const Batch& padded, PackedBatch packed, const StepInfo& info,
                          const StepBody& body) {
  upload_to(g, std::move(packed));
  host_.forget_current_twin();
  const cudaError_t err = cudaGraphLaunch(g.exec, host_.step_stream());
  if (err != cudaSuccess) {
    cudaGetLastError();
    body(padded);  // nothing ran: the step runs eagerly on the current batch (g's words)
    ++stats_.padded_eager_steps;
    disable(std::string("cudaGraphLaunch: ") + cudaGetErrorString(err));
    return;
  }
  g.last_use = ++use_clock_;
  ++stats_.replays;
  if (g.checks_left > 0) {
    // First replay on a step of its own: the eager run of the same step must
    // give the same bits (and rewrites its K/V slots, whatever the graph did).
    --g.checks_left;
    corrupt_for_test(info);
    const std::vector<float> replayed = logits(g, info);
    host_.forget_current_twin();
    body(padded);
    ++stats_.padded_eager_steps;
    const std::vector<float> eager = logits(g, info);
    if (!same_bits(replayed, eager)) {
      disable("the graph of a decode step (" + describe(g.key) +
              ") gave logits that differ from the eager run on a later step");
      return;  // the eager results stand
    }
    ++stats_.checked_replays;
  }
  host_.forget_current_twin();  // the replayed ops' bookkeeping did not run on the host
}

void DecodeGraphs::evict_oldest() {
  auto oldest =
      std::min_element(graphs_.begin(), graphs_.end(),
                       [](const std::unique_ptr<Graph>& a, const std::unique_ptr<Graph>& b) {
                         return a->last_use < b->last_use;
                       });
  if (oldest != graphs_.end()) graphs_.erase(oldest);
}

void DecodeGraphs::corrupt_for_test(const StepInfo& info) {
  if (!corrupt_checked_replays_) return;
  PREFIXD_CUDA_CHECK(
      cudaMemsetAsync(const_cast<float*>(info.logits), 0xff, sizeof(float), host_.step_stream()));
}

void DecodeGraphs::drop_all() { graphs_.clear(); }

void DecodeGraphs::disable(const std::string& reason) {
  if (!stats_.disabled)
    std::fprintf(stderr, "cuda backend: decode graphs off for this process: %s\n", reason.c_str());
  stats_.disabled = true;
  stats_.disabled_reason = reason;
  drop_all();
}

DecodeGraphStats DecodeGraphs::stats() const {
  DecodeGraphStats s = stats_;
  s.live_graphs = static_cast<int32_t>(graphs_.size());
  return s;
}

}  // namespace prefixd::cuda
