// The flash-decode self-check (decode_self_check.h).
#include "kernels/cuda/decode_self_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/decode_check_batch.h"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/self_check_memory.h"

namespace prefixd::cuda {

int32_t decode_splits(const AttentionArgs& a, bool flash, int32_t n_seqs, int32_t max_kv_len, int32_t n_sms) {
  const FlashDecodeShape f = flash_decode_shape(a.kv_dtype, a.n_heads, a.n_kv_heads, a.head_dim);
  const int64_t blocks_per_split = int64_t(n_seqs) * (flash ? a.n_kv_heads * f.head_groups : a.n_heads);
  return decode_split_count(blocks_per_split, max_kv_len, n_sms);
}

DecodeSelfCheck::DecodeSelfCheck(cudaStream_t stream, int32_t n_sms, FastPathRegistry* registry,
                                 std::function<void(const std::string&)> log, bool corrupt_for_test)
    : stream_(stream), n_sms_(n_sms), registry_(registry), log_(std::move(log)),
      corrupt_for_test_(corrupt_for_test) {
  registry_->declare(kFlashDecodePath, true,
                     "launch_attention_decode (attention_decode.cu), self-checked per shape class on first use");
  registry_->declare(kSimpleDecodePath, true, "launch_attention_decode_simple");
  registry_->set_summary("decode_attention", "flash decode where its self-check passed, else the simple kernel");
}

bool DecodeSelfCheck::flash_serves(const AttentionArgs& layer, bool capturing) {
  if (!registry_->enabled(kFlashDecodePath)) return false;
  char shape[160];
  std::snprintf(shape, sizeof(shape), "%s %d/%d heads d%d block %d window %d", dtype_name(layer.kv_dtype),
                layer.n_heads, layer.n_kv_heads, layer.head_dim, layer.block_size, layer.window_tokens);
  auto it = verdicts_.find(shape);
  if (it != verdicts_.end()) return it->second && registry_->enabled(kFlashDecodePath);
  if (capturing) return false;  // no check inside a capture: the simple kernel, unchecked class
  const bool passed = check(layer, shape);
  verdicts_.emplace(shape, passed);
  return passed && registry_->enabled(kFlashDecodePath);
}

// Stays long: one test case written out (pool, Q, batch, both kernels, compare);
// each buffer is set up once, with its shape, where it is used.
bool DecodeSelfCheck::check(const AttentionArgs& layer, const std::string& shape_class) {
  const int32_t bs = layer.block_size;
  const DecodeCheckBatch cb = decode_check_batch(bs);
  PREFIXD_CHECK(validate_batch(cb.batch, bs).ok(), "flash decode self-check batch");
  const PackedBatch packed = pack_batch(cb.batch, bs);
  const int32_t n_seqs = static_cast<int32_t>(cb.batch.seqs.size());
  PREFIXD_CHECK(packed.n_decode_seqs == n_seqs, "the check batch is all decode rows");
  const int64_t row = int64_t(layer.n_heads) * layer.head_dim;
  const size_t pool_elems = size_t(cb.n_blocks) * bs * layer.n_kv_heads * layer.head_dim;
  const size_t elem_bytes = dtype_bytes(layer.kv_dtype);
  std::mt19937 rng(uint32_t(layer.n_heads * 977 + layer.head_dim * 31 + bs));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // K and V (n_blocks, bs, kv_heads, d) in the pool dtype, values in [-1, 1].
  std::vector<uint8_t> k_bytes(pool_elems * elem_bytes), v_bytes(pool_elems * elem_bytes);
  float max_abs_v = 0;
  for (std::vector<uint8_t>* pool : {&k_bytes, &v_bytes}) {
    for (size_t i = 0; i < pool_elems; ++i) {
      float value = 0;
      if (layer.kv_dtype == DType::F32) {
        value = u(rng);
        std::memcpy(pool->data() + i * 4, &value, 4);
      } else {
        const uint16_t bits = random_half(rng, layer.kv_dtype, &value);
        std::memcpy(pool->data() + i * 2, &bits, 2);
      }
      if (pool == &v_bytes) max_abs_v = std::max(max_abs_v, std::fabs(value));
    }
  }
  std::vector<float> q(size_t(n_seqs) * row);  // (n_seqs, heads * d) f32
  for (float& x : q) x = u(rng);
  const int32_t splits_flash = decode_splits(layer, true, n_seqs, cb.max_kv_len, n_sms_);
  const int32_t splits_simple = decode_splits(layer, false, n_seqs, cb.max_kv_len, n_sms_);
  const size_t ws_bytes = std::max(decode_workspace_bytes(n_seqs, layer.n_heads, layer.head_dim, splits_flash),
                                   decode_workspace_bytes(n_seqs, layer.n_heads, layer.head_dim, splits_simple));
  const std::vector<float> zeros(std::max<size_t>(q.size(), ws_bytes / sizeof(float)), 0.0f);

  CheckAllocations mem(stream_);
  void *dk = nullptr, *dv = nullptr, *dq = nullptr, *dwords = nullptr, *dout = nullptr, *dws = nullptr;
  Status st = mem.upload(k_bytes.data(), k_bytes.size(), &dk);
  if (st.ok()) st = mem.upload(v_bytes.data(), v_bytes.size(), &dv);
  if (st.ok()) st = mem.upload(q.data(), q.size() * sizeof(float), &dq);
  if (st.ok()) st = mem.upload(packed.words.data(), packed.words.size() * sizeof(int32_t), &dwords);
  if (st.ok()) st = mem.upload(zeros.data(), q.size() * sizeof(float), &dout);
  if (st.ok()) st = mem.upload(zeros.data(), ws_bytes, &dws);
  if (!st.ok()) {
    // Not a verdict: the class is served by the simple kernel, the path stays on.
    log_("flash decode " + shape_class + ": self-check could not run (" + st.message() +
         "); the simple kernel serves this class");
    return false;
  }
  const AttentionArgs a = check_attention_args(layer, dk, dv, dq, dout);
  const DeviceBatch db = check_device_batch(dwords, packed);
  float* ws = ws_bytes ? static_cast<float*>(dws) : nullptr;
  auto download = [&](std::vector<float>* out) {
    return mem.download_and_clear(a.out, q.size(), out, "flash decode self-check", log_);
  };
  const CheckRun simple = [&](std::vector<float>* out) {
    launch_attention_decode_simple(a, db, splits_simple, ws, stream_);
    return download(out);
  };
  const CheckRun fast = [&](std::vector<float>* out) {
    launch_attention_decode(a, db, splits_flash, ws, stream_);
    Status s = download(out);
    if (corrupt_for_test_ && !out->empty()) (*out)[0] += 1.0f;
    return s;
  };
  const double tol = attention_tolerance(DType::F32, max_abs_v);
  const SelfCheckVerdict v = run_self_check(*registry_, kFlashDecodePath, shape_class, tol, fast, simple);
  char figures[128];
  std::snprintf(figures, sizeof(figures), "max |error| %.3g, tolerance %.3g, %d splits", v.max_error, v.tolerance,
                splits_flash);
  log_("flash decode " + shape_class + ": self-check " + (v.passed ? "passed" : "FAILED") + " (" + figures +
       (v.passed ? "" : "; " + v.error) + ")");
  if (!v.passed) {
    registry_->set_summary("decode_attention", "simple kernel: flash decode's self-check failed on " + shape_class);
    log_("decode attention: flash decode switched off for this process; the simple kernel serves");
  }
  return v.passed;
}

}  // namespace prefixd::cuda
