// The backend interface: every operation the forward pass needs, written once
// in engine/ against this class. kernels/cpu is the reference implementation;
// kernels/cuda implements the same calls on a GPU.
//
// Threading: a Backend is used by one thread at a time (the engine thread).
// Memory: buffers come from alloc() and live where the backend computes
// (host memory for CPU, device memory for CUDA). Calls may be asynchronous;
// download() and synchronize() wait for all work issued before them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/dtype.h"
#include "kernels/fast_path_report.h"
#include "kernels/quant/weight_type.h"

namespace prefixd {

enum class RopeStyle : uint8_t {
  kNormal = 0,  // llama: rotates adjacent pairs (x[2i], x[2i+1])
  kNeox = 1,    // qwen2, qwen3 (NeoX): rotates halves (x[i], x[i + rope_dim/2])
};

// A weight matrix W of shape (rows = n_out, cols = n_in), stored as the backend
// prefers (it may repack or convert at upload).
class Matrix {
 public:
  virtual ~Matrix() = default;
  int64_t rows = 0;
  int64_t cols = 0;
  WeightType source_type = WeightType::F32;
};

// Shape of the paged KV pool. One K and one V allocation per layer, each of
// shape (layer_blocks(layer), block_size, n_kv_heads, head_dim) in `dtype`.
//
// Window group (sliding-window models on a backend that supports it,
// Backend::supports_window_group()): the layers marked in `window_layers`
// keep their K/V in a second block space of n_window_blocks blocks, addressed
// by the batch's window_block_tables / window_slots and by the window ids of
// the block transfers; the other (global) layers use the n_blocks space. A
// window layer needs only the blocks within its window of the positions it
// computes, so its space can be smaller. Empty window_layers: one space.
struct KvGeometry {
  int32_t n_layers = 0;
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::F16;
  int32_t n_window_blocks = 0;         // blocks of the window group (0 without one)
  std::vector<uint8_t> window_layers;  // [n_layers] 1: in the window group; or empty
  // Recurrent state (models with recurrent layers, Backend::supports_recurrent_layers()):
  // n_state_slots slots of state_floats f32 each, one per running sequence
  // (BatchSeq::state_slot); not part of any block. n_layers counts the
  // attention layers only.
  int32_t n_state_slots = 0;
  int64_t state_floats = 0;

  bool has_window_group() const { return !window_layers.empty(); }
  bool in_window_group(int32_t layer) const {
    return has_window_group() && window_layers[static_cast<size_t>(layer)] != 0;
  }
  int32_t n_window_layers() const {
    int32_t n = 0;
    for (uint8_t w : window_layers) n += w != 0;
    return n;
  }
  // Blocks of the space `layer` lives in.
  int32_t layer_blocks(int32_t layer) const { return in_window_group(layer) ? n_window_blocks : n_blocks; }
  // Bytes of one block's K (or V) in one layer.
  size_t layer_block_bytes() const {
    return static_cast<size_t>(block_size) * n_kv_heads * head_dim * dtype_bytes(dtype);
  }
  // Bytes of one block's K and V over all layers (a tier transfer payload,
  // whatever the groups).
  size_t block_bytes() const { return 2 * layer_block_bytes() * n_layers; }
  // Bytes of one block of the global space (all layers without a window
  // group) and of the window space.
  size_t global_block_bytes() const { return 2 * layer_block_bytes() * (n_layers - n_window_layers()); }
  size_t window_block_bytes() const { return 2 * layer_block_bytes() * n_window_layers(); }
  size_t pool_bytes() const {
    return global_block_bytes() * static_cast<size_t>(n_blocks) +
           window_block_bytes() * static_cast<size_t>(n_window_blocks);
  }
};

// The pool's buffers; owned by the backend that allocated them.
struct KvPool {
  KvGeometry geom;
  std::vector<void*> k;  // [n_layers] -> (layer_blocks(l), block_size, n_kv_heads, head_dim) dtype
  std::vector<void*> v;  // [n_layers] -> same shape
  float* state = nullptr;  // (n_state_slots, state_floats) f32, zeroed; null without slots
};

// One Gated DeltaNet layer's shape (qwen35) and where its state lies in a
// state slot: the convolution tail (conv_width - 1, conv_channels()) f32,
// oldest row first, then the delta state (n_v_heads, d_v, d_k) f32. Value
// head h reads key head h % n_k_heads (Qwen3.5's pairing k0v0, k1v1, k0v2, ...).
struct DeltaNetShape {
  int32_t n_k_heads = 0;
  int32_t n_v_heads = 0;
  int32_t d_k = 0;
  int32_t d_v = 0;
  int32_t conv_width = 0;
  int64_t state_offset = 0;  // floats from the start of a slot

  // Rows of the convolved input: q (n_k_heads, d_k), k (n_k_heads, d_k), v (n_v_heads, d_v).
  int64_t conv_channels() const {
    return 2 * static_cast<int64_t>(n_k_heads) * d_k + static_cast<int64_t>(n_v_heads) * d_v;
  }
  int64_t conv_state_floats() const { return (conv_width - 1) * conv_channels(); }
  int64_t delta_state_floats() const { return static_cast<int64_t>(n_v_heads) * d_v * d_k; }
  int64_t state_floats() const { return conv_state_floats() + delta_state_floats(); }
};

// A logical block's places in the pool: `block` in the global space and
// `window_block` in the window space (-1: no window group, or the block has
// no window part).
struct KvBlockIds {
  int32_t block = -1;
  int32_t window_block = -1;
};

// One sequence in a varlen batch.
struct BatchSeq {
  int32_t q_start = 0;     // first row of this sequence in the batch
  int32_t n_q = 0;         // rows (tokens computed this step)
  int32_t pos0 = 0;        // position of the first row; KV covers [0, pos0 + n_q)
  int32_t table_start = 0; // offset of its block table in Batch::block_tables
  int32_t n_table = 0;     // entries = ceil((pos0 + n_q) / block_size)
  // Recurrent models: the state slot holding this sequence's state at pos0
  // (read only when pos0 > 0; at pos0 == 0 the state starts from zeros),
  // left holding its state at pos0 + n_q.
  int32_t state_slot = 0;
};

// Everything about the token layout of one forward pass. Host arrays; the
// backend copies what it needs in prepare_batch().
struct Batch {
  std::vector<int32_t> tokens;        // [n_tokens] token ids
  std::vector<int32_t> positions;     // [n_tokens] absolute positions
  std::vector<int32_t> slots;         // [n_tokens] KV slot = block_id * block_size + pos % block_size
  std::vector<BatchSeq> seqs;         // sequences, rows contiguous and in order
  std::vector<int32_t> block_tables;  // concatenated per-sequence block tables
  std::vector<int32_t> output_rows;   // rows whose logits are wanted, ascending
  // Window group pools only (else empty): the same tables and slots in the
  // window space, for the window layers. An entry for a block older than
  // every row's window is never attended to but may be read (kernels round
  // down to their key chunks): it must name a block of finite values (the
  // engine puts window block 0, which it never writes).
  std::vector<int32_t> window_block_tables;  // parallel to block_tables
  std::vector<int32_t> window_slots;         // [n_tokens] window_block * block_size + pos % block_size
  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

// One block of a batched transfer (Backend::write_blocks / read_blocks): pool
// block `block_id` and a host buffer of KvGeometry::block_bytes() bytes; in a
// window group pool also `window_block_id` (write: -1 leaves the window
// layers' bytes of the buffer unstored).
struct BlockWrite {
  int32_t block_id = -1;
  const void* host_src = nullptr;
  int32_t window_block_id = -1;
};
struct BlockRead {
  int32_t block_id = -1;
  void* host_dst = nullptr;
  int32_t window_block_id = -1;
};

// One forward step as its caller describes it to Backend::run_step.
struct StepInfo {
  const void* owner = nullptr;    // the caller (a ForwardPass): its steps may share state
  int32_t max_rows = 0;           // tokens and output rows the caller's buffers hold
  int64_t token_limit = 0;        // token ids are below this (the embedding table's rows)
  const float* logits = nullptr;  // (output rows, logit_cols) f32 in backend memory: the result
  int64_t logit_cols = 0;
};

// The ops of one step over the batch the backend made current (the `step`
// passed in; see run_step). Issues backend ops only.
using StepBody = std::function<void(const Batch& step)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" or "cuda"
  virtual int n_threads() const { return 1; }
  // Which fast paths serve (library attention, tuned kernels), their call
  // counts and self-check verdicts, for /health and /metrics. Any thread.
  // Empty for a backend without fast paths (the CPU's).
  virtual FastPathReport fast_path_report() const { return {}; }

  // --- memory -------------------------------------------------------------
  virtual void* alloc(size_t n_bytes) = 0;  // zero-initialised; aborts on OOM
  virtual void free(void* ptr) = 0;
  virtual void upload(void* dst, const void* src_host, size_t n_bytes) = 0;
  virtual void download(void* dst_host, const void* src, size_t n_bytes) = 0;  // waits
  virtual void synchronize() = 0;
  // Host memory for records that travel to and from the KV pool (the host
  // tier, disk reads): page-locked on CUDA so block copies can run
  // asynchronously, plain malloc on the CPU. Thread-safe; nullptr on failure.
  virtual void* alloc_host(size_t n_bytes) { return std::malloc(n_bytes); }
  virtual void free_host(void* ptr) { std::free(ptr); }

  // Copies a weight matrix (rows, cols) from host memory of type `type` into the
  // backend's preferred form. `host_data` may be an mmap: the backend must not
  // keep the pointer unless `host_data_outlives` is true.
  virtual std::unique_ptr<Matrix> upload_matrix(WeightType type, int64_t rows, int64_t cols,
                                                const void* host_data,
                                                bool host_data_outlives) = 0;

  // A pool with a window group (KvGeometry::window_layers set) only where
  // supports_window_group(); the CPU backend does, CUDA not yet.
  virtual Result<KvPool> allocate_kv_pool(const KvGeometry& geom) = 0;
  virtual bool supports_window_group() const { return false; }
  virtual void free_kv_pool(KvPool& pool) = 0;

  // --- one forward pass -----------------------------------------------------
  // Makes `batch` current for the ops below until the next prepare_batch().
  virtual void prepare_batch(const Batch& batch, int32_t block_size) = 0;

  // out (n_tokens, table.cols) f32 = rows of `table` picked by the batch's tokens.
  virtual void embed(const Matrix& table, float* out) = 0;
  // out (n, dim) = x / rms(x) * weight; weight (dim) f32. out may equal x.
  virtual void rmsnorm(const float* x, const float* weight, float* out, int64_t n, int64_t dim,
                       float eps) = 0;
  // y (n, w.rows) = x (n, w.cols) · Wᵀ.
  virtual void matmul(const Matrix& w, const float* x, float* y, int64_t n) = 0;
  // ys[i] (n, ws[i]->rows) = x (n, cols) · Wᵢᵀ for i < count: products of
  // one input, such as q/k/v and gate/up, each output as matmul() gives it.
  // A backend may do them as one piece of work (the CPU converts x once and
  // splits the panels of all the matrices over its threads together).
  virtual void matmul_same_x(const Matrix* const* ws, const float* x, float* const* ys, int count,
                             int64_t n) {
    for (int i = 0; i < count; ++i) matmul(*ws[i], x, ys[i], n);
  }
  // y (n, dim) += bias (dim).
  virtual void add_bias(float* y, const float* bias, int64_t n, int64_t dim) = 0;
  // y (n) += x (n).
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // out (n) = silu(gate) * up, elementwise.
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // out (n) = gelu_tanh(gate) * up, elementwise (op::geglu; Gemma's FFN).
  virtual void geglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  // y (n) *= factor (Gemma's embedding scale).
  virtual void scale(float* y, float factor, int64_t n) = 0;
  // In place on x (n_tokens, n_heads, head_dim) at the batch's positions; the
  // first rope_dim dims of each head rotate with
  // theta_i = pos * base^(-2i/rope_dim) / freq_factors[i], as ggml's rope with
  // frequency factors (Llama 3.1 scaling). freq_factors: (rope_dim / 2) f32 in
  // host memory, read during the call only; nullptr means every factor is 1.
  virtual void rope(float* x, int32_t n_heads, int32_t head_dim, int32_t rope_dim, float base,
                    const float* freq_factors, RopeStyle style) = 0;
  // Writes k, v (n_tokens, n_kv_heads * head_dim) f32 into the pool at the batch's slots.
  virtual void kv_store(KvPool& pool, int32_t layer, const float* k, const float* v) = 0;
  // Causal attention for every sequence of the batch, reading K/V of positions
  // [0, pos0 + n_q) through its block table. q, out: (n_tokens, n_heads * head_dim).
  // GQA: query head h reads KV head h / (n_heads / n_kv_heads).
  // window_tokens > 0: sliding-window attention as llama.cpp's standard SWA: a
  // query at position p reads keys (p - window_tokens, p] only (itself and
  // the window_tokens - 1 before it). 0: every key up to p.
  virtual void attention(const KvPool& pool, int32_t layer, const float* q, float* out,
                         int32_t n_heads, float scale, int32_t window_tokens) = 0;
  // Gated short convolution (LFM2) of layer `layer`, whose convolution tail
  // is a ring of B·x rows in the layer's pool area (kernels/conv_tail.h; the
  // area must hold it: conv_tail::fits). bcx (n_tokens, 3 * channels) f32 is
  // each row's B | C | x; kernel (channels, l_cache) f32, tap 0 the oldest.
  // For the row at position p: bx[p] = B[p] ⊙ x[p] and
  //   out[p] (channels) f32 = C[p] ⊙ Σ_{j=0}^{L-1} kernel[:, j] ⊙ bx[p - (L-1) + j],
  // summed in F32 in that order from 0; positions below 0 count as zero rows,
  // and those before the sequence's first row in the batch come from the
  // ring. Then every row's bx goes into the ring. A backend without it
  // (supports_short_conv() false) aborts; models check it at load.
  virtual bool supports_short_conv() const { return false; }
  virtual void short_conv(KvPool& pool, int32_t layer, const float* bcx, const float* kernel, float* out,
                          int32_t channels, int32_t l_cache) {
    (void)pool, (void)layer, (void)bcx, (void)kernel, (void)out, (void)channels, (void)l_cache;
    std::fprintf(stderr, "fatal: backend %s has no short convolution\n", name().c_str());
    std::abort();
  }
  // out (n_rows, dim) = the batch's output_rows of x (n_tokens, dim).
  virtual void gather_output_rows(const float* x, float* out, int64_t dim) = 0;

  // --- recurrent layers (qwen35's Gated DeltaNet) ---------------------------
  // A backend without them aborts in these calls; Model::load refuses such
  // models there.
  virtual bool supports_recurrent_layers() const { return false; }
  // x (n_tokens, s.conv_channels()) in place: each sequence's rows through the
  // causal depthwise convolution of width s.conv_width, preceded by its slot's
  // convolution tail (zeros at pos0 == 0), then SiLU; the tail is replaced by
  // the sequence's last inputs. conv_w (conv_channels, conv_width) f32.
  virtual void delta_conv(KvPool& pool, const DeltaNetShape& s, const float* conv_w, float* x) {
    (void)pool, (void)s, (void)conv_w, (void)x;
    PREFIXD_CHECK(false, "this backend has no recurrent layers");
  }
  // The gated delta rule over each sequence's rows, from its slot's delta
  // state (zeros at pos0 == 0), left holding the state after its last row.
  // qkv (n_tokens, s.conv_channels()), delta_conv's output: q and k are
  // L2-normalised in place (eps); g (n_tokens, n_v_heads) the log decay,
  // beta (n_tokens, n_v_heads); out (n_tokens, n_v_heads * d_v). Queries are
  // scaled by 1/sqrt(d_k).
  virtual void delta_rule(KvPool& pool, const DeltaNetShape& s, float* qkv, const float* g,
                          const float* beta, float* out, float eps) {
    (void)pool, (void)s, (void)qkv, (void)g, (void)beta, (void)out, (void)eps;
    PREFIXD_CHECK(false, "this backend has no recurrent layers");
  }
  // State slots as whole units (prefix reuse for recurrent models: state
  // snapshots, engine/state_snapshots.h): slot dst := slot src; a slot's
  // state_floats f32 to or from host memory. Every backend with recurrent
  // layers implements them.
  virtual void copy_state_slot(KvPool& pool, int32_t src, int32_t dst) {
    (void)pool, (void)src, (void)dst;
    PREFIXD_CHECK(false, "this backend has no recurrent state slots");
  }
  virtual void read_state_slot(const KvPool& pool, int32_t slot, float* host_dst) {
    (void)pool, (void)slot, (void)host_dst;
    PREFIXD_CHECK(false, "this backend has no recurrent state slots");
  }
  virtual void write_state_slot(KvPool& pool, int32_t slot, const float* host_src) {
    (void)pool, (void)slot, (void)host_src;
    PREFIXD_CHECK(false, "this backend has no recurrent state slots");
  }
  // In place over n rows of n_heads: alpha := softplus(alpha + dt_bias) · a,
  // beta := sigmoid(beta). dt_bias, a (n_heads) f32.
  virtual void delta_gates(float* alpha, float* beta, const float* dt_bias, const float* a, int64_t n,
                           int32_t n_heads) {
    (void)alpha, (void)beta, (void)dt_bias, (void)a, (void)n, (void)n_heads;
    PREFIXD_CHECK(false, "this backend has no recurrent layers");
  }
  // y (n) *= sigmoid(gate (n)): the gated attention's output gate.
  virtual void sigmoid_mul(float* y, const float* gate, int64_t n) {
    (void)y, (void)gate, (void)n;
    PREFIXD_CHECK(false, "this backend has no recurrent layers");
  }
  // x (n_rows, 2 * width) split into first (n_rows, width) and second (n_rows, width).
  virtual void split_pairs(const float* x, float* first, float* second, int64_t n_rows, int64_t width) {
    (void)x, (void)first, (void)second, (void)n_rows, (void)width;
    PREFIXD_CHECK(false, "this backend has no recurrent layers");
  }

  // A whole forward step: makes `batch` current and runs `body` over it; when
  // this returns, info.logits holds the logits of batch.output_rows in their
  // order (rows beyond them are the backend's own). The default, which the
  // CPU backend keeps, is prepare_batch(batch) then body(batch). A backend may
  // instead run body over a larger batch that begins with `batch`'s rows and
  // output rows (the CUDA backend pads a decode step to a batch-size bucket,
  // within info.max_rows), run it more than once, or replay a recording of an
  // earlier run of it (a CUDA graph); it does so only for steps of one row
  // per sequence whose every row is an output row. So `body` must issue
  // backend ops only (no download, synchronize, alloc or free; prepare_batch
  // only in steps of other shapes), issue the same ops for the same step
  // shape, take everything that varies from step to step from the step
  // batch, and be safe to run twice (its K/V writes land where they did).
  virtual void run_step(const Batch& batch, const KvPool& pool, const StepInfo& info,
                        const StepBody& body) {
    (void)info;
    prepare_batch(batch, pool.geom.block_size);
    body(batch);
  }

  // --- block transfers (tiers, copy-on-write) --------------------------------
  // Copies block `src` to block `dst` in every layer.
  virtual void copy_block(KvPool& pool, int32_t src, int32_t dst) = 0;
  // Host buffer layout (geom.block_bytes()): for layer 0..n_layers-1: K then V,
  // each (block_size, n_kv_heads, head_dim) in pool dtype.
  virtual void read_block(const KvPool& pool, int32_t block_id, void* host_dst) = 0;
  // Whether read_block may run on another thread while this one computes
  // (on a block no kernel writes meanwhile). CPU: plain memory reads, yes.
  virtual bool reads_blocks_concurrently() const { return false; }
  virtual void write_block(KvPool& pool, int32_t block_id, const void* host_src) = 0;

  // The same on a logical block's places (KvBlockIds): the global layers at
  // .block, the window layers at .window_block. In a pool without a window
  // group these are the calls above (window ids ignored); with one, copy and
  // read need both ids, and a write with window_block -1 stores the global
  // layers only. A backend with supports_window_group() overrides them.
  virtual void copy_kv_block(KvPool& pool, KvBlockIds src, KvBlockIds dst) {
    check_single_group(pool);
    copy_block(pool, src.block, dst.block);
  }
  virtual void read_kv_block(const KvPool& pool, KvBlockIds ids, void* host_dst) {
    check_single_group(pool);
    read_block(pool, ids.block, host_dst);
  }
  virtual void write_kv_block(KvPool& pool, KvBlockIds ids, const void* host_src) {
    check_single_group(pool);
    write_block(pool, ids.block, host_src);
  }

  // Many blocks in one call (a chain onboarded from, or saved to, the tiers):
  // the same bytes as write_block / read_block on each listed block in list
  // order, each host buffer in read_block's layout. Block ids must be distinct
  // and in range. A backend may move the whole list in a few large copies
  // (CUDA: one copy per layer, side and run of consecutive block ids). The
  // default, which the CPU backend keeps, calls write_block / read_block on each.
  // (Pointer and count, not std::span: the .cu files include this header as C++17.)
  virtual void write_blocks(KvPool& pool, const BlockWrite* blocks, size_t n_blocks) {
    for (size_t i = 0; i < n_blocks; ++i)
      write_kv_block(pool, KvBlockIds{blocks[i].block_id, blocks[i].window_block_id}, blocks[i].host_src);
  }
  virtual void read_blocks(const KvPool& pool, const BlockRead* blocks, size_t n_blocks) {
    for (size_t i = 0; i < n_blocks; ++i)
      read_kv_block(pool, KvBlockIds{blocks[i].block_id, blocks[i].window_block_id}, blocks[i].host_dst);
  }

 protected:
  static void check_single_group(const KvPool& pool) {
    PREFIXD_CHECK(!pool.geom.has_window_group(),
                  "this backend's block transfers have no window group (supports_window_group())");
  }
};

namespace cpu {
enum class CpuIsa : int;  // kernels/cpu/cpu_isa.h
}

// Backends available in this build. The CPU backend runs cpu::plan_for_isa(isa):
// the plan given to cpu::choose_cpu_isa with base `isa`; `isa` for every family
// when the set was named (forced); or else, for the best set this CPU has
// (`auto`), each family on the set cpu::auto_plan() timed fastest.
std::unique_ptr<Backend> make_cpu_backend(int n_threads);
std::unique_ptr<Backend> make_cpu_backend(int n_threads, cpu::CpuIsa isa);


}  // namespace prefixd
