// Prefill attention dispatch of the CUDA backend: cuDNN per sequence where
// a self-checked plan serves its bucket, the simple kernel for the rest
// (prefill_attention.h).
#include "kernels/cuda/prefill_attention.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch_config.h"
#include "kernels/cuda/self_check_memory.h"

#if defined(PREFIXD_HAVE_CUDNN)
#include "kernels/cuda/cudnn/cudnn_api.h"
#include "kernels/cuda/cudnn/cudnn_search.h"
#include "kernels/cuda/cudnn/probe_request.h"
#include "kernels/cuda/cudnn/sdpa_batch.h"
#include "kernels/cuda/cudnn/sdpa_plans.h"
#endif

namespace prefixd::cuda {
namespace {

// The simple kernel over prefill tiles [first_tile, first_tile + n_tiles) of `b`.
void launch_simple_tiles(const AttentionArgs& a, const DeviceBatch& b, int32_t first_tile, int32_t n_tiles,
                         cudaStream_t stream) {
  DeviceBatch sub = b;
  sub.layout.prefill_tiles_off = b.layout.prefill_tiles_off + 2 * first_tile;
  sub.layout.n_prefill_tiles = n_tiles;
  launch_attention_prefill(a, sub, stream);
}

}  // namespace

#if !defined(PREFIXD_HAVE_CUDNN)

// Built without cuDNN's headers: the simple kernel serves every prefill.
struct PrefillAttention::Impl {
  cudaStream_t stream;
  FastPathRegistry* registry;
  void prepare_batch(const Batch&, int32_t) {}
  void run(const AttentionArgs& a, int32_t, const DeviceBatch& b) {
    if (b.layout.n_prefill_tiles == 0) return;
    launch_attention_prefill(a, b, stream);
    registry->count_call(kSimplePrefillPath);
  }
  ChildVerdict check_bucket(const AttentionArgs&, int32_t, int32_t, int32_t) {
    return ChildVerdict{ChildVerdict::Kind::kNotRun, "this build has no cuDNN (its headers were not found)"};
  }
};

PrefillAttention::PrefillAttention(const CudaBackendOptions&, cudaStream_t stream, FastPathRegistry* registry)
    : impl_(new Impl{stream, registry}) {
  const std::string why = "this build has no cuDNN (its headers were not found)";
  registry->declare(kCudnnPrefillPath, false, why);
  registry->declare(kSimplePrefillPath, true, "launch_attention_prefill");
  registry->set_summary("prefill_attention", "none: " + why);
}

#else  // PREFIXD_HAVE_CUDNN

namespace {

// A device buffer that grows on demand. Growing waits for the stream (work
// issued earlier may still use the old buffer); a failed allocation is a Status.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  Status ensure(size_t n_bytes, cudaStream_t stream) {
    if (n_bytes <= bytes) return Status::ok_status();
    PREFIXD_CUDA_CHECK(cudaStreamSynchronize(stream));
    release();
    const size_t want = n_bytes + n_bytes / 4;
    if (cudaError_t e = cudaMalloc(&ptr, want); e != cudaSuccess) {
      cudaGetLastError();
      ptr = nullptr;
      return Status::error("cudaMalloc of " + std::to_string(want) + " bytes: " + cudaGetErrorString(e));
    }
    bytes = want;
    return Status::ok_status();
  }
  void release() {
    if (ptr != nullptr) PREFIXD_CUDA_CHECK(cudaFree(ptr));
    ptr = nullptr;
    bytes = 0;
  }
};

}  // namespace

struct PrefillAttention::Impl {
  cudaStream_t stream = nullptr;
  FastPathRegistry* registry = nullptr;
  std::function<void(const std::string&)> log;
  // Destroyed in reverse: plans before the handle, the handle before the library.
  std::shared_ptr<const CudnnApi> api;  // null: cuDNN unavailable (the registry says why)
  cudnnHandle_t handle = nullptr;
  std::unique_ptr<SdpaPlanCache> plans;
  std::map<const SdpaPlan*, bool> serves;  // a built plan: whether it passed its self-check
  std::set<std::string> logged_classes;
  // Child checks of the buckets (ProbeRequest::key()); null: checked in this process only.
  std::unique_ptr<ChildCheckQueue> probes;
  std::string probe_program;
  bool wait_for_probe = false;
  int device = 0;
  std::set<std::string> logged_probes;  // keys whose child check was announced / whose verdict was logged

  // The current batch.
  std::vector<PrefillSeq> seqs;
  std::vector<int32_t> meta_offsets;  // words of each sequence's metadata in meta_dev; empty: none uploaded
  int32_t block_size = 0;
  int32_t* meta_host = nullptr;       // pinned, meta_host_words int32
  size_t meta_host_words = 0;
  DeviceBuffer meta_dev;              // sdpa_batch.h metadata of every prefill sequence, int32
  cudaEvent_t meta_uploaded = nullptr;
  DeviceBuffer q_scratch;             // (n_tokens + max_q, n_heads * head_dim) pool dtype
  DeviceBuffer o_scratch;             // (n_tokens + max_q, n_heads * head_dim) f32-sized rows
  DeviceBuffer workspace;             // the largest plan workspace

  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    serves.clear();
    plans.reset();
    if (handle) api->Destroy(handle);
    if (meta_host) cudaFreeHost(meta_host);
    if (meta_uploaded) cudaEventDestroy(meta_uploaded);
    meta_dev.release();
    q_scratch.release();
    o_scratch.release();
    workspace.release();
  }

  bool cudnn_on() const { return api != nullptr && registry->enabled(kCudnnPrefillPath); }

  void unavailable(const std::string& why) {
    registry->declare(kCudnnPrefillPath, false, why);
    registry->set_summary("prefill_attention", "none: " + why);
    log("prefill attention: the simple kernel serves every shape; cuDNN not used: " + why);
  }

  void load(const CudaBackendOptions& options) {
    CudnnSearch search;
    search.explicit_lib = options.cudnn_lib == kCudnnAuto ? "" : options.cudnn_lib;
    search.python_prefixes = options.python_prefixes;
    if (cudnn_disabled(search)) return unavailable("turned off (--cudnn-lib off)");
    Result<std::shared_ptr<const CudnnApi>> loaded = load_cudnn(cudnn_library_candidates(search));
    if (!loaded.ok()) return unavailable(loaded.message());
    std::shared_ptr<const CudnnApi> a = loaded.value();
    cudnnHandle_t h = nullptr;
    if (cudnnStatus_t s = a->Create(&h); s != CUDNN_STATUS_SUCCESS)
      return unavailable(a->describe(s, "cudnnCreate (cuDNN " + a->version_string() + ", " + a->library + ")"));
    if (cudnnStatus_t s = a->SetStream(h, stream); s != CUDNN_STATUS_SUCCESS) {
      a->Destroy(h);
      return unavailable(a->describe(s, "cudnnSetStream"));
    }
    if (options.cudnn_probe != kCudnnOff) {
      probe_program = find_probe(options.cudnn_probe);
      if (probe_program.empty()) {
        a->Destroy(h);
        return unavailable("the child-process check program " + std::string(kCudnnProbeProgram) +
                           (options.cudnn_probe.empty() ? " is not beside this program (nor one folder up)"
                                                        : " is not at " + options.cudnn_probe) +
                           "; --cudnn-probe off checks in this process");
      }
      probes = std::make_unique<ChildCheckQueue>(kProbeTimeout);
      wait_for_probe = options.wait_for_cudnn_probe;
      PREFIXD_CUDA_CHECK(cudaGetDevice(&device));
    }
    api = a;
    handle = h;
    PlanTarget target;
    target.handle = h;
    plans = std::make_unique<SdpaPlanCache>(api, target);
    PREFIXD_CUDA_CHECK(cudaEventCreateWithFlags(&meta_uploaded, cudaEventDisableTiming));
    registry->declare(kCudnnPrefillPath, true, "cudnn " + api->version_string() + " (" + api->library + ")");
    registry->set_summary("prefill_attention", "cudnn " + api->version_string());
    log("prefill attention: cuDNN " + api->version_string() + " loaded from " + api->library +
        "; each plan bucket serves once it passes its self-check" +
        (probes ? " in a child process (" + probe_program + ") and in this one" : " (in this process only)"));
  }

  // A child check's time limit: loading cuDNN, a CUDA context, one plan's
  // build (NVRTC) and one run, seconds each.
  static constexpr std::chrono::milliseconds kProbeTimeout{120000};

  // The probe program: `named` when it is executable; for "" the one beside
  // this process's executable, else one folder up (tests/ of a build). "" when none.
  static std::string find_probe(const std::string& named) {
    namespace fs = std::filesystem;
    auto runnable = [](const fs::path& p) { return access(p.c_str(), X_OK) == 0 && !fs::is_directory(p); };
    if (!named.empty()) return runnable(named) ? named : "";
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return "";
    for (const fs::path& dir : {exe.parent_path(), exe.parent_path().parent_path()})
      if (runnable(dir / kCudnnProbeProgram)) return (dir / kCudnnProbeProgram).string();
    return "";
  }

  // Whether the child check of bucket `s` with `a`'s scale and window has
  // passed; starts it when none runs. A failed or crashed child switches
  // cuDNN off for the process.
  bool probe_passed(const SdpaShape& s, const AttentionArgs& a) {
    ProbeRequest r;
    r.device = device;
    r.cudnn_library = api->library;
    r.shape = s;
    r.shape.out_dtype = s.dtype;
    r.scale = a.scale;
    r.window_tokens = a.window_tokens;
    const std::string key = r.key();
    const std::optional<ChildVerdict> v =
        probes->verdict(key, [&] { return probe_argv(probe_program, r); }, wait_for_probe);
    const bool first = logged_probes.insert(v ? "verdict " + key : "pending " + key).second;
    if (!v) {
      if (first) log("cuDNN plan " + key + ": checking in a child process; the simple kernel serves it meanwhile");
      return false;
    }
    if (v->failed()) {
      SelfCheckVerdict failed;
      failed.path = kCudnnPrefillPath;
      failed.shape = key + " (child process)";
      failed.error = v->detail;
      registry->record(failed);
      registry->set_summary("prefill_attention", "none: cuDNN's child check failed on " + key);
      log("cuDNN plan " + key + ": the child process check FAILED (" + v->detail +
          "); cuDNN switched off for this process, the simple kernel serves");
    } else if (first) {
      log("cuDNN plan " + key + ": child process check " + (v->passed() ? "passed" : "did not run") + " (" +
          v->detail + ")" + (v->passed() ? "" : "; the simple kernel serves this bucket"));
    }
    return v->passed();
  }

  void prepare_batch(const Batch& batch, int32_t bs) {
    seqs = prefill_seqs(batch);
    block_size = bs;
    meta_offsets.clear();
    if (seqs.empty() || !cudnn_on()) return;
    std::vector<int32_t> offsets;
    size_t words = 0;
    for (const PrefillSeq& p : seqs) {
      offsets.push_back(static_cast<int32_t>(words));
      words += sdpa_meta_words(static_cast<int32_t>(ceil_div(p.max_kv(), bs)));
    }
    // The previous batch's upload must have read the pinned buffer.
    PREFIXD_CUDA_CHECK(cudaEventSynchronize(meta_uploaded));
    if (words > meta_host_words) {
      if (meta_host) PREFIXD_CUDA_CHECK(cudaFreeHost(meta_host));
      meta_host_words = words + words / 4;
      PREFIXD_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&meta_host), meta_host_words * sizeof(int32_t),
                                       cudaHostAllocDefault));
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int32_t table_len = static_cast<int32_t>(ceil_div(seqs[i].max_kv(), bs));
      write_sdpa_meta(seqs[i], batch.block_tables.data() + seqs[i].table_start, bs, table_len,
                      meta_host + offsets[i]);
    }
    if (Status s = meta_dev.ensure(words * sizeof(int32_t), stream); !s.ok()) {
      log("prefill attention: no device memory for cuDNN's sequence data (" + s.message() +
          "); the simple kernel serves this batch");
      return;
    }
    PREFIXD_CUDA_CHECK(cudaMemcpyAsync(meta_dev.ptr, meta_host, words * sizeof(int32_t), cudaMemcpyHostToDevice,
                                       stream));
    PREFIXD_CUDA_CHECK(cudaEventRecord(meta_uploaded, stream));
    meta_offsets = std::move(offsets);
  }

  static SdpaShape shape_of(const AttentionArgs& a, int32_t n_pool_blocks, const PrefillSeq& p) {
    SdpaShape s;
    s.dtype = a.kv_dtype;
    s.n_heads = a.n_heads;
    s.n_kv_heads = a.n_kv_heads;
    s.head_dim = a.head_dim;
    s.block_size = a.block_size;
    s.n_pool_blocks = n_pool_blocks;
    s.windowed = a.window_tokens > 0;
    s.max_q = p.max_q();
    s.max_kv = p.max_kv();
    return s;
  }

  void log_class_once(const SdpaShape& s, const std::string& path) {
    if (logged_classes.insert(s.shape_class()).second)
      log("prefill attention " + s.shape_class() + ": " + path);
  }

  // The plan serving `s`, building and self-checking it on first use; null
  // when cuDNN refuses the shape or its check did not pass.
  const SdpaPlan* plan_for(const SdpaShape& s, const AttentionArgs& a) {
    const std::string limit = sdpa_known_limits(s, api->version);
    if (!limit.empty()) {
      log_class_once(s, "the simple kernel (" + limit + ")");
      return nullptr;
    }
    log_class_once(s, "cuDNN " + api->version_string() + " per bucket, the simple kernel where a bucket's plan is refused");
    if (probes && !probe_passed(s, a)) return nullptr;
    bool built = false;
    const SdpaPlanCache::Entry& e = plans->get(s, &built);
    if (e.plan == nullptr) {
      if (built) log("cuDNN plan " + s.describe() + " refused (" + e.refusal + "): the simple kernel serves it");
      return nullptr;
    }
    if (built) serves[e.plan.get()] = self_check(*e.plan, a);
    return serves[e.plan.get()] ? e.plan.get() : nullptr;
  }

  // Enqueues the cuDNN executions of seqs[i] with plans[i] != null and copies
  // their rows to a.out. `meta` holds each sequence's words at meta_offsets[i].
  Status execute(const AttentionArgs& a, const std::vector<PrefillSeq>& ss, const std::vector<const SdpaPlan*>& ps,
                 const int32_t* meta, const std::vector<int32_t>& offsets, int32_t n_tokens) {
    const int64_t row = int64_t(a.n_heads) * a.head_dim;  // elements per q/out row
    int32_t max_q = 0;
    int64_t ws_bytes = 0;
    for (const SdpaPlan* p : ps) {
      if (p == nullptr) continue;
      max_q = std::max(max_q, p->shape.max_q);
      ws_bytes = std::max(ws_bytes, p->workspace_bytes);
    }
    const size_t rows = size_t(n_tokens) + size_t(max_q);
    if (Status s = q_scratch.ensure(rows * row * dtype_bytes(a.kv_dtype), stream); !s.ok()) return s;
    if (Status s = o_scratch.ensure(rows * row * sizeof(float), stream); !s.ok()) return s;
    if (ws_bytes > 0)
      if (Status s = workspace.ensure(size_t(ws_bytes), stream); !s.ok()) return s;
    launch_convert_f32(a.q, q_scratch.ptr, a.kv_dtype, int64_t(n_tokens) * row, stream);
    char* q16 = static_cast<char*>(q_scratch.ptr);
    char* o = static_cast<char*>(o_scratch.ptr);  // a sequence's rows at q_start * row * 4 bytes
    for (size_t i = 0; i < ss.size(); ++i) {  // in row order: a plan may write past its rows, never before
      if (ps[i] == nullptr) continue;
      SdpaArgs x;
      x.q = q16 + int64_t(ss[i].q_start) * row * int64_t(dtype_bytes(a.kv_dtype));
      x.k_pool = a.k_pool;
      x.v_pool = a.v_pool;
      x.out = o + int64_t(ss[i].q_start) * row * int64_t(sizeof(float));
      x.meta = meta + offsets[i];
      x.workspace = ws_bytes > 0 ? workspace.ptr : nullptr;
      x.scale = a.scale;
      x.window = a.window_tokens;
      if (Status s = execute_sdpa_plan(*api, handle, *ps[i], x); !s.ok()) return s;
    }
    // Rows to a.out: F32 plans as runs of rows, pool-dtype plans widened per sequence.
    std::vector<uint8_t> f32_rows(ss.size());
    for (size_t i = 0; i < ss.size(); ++i) {
      if (ps[i] == nullptr) continue;
      if (ps[i]->shape.out_dtype == DType::F32) {
        f32_rows[i] = 1;
        continue;
      }
      launch_convert_to_f32(o + int64_t(ss[i].q_start) * row * int64_t(sizeof(float)), ps[i]->shape.out_dtype,
                            a.out + int64_t(ss[i].q_start) * row, int64_t(ss[i].n_q) * row, stream);
    }
    for (const IndexRun& r : sequence_runs(ss, f32_rows, false))
      PREFIXD_CUDA_CHECK(cudaMemcpyAsync(a.out + int64_t(r.first) * row, o + int64_t(r.first) * row * int64_t(sizeof(float)),
                                         size_t(r.count) * row * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return Status::ok_status();
  }

  void run(const AttentionArgs& a, int32_t n_pool_blocks, const DeviceBatch& b) {
    if (b.layout.n_prefill_tiles == 0) return;
    const int32_t n_tiles = seqs.empty() ? 0 : seqs.back().first_tile + seqs.back().n_tiles;
    PREFIXD_CHECK(n_tiles == b.layout.n_prefill_tiles, "prefill attention: batch differs from prepare_batch's");
    std::vector<const SdpaPlan*> chosen(seqs.size(), nullptr);
    if (cudnn_on() && a.kv_dtype == DType::F32) {
      log_class_once(shape_of(a, n_pool_blocks, seqs.front()), "the simple kernel (cuDNN takes BF16 or F16 pools)");
    } else if (cudnn_on() && !meta_offsets.empty()) {
      for (size_t i = 0; i < seqs.size() && cudnn_on(); ++i)
        chosen[i] = plan_for(shape_of(a, n_pool_blocks, seqs[i]), a);
      if (!cudnn_on()) std::fill(chosen.begin(), chosen.end(), nullptr);  // a self-check just failed
    } else {
      const FastPathReport r = registry->report();
      std::string why = "cuDNN unavailable";
      for (const FastPathState& p : r.paths)
        if (p.name == kCudnnPrefillPath && !p.detail.empty()) why = p.detail;
      log_class_once(shape_of(a, n_pool_blocks, seqs.front()), "the simple kernel (" + why + ")");
    }
    std::vector<uint8_t> simple(seqs.size(), 1);
    int64_t n_cudnn = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      simple[i] = chosen[i] == nullptr;
      n_cudnn += chosen[i] != nullptr;
    }
    if (n_cudnn > 0) {
      const Status s = execute(a, seqs, chosen, static_cast<const int32_t*>(meta_dev.ptr), meta_offsets,
                               b.layout.n_tokens);
      if (s.ok()) registry->count_call(kCudnnPrefillPath, n_cudnn);
      if (!s.ok()) {
        registry->disable(kCudnnPrefillPath, "execution failed: " + s.message());
        registry->set_summary("prefill_attention", "none: cuDNN execution failed");
        log("prefill attention: cuDNN execution failed (" + s.message() +
            "); the simple kernel serves from now on");
        std::fill(simple.begin(), simple.end(), 1);
      }
    }
    for (const IndexRun& r : sequence_runs(seqs, simple, true)) {
      launch_simple_tiles(a, b, r.first, r.count, stream);
      registry->count_call(kSimplePrefillPath);
    }
  }

  ChildVerdict check_bucket(const AttentionArgs& layer, int32_t n_pool_blocks, int32_t max_q, int32_t max_kv) {
    using Kind = ChildVerdict::Kind;
    if (api == nullptr) return ChildVerdict{Kind::kNotRun, "cuDNN not loaded: " + summary()};
    PrefillSeq p;
    p.n_q = max_q;
    p.kv_len = max_kv;
    SdpaShape s = shape_of(layer, n_pool_blocks, p);
    if (s.max_q != max_q || s.max_kv != max_kv)
      return ChildVerdict{Kind::kNotRun, "q<=" + std::to_string(max_q) + " kv<=" + std::to_string(max_kv) +
                                             " is not a bucket (" + s.describe() + ")"};
    if (const std::string limit = sdpa_known_limits(s, api->version); !limit.empty())
      return ChildVerdict{Kind::kNotRun, s.describe() + ": " + limit};
    const SdpaPlanCache::Entry& e = plans->get(s);
    if (e.plan == nullptr) return ChildVerdict{Kind::kNotRun, s.describe() + " refused by cuDNN: " + e.refusal};
    const size_t n_before = registry->report().self_checks.size();
    const bool passed = self_check(*e.plan, layer);
    const FastPathReport r = registry->report();
    if (r.self_checks.size() == n_before)
      return ChildVerdict{Kind::kNotRun, s.describe() + ": the self-check could not run (device memory)"};
    const SelfCheckVerdict& v = r.self_checks.back();
    char figures[128];
    std::snprintf(figures, sizeof(figures), "max |error| %.3g, tolerance %.3g", v.max_error, v.tolerance);
    return ChildVerdict{passed ? Kind::kPassed : Kind::kFailed,
                        s.describe() + ": " + figures + (passed ? "" : "; " + v.error)};
  }

  std::string summary() const {
    for (const auto& [family, line] : registry->report().summary)
      if (family == "prefill_attention") return line;
    return "";
  }

  // --- self-check -------------------------------------------------------------

  // Two sequences in the bucket of `plan` over a pool of shuffled blocks:
  // one a suffix of max_q - 3 rows over max_kv - 1 keys, one cold with
  // max_q / 2 + 5 rows (both end in a partial block when block_size > 1).
  struct CheckBatch {
    Batch batch;
    std::vector<PrefillSeq> seqs;
    int32_t n_blocks = 0;
  };
  static CheckBatch check_batch(const SdpaShape& s) {
    CheckBatch c;
    const int32_t bs = s.block_size;
    const int32_t nq[2] = {s.max_q - 3, s.max_q / 2 + 5};
    const int32_t kv[2] = {s.max_kv - 1, s.max_q / 2 + 5};
    const int32_t nb[2] = {int32_t(ceil_div(kv[0], bs)), int32_t(ceil_div(kv[1], bs))};
    c.n_blocks = nb[0] + nb[1] + 3;
    std::vector<int32_t> ids(c.n_blocks);
    for (int32_t i = 0; i < c.n_blocks; ++i) ids[i] = i;
    std::mt19937 rng(1234);
    std::shuffle(ids.begin(), ids.end(), rng);
    int32_t row = 0, next_id = 0;
    for (int k = 0; k < 2; ++k) {
      BatchSeq q;
      q.q_start = row;
      q.n_q = nq[k];
      q.pos0 = kv[k] - nq[k];
      q.table_start = static_cast<int32_t>(c.batch.block_tables.size());
      q.n_table = nb[k];
      for (int32_t j = 0; j < nb[k]; ++j) c.batch.block_tables.push_back(ids[next_id++]);
      for (int32_t r = 0; r < nq[k]; ++r) {
        const int32_t pos = q.pos0 + r;
        c.batch.tokens.push_back(0);
        c.batch.positions.push_back(pos);
        c.batch.slots.push_back(c.batch.block_tables[q.table_start + pos / bs] * bs + pos % bs);
      }
      c.batch.seqs.push_back(q);
      row += nq[k];
    }
    c.seqs = prefill_seqs(c.batch);
    return c;
  }

  // Runs `plan` once against the simple kernel (prefill_attention.h); true
  // when it passed. A check that cannot run (no memory) leaves the bucket to
  // the simple kernel without a verdict.
  // Stays long: one test case written out (pool, Q, batch, both kernels, compare);
  // each buffer is set up once, with its shape, where it is used.
  bool self_check(const SdpaPlan& plan, const AttentionArgs& layer) {
    const SdpaShape& s = plan.shape;
    const CheckBatch cb = check_batch(s);
    PREFIXD_CHECK(validate_batch(cb.batch, s.block_size).ok(), "self-check batch");
    const PackedBatch packed = pack_batch(cb.batch, s.block_size);
    const int64_t row = int64_t(s.n_heads) * s.head_dim;
    const int64_t n_tokens = cb.batch.n_tokens();
    const size_t pool_elems = size_t(cb.n_blocks) * s.block_size * s.n_kv_heads * s.head_dim;
    std::mt19937 rng(s.max_q * 131 + s.max_kv);
    std::vector<uint16_t> k_bits(pool_elems), v_bits(pool_elems);  // (n_blocks, bs, kv_heads, d) pool dtype
    std::vector<float> q(size_t(n_tokens) * row);                   // (n_tokens, heads * d) f32, exact in the pool dtype
    float value = 0, max_abs_v = 0;
    for (uint16_t& x : k_bits) x = random_half(rng, s.dtype, &value);
    for (uint16_t& x : v_bits) {
      x = random_half(rng, s.dtype, &value);
      max_abs_v = std::max(max_abs_v, std::fabs(value));
    }
    for (float& x : q) random_half(rng, s.dtype, &x);
    std::vector<int32_t> meta;  // both sequences' sdpa_batch.h words
    std::vector<int32_t> offsets;
    for (const PrefillSeq& p : cb.seqs) {
      offsets.push_back(static_cast<int32_t>(meta.size()));
      meta.resize(meta.size() + sdpa_meta_words(s.table_len()));
      write_sdpa_meta(p, cb.batch.block_tables.data() + p.table_start, s.block_size, s.table_len(),
                      meta.data() + offsets.back());
    }
    CheckAllocations mem(stream);
    void *dk = nullptr, *dv = nullptr, *dq = nullptr, *dwords = nullptr, *dmeta = nullptr, *dout = nullptr;
    const std::vector<float> zeros(size_t(n_tokens) * row, 0.0f);
    Status st = mem.upload(k_bits.data(), k_bits.size() * 2, &dk);
    if (st.ok()) st = mem.upload(v_bits.data(), v_bits.size() * 2, &dv);
    if (st.ok()) st = mem.upload(q.data(), q.size() * sizeof(float), &dq);
    if (st.ok()) st = mem.upload(packed.words.data(), packed.words.size() * sizeof(int32_t), &dwords);
    if (st.ok()) st = mem.upload(meta.data(), meta.size() * sizeof(int32_t), &dmeta);
    if (st.ok()) st = mem.upload(zeros.data(), zeros.size() * sizeof(float), &dout);
    if (!st.ok()) {
      log("cuDNN plan " + s.describe() + ": self-check could not run (" + st.message() +
          "); the simple kernel serves this bucket");
      return false;
    }
    const AttentionArgs a = check_attention_args(layer, dk, dv, dq, dout);
    const DeviceBatch db = check_device_batch(dwords, packed);
    auto download = [&](std::vector<float>* out) {
      return mem.download_and_clear(a.out, zeros.size(), out, "cuDNN self-check", log);
    };
    const CheckRun simple = [&](std::vector<float>* out) {
      launch_attention_prefill(a, db, stream);
      return download(out);
    };
    const CheckRun fast = [&](std::vector<float>* out) {
      const std::vector<const SdpaPlan*> ps(cb.seqs.size(), &plan);
      if (Status e = execute(a, cb.seqs, ps, static_cast<const int32_t*>(dmeta), offsets, int32_t(n_tokens)); !e.ok())
        return e;
      return download(out);
    };
    const double tol = attention_tolerance(s.dtype, max_abs_v);
    const SelfCheckVerdict v = run_self_check(*registry, kCudnnPrefillPath, s.describe(), tol, fast, simple);
    char figures[128];
    std::snprintf(figures, sizeof(figures), "max |error| %.3g, tolerance %.3g", v.max_error, v.tolerance);
    log("cuDNN plan " + s.describe() + ": engine " + std::to_string(plan.engine) + ", " +
        dtype_name(s.out_dtype) + " output, built in " + std::to_string(int(plan.build_ms)) + " ms; self-check " +
        (v.passed ? "passed" : "FAILED") + " (" + figures + (v.passed ? "" : "; " + v.error) + ")");
    if (!v.passed) {
      registry->set_summary("prefill_attention", "none: cuDNN self-check failed on " + s.describe());
      log("prefill attention: cuDNN switched off for this process; the simple kernel serves");
    }
    return v.passed;
  }
};

PrefillAttention::PrefillAttention(const CudaBackendOptions& options, cudaStream_t stream,
                                   FastPathRegistry* registry)
    : impl_(new Impl) {
  impl_->stream = stream;
  impl_->registry = registry;
  impl_->log = info_log_or_stderr(options.log);
  registry->declare(kSimplePrefillPath, true, "launch_attention_prefill");
  impl_->load(options);
}

#endif  // PREFIXD_HAVE_CUDNN

PrefillAttention::~PrefillAttention() = default;

void PrefillAttention::prepare_batch(const Batch& batch, int32_t block_size) {
  impl_->prepare_batch(batch, block_size);
}

void PrefillAttention::run(const AttentionArgs& a, int32_t n_pool_blocks, const DeviceBatch& b) {
  impl_->run(a, n_pool_blocks, b);
}

ChildVerdict PrefillAttention::check_bucket(const AttentionArgs& layer, int32_t n_pool_blocks, int32_t max_q,
                                            int32_t max_kv) {
  return impl_->check_bucket(layer, n_pool_blocks, max_q, max_kv);
}

}  // namespace prefixd::cuda
