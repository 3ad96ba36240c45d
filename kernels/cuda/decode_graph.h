// Decode steps without launch overhead: the CUDA backend's Backend::run_step.
// A pure decode step (decode_graph_plan.h: StepKind::kGraph) is padded to a
// batch-size bucket and recorded once per key as a CUDA graph (stream capture
// of the forward pass's StepBody); later steps of the key upload their packed
// batch to the graph's own device buffer and replay it with one launch.
//
// Safety, in order:
//   - recording: the padded step runs eagerly first (until a run changes no
//     backend memory: scratch growth, twins, RoPE tables), then is captured;
//     the capture is discarded if anything tried to allocate meanwhile;
//   - the graph is replayed on the step it recorded and its logits compared
//     with the eager run's, bit for bit; its first replay on a later step is
//     compared the same way (graph, then the eager run of the same step,
//     which also rewrites the step's K/V slots);
//   - any difference, or a CUDA error from the graph calls, switches graphs
//     off for the process (one log line on stderr; stats().disabled) and the
//     step is served by its eager run;
//   - a graph is dropped when memory it points at may change: any growth of a
//     backend scratch, a Backend::free, a pool allocated or freed.
//
// Thread: the backend's engine thread only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/decode_graph_plan.h"
#include "kernels/cuda/launch_config.h"

namespace prefixd::cuda {

// Device memory events of the backend that a recorded graph depends on.
struct CaptureState {
  bool capturing = false;      // a step is being captured on the backend's stream
  bool spoiled = false;        // something allocated during the capture: discard it
  uint64_t epoch = 0;          // bumped whenever memory a graph may point at is replaced or added
  std::vector<void*> retired;  // device buffers replaced during a capture, freed after it
};

// What the graph runner needs of the backend that owns it.
class StepHost {
 public:
  virtual cudaStream_t step_stream() const = 0;
  // prepare_batch(batch, block_size): validated, packed, uploaded, current.
  virtual void prepare_step_batch(const Batch& batch, int32_t block_size) = 0;
  // Uploads a packed batch to the backend's own batch buffer and makes it current.
  virtual void upload_packed(PackedBatch packed, int32_t block_size) = 0;
  // Makes a packed batch already at `words` (device) current.
  virtual void use_packed(const int32_t* words, const PackedBatch& layout, int32_t block_size) = 0;
  // Forgets the current activation twin (activation_twins.h): a step's body
  // starts, or a replayed step ends, with none.
  virtual void forget_current_twin() = 0;
  virtual CaptureState& capture_state() = 0;

 protected:
  ~StepHost() = default;
};

class DecodeGraphs {
 public:
  // corrupt_checked_replays: a test hook (CudaBackendOptions) that spoils the
  // first logit after every graph replay that is then checked.
  DecodeGraphs(StepHost& host, DecodeGraphMode mode, bool corrupt_checked_replays = false);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Backend::run_step (see there and above).
  void run_step(const Batch& batch, const KvPool& pool, const StepInfo& info, const StepBody& body);
  // Drops every graph (memory they point at is about to change).
  void drop_all();
  DecodeGraphStats stats() const;

 private:
  struct Graph;  // decode_graph.cpp
  void run_eager(const Batch& batch, int32_t block_size, const StepBody& body);
  void run_recorded(const DecodeGraphKey& key, const Batch& padded, PackedBatch packed,
                    const StepInfo& info, const StepBody& body);
  void record(const DecodeGraphKey& key, const Batch& padded, PackedBatch packed,
              const StepInfo& info, const StepBody& body);
  void replay(Graph& g, const Batch& padded, PackedBatch packed, const StepInfo& info,
              const StepBody& body);
  // Copies packed.words to the graph's device buffer and makes it current.
  void upload_to(Graph& g, PackedBatch packed);
  // Eager runs of `padded` (already current) until one leaves backend memory
  // unchanged; false when three runs did not settle.
  bool settle(const Batch& padded, const StepBody& body);
  // (bucket, logit_cols) f32 logits of the step, downloaded (waits).
  std::vector<float> logits(const Graph& g, const StepInfo& info);
  void disable(const std::string& reason);
  // The test hook: overwrites the first logit on the stream.
  void corrupt_for_test(const StepInfo& info);
  void evict_oldest();

  StepHost& host_;
  DecodeGraphMode mode_;
  bool corrupt_checked_replays_;
  std::vector<std::unique_ptr<Graph>> graphs_;
  uint64_t use_clock_ = 0;
  void* staging_ = nullptr;  // pinned, (staging_words_) int32: packed words on their way up
  size_t staging_words_ = 0;
  cudaEvent_t staging_read_ = nullptr;  // recorded after the last copy out of staging_
  DecodeGraphStats stats_;
};

}  // namespace prefixd::cuda
