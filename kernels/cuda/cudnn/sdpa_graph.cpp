// Building, finalizing and executing the paged attention graph (sdpa_graph.h).
#include "kernels/cuda/cudnn/sdpa_graph.h"

#include <chrono>
#include <limits>

namespace prefixd::cuda {
namespace {

// Unique ids of the graph's non-virtual tensors (the variant pack's keys).
enum : int64_t {
  kUidQ = 1,
  kUidK = 2,
  kUidV = 3,
  kUidO = 4,
  kUidSeqQ = 5,
  kUidSeqKv = 6,
  kUidPageTableK = 7,
  kUidPageTableV = 8,
  kUidScale = 9,
  kUidNegInf = 10,
  kUidWindow = 11,
  kUidFirstVirtual = 100,
};

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
  }
  return CUDNN_DATA_FLOAT;
}

// What masked scores become: -inf, or the lowest float before 9.10 (as
// cudnn-frontend does for those versions).
float masked_score(size_t version) {
  return version < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

struct Tensor {
  cudnnBackendDescriptor_t d = nullptr;
  int64_t uid = 0;
};

// Builds descriptors, keeping each in `keep`; the first failure is kept in
// `status` and every later call does nothing.
class GraphBuilder {
 public:
  GraphBuilder(const CudnnApi& api, std::vector<CudnnDescriptor>* keep) : api_(api), keep_(keep) {}

  Status status;
  std::vector<cudnnBackendDescriptor_t> ops;

  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what) {
    if (!status.ok()) return nullptr;
    cudnnBackendDescriptor_t d = nullptr;
    if (check(api_.BackendCreateDescriptor(type, &d), what)) keep_->emplace_back(&api_, d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values, const char* what) {
    if (!status.ok()) return;
    check(api_.BackendSetAttribute(d, name, type, count, values), what);
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                const char* what) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  void finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (!status.ok()) return;
    check(api_.BackendFinalize(d), what);
  }

  Tensor tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, cudnnDataType_t type,
                bool is_virtual, int64_t uid = 0, bool by_value = false) {
    Tensor t;
    t.uid = uid != 0 ? uid : next_virtual_++;
    t.d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    const int64_t alignment = 16;
    set(t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data(), "tensor dims");
    set(t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data(), "tensor strides");
    set(t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, "tensor uid");
    set(t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
    set(t.d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value) set(t.d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    finalize(t.d, "tensor");
    return t;
  }
  // A by-value scalar (its value is given at execution).
  Tensor scalar(cudnnDataType_t type, int64_t uid) { return tensor({1, 1, 1, 1}, {1, 1, 1, 1}, type, false, uid, true); }
  // A virtual tensor shaped like `like` (dims, strides) in `type`.
  Tensor like(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, cudnnDataType_t type) {
    return tensor(dims, strides, type, true);
  }

  // y = mode(x[, b][, t]); `axis` >= 0 sets the pointwise axis (GEN_INDEX,
  // and the broadcast adds of the masks, as cudnn-frontend sets them).
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, const Tensor& x, const Tensor* b,
                 const Tensor* t, const Tensor& y, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "pointwise precision");
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(pw, "pointwise");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise op desc");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.d, "pointwise x");
    if (b != nullptr) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->d, "pointwise b");
    if (t != nullptr) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->d, "pointwise t");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.d, "pointwise y");
    const float one = 1.0f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
    finalize(op, "pointwise op");
    ops.push_back(op);
  }

  void reduction(cudnnReduceTensorOp_t mode, const Tensor& x, const Tensor& y) {
    cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction type");
    finalize(r, "reduction");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction op desc");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.d, "reduction x");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.d, "reduction y");
    finalize(op, "reduction op");
    ops.push_back(op);
  }

  // c = a·b with F32 accumulation; the overrides give the actual M, N, K.
  void matmul(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor* m_override,
              const Tensor* n_override, const Tensor* k_override) {
    cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul type");
    finalize(mm, "matmul");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.d, "matmul a");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.d, "matmul b");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.d, "matmul c");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul desc");
    if (m_override) set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override->d, "matmul m");
    if (n_override) set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override->d, "matmul n");
    if (k_override) set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override->d, "matmul k");
    finalize(op, "matmul op");
    ops.push_back(op);
  }

  void paged_load(const Tensor& container, const Tensor& seq_len, const Tensor& table, const Tensor& y) {
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, "paged load");
    set_desc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, container.d, "paged load container");
    set_desc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, seq_len.d, "paged load lengths");
    set_desc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, table.d, "paged load table");
    set_desc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, y.d, "paged load y");
    finalize(op, "paged load");
    ops.push_back(op);
  }

 private:
  bool check(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS) return true;
    if (status.ok()) status = Status::error(api_.describe(s, what));
    return false;
  }

  const CudnnApi& api_;
  std::vector<CudnnDescriptor>* keep_;
  int64_t next_virtual_ = kUidFirstVirtual;
};

// The operations of sdpa_graph.h's graph, appended to g.ops.
// Stays long: the graph's tensors and operations in the order cuDNN runs them
// (Q, Kᵀ, masks, softmax, P·V), each a commented paragraph; split, the tensor uids
// would pass between the pieces.
void add_attention_ops(GraphBuilder& g, const SdpaShape& s) {
  const int64_t hq = s.n_heads, hk = s.n_kv_heads, d = s.head_dim, sq = s.max_q, skv = s.max_kv;
  const int64_t bs = s.block_size, nb = s.n_pool_blocks, tbl = s.table_len();
  const cudnnDataType_t io = cudnn_type(s.dtype), f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32,
                        boolean = CUDNN_DATA_BOOLEAN;
  // Q, O: rows of the batch, (1, hq, sq, d) with row stride hq * d.
  const std::vector<int64_t> qo_dims = {1, hq, sq, d}, qo_strides = {sq * hq * d, d, hq * d, 1};
  const Tensor q = g.tensor(qo_dims, qo_strides, io, false, kUidQ);
  const Tensor o = g.tensor(qo_dims, qo_strides, cudnn_type(s.out_dtype), false, kUidO);
  // The pools as containers (blocks, kv_heads, block_size, d) over the (blocks, block_size, kv_heads, d) layout.
  const std::vector<int64_t> pool_dims = {nb, hk, bs, d}, pool_strides = {bs * hk * d, d, hk * d, 1};
  const Tensor k_pool = g.tensor(pool_dims, pool_strides, io, false, kUidK);
  const Tensor v_pool = g.tensor(pool_dims, pool_strides, io, false, kUidV);
  const Tensor seq_q = g.tensor({1, 1, 1, 1}, {1, 1, 1, 1}, i32, false, kUidSeqQ);
  const Tensor seq_kv = g.tensor({1, 1, 1, 1}, {1, 1, 1, 1}, i32, false, kUidSeqKv);
  const Tensor table_k = g.tensor({1, 1, tbl, 1}, {tbl, tbl, 1, 1}, i32, false, kUidPageTableK);
  const Tensor table_v = g.tensor({1, 1, tbl, 1}, {tbl, tbl, 1, 1}, i32, false, kUidPageTableV);
  const Tensor scale = g.scalar(f32, kUidScale);
  const Tensor neg_inf = g.scalar(f32, kUidNegInf);

  // Kᵀ (1, hk, d, skv) from the pool.
  const Tensor kt = g.like({1, hk, d, skv}, {d * skv * hk, d * skv, 1, d}, io);
  g.paged_load(k_pool, seq_kv, table_k, kt);

  const std::vector<int64_t> sd = {1, hq, sq, skv}, ss = {hq * sq * skv, sq * skv, skv, 1};
  const Tensor scores = g.like(sd, ss, f32);
  g.matmul(q, kt, scores, &seq_q, &seq_kv, nullptr);
  const Tensor scaled = g.like(sd, ss, f32);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, scores, &scale, nullptr, scaled);

  // Padding: row < SEQ_Q and column < SEQ_KV.
  const Tensor row = g.like(sd, ss, i32), col = g.like(sd, ss, i32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, scaled, nullptr, nullptr, row, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, scaled, nullptr, nullptr, col, 3);
  const Tensor row_in = g.like(sd, ss, boolean), col_in = g.like(sd, ss, boolean), in = g.like(sd, ss, boolean);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, row, &seq_q, nullptr, row_in);
  g.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, col, &seq_kv, nullptr, col_in);
  g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, boolean, row_in, &col_in, nullptr, in);
  const Tensor padded = g.like(sd, ss, f32);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, scaled, &neg_inf, &in, padded);

  // Bottom-right causal: row + SEQ_KV - SEQ_Q >= column.
  const Tensor row2 = g.like(sd, ss, i32), col2 = g.like(sd, ss, i32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, padded, nullptr, nullptr, row2, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, padded, nullptr, nullptr, col2, 3);
  const Tensor row_kv = g.like(sd, ss, i32), last_key = g.like(sd, ss, i32);
  g.pointwise(CUDNN_POINTWISE_ADD, i32, row2, &seq_kv, nullptr, row_kv, 3);
  g.pointwise(CUDNN_POINTWISE_SUB, i32, row_kv, &seq_q, nullptr, last_key, 3);
  const Tensor causal = g.like(sd, ss, boolean);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, boolean, last_key, &col2, nullptr, causal);
  Tensor masked = g.like(sd, ss, f32);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, padded, &neg_inf, &causal, masked);

  // Window: column + WINDOW - SEQ_KV + SEQ_Q > row.
  if (s.windowed) {
    const Tensor window = g.scalar(i32, kUidWindow);
    const Tensor row3 = g.like(sd, ss, i32), col3 = g.like(sd, ss, i32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, masked, nullptr, nullptr, row3, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, masked, nullptr, nullptr, col3, 3);
    const Tensor c1 = g.like(sd, ss, i32), c2 = g.like(sd, ss, i32), c3 = g.like(sd, ss, i32);
    g.pointwise(CUDNN_POINTWISE_ADD, i32, col3, &window, nullptr, c1, 3);
    g.pointwise(CUDNN_POINTWISE_SUB, i32, c1, &seq_kv, nullptr, c2, 3);
    g.pointwise(CUDNN_POINTWISE_ADD, i32, c2, &seq_q, nullptr, c3, 3);
    const Tensor in_window = g.like(sd, ss, boolean);
    g.pointwise(CUDNN_POINTWISE_CMP_GT, boolean, c3, &row3, nullptr, in_window);
    const Tensor banded = g.like(sd, ss, f32);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, masked, &neg_inf, &in_window, banded);
    masked = banded;
  }

  // Softmax over keys: max, subtract, exp, sum, divide; P in the pool dtype.
  const std::vector<int64_t> rd = {1, hq, sq, 1}, rs = {hq * sq, sq, 1, 1};
  const Tensor row_max = g.like(rd, rs, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  const Tensor shifted = g.like(sd, ss, f32), e = g.like(sd, ss, f32);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, masked, &row_max, nullptr, shifted);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, shifted, nullptr, nullptr, e);
  const Tensor row_sum = g.like(rd, rs, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  const Tensor p = g.like(sd, ss, io);
  g.pointwise(CUDNN_POINTWISE_DIV, f32, e, &row_sum, nullptr, p);

  // V (1, hk, skv, d) from the pool; O = P·V.
  const Tensor v = g.like({1, hk, skv, d}, {d * skv * hk, d * skv, d, 1}, io);
  g.paged_load(v_pool, seq_kv, table_v, v);
  g.matmul(p, v, o, &seq_q, nullptr, &seq_kv);
}

// Whether a deviceless plan stopped where only a driver can go on: the
// kernel was generated and compiled, and loading the module failed.
bool stopped_at_module_load(cudnnStatus_t s, const std::string& message) {
  return s == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER &&
         (message.find("cuLibraryLoad") != std::string::npos || message.find("cuModuleLoad") != std::string::npos);
}

// The engine configurations heuristics mode A proposes for graph `graph`.
std::vector<cudnnBackendDescriptor_t> heuristic_configs(GraphBuilder& g, const CudnnApi& api,
                                                        cudnnBackendDescriptor_t graph, const PlanTarget& target) {
  cudnnBackendDescriptor_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
  g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  if (target.device_prop != nullptr)
    g.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, target.device_prop, "heuristics device");
  g.finalize(heur, "heuristics");
  int64_t n = 0;
  if (g.status.ok()) {
    const cudnnStatus_t s =
        api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
    if (s != CUDNN_STATUS_SUCCESS) g.status = Status::error(api.describe(s, "heuristics results"));
  }
  std::vector<cudnnBackendDescriptor_t> configs;
  for (int64_t i = 0; i < n; ++i) configs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
  int64_t got = 0;
  if (g.status.ok() && n > 0) {
    const cudnnStatus_t s = api.BackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, configs.data());
    if (s != CUDNN_STATUS_SUCCESS) g.status = Status::error(api.describe(s, "heuristics results"));
  }
  configs.resize(static_cast<size_t>(std::max<int64_t>(0, std::min(got, n))));
  return configs;
}

int64_t engine_index(const CudnnApi& api, cudnnBackendDescriptor_t config) {
  cudnnBackendDescriptor_t engine = nullptr;
  if (api.BackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return -1;
  int64_t n = 0, index = -1;
  if (api.BackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) ==
      CUDNN_STATUS_SUCCESS)
    api.BackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  api.BackendDestroyDescriptor(engine);
  return index;
}

}  // namespace

Result<std::unique_ptr<SdpaPlan>> build_sdpa_plan(const CudnnApi& api, const PlanTarget& target,
                                                  const SdpaShape& shape) {
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = std::make_unique<SdpaPlan>();
  plan->shape = shape;
  if ((shape.dtype != DType::BF16 && shape.dtype != DType::F16) ||
      (shape.out_dtype != DType::F32 && shape.out_dtype != shape.dtype))
    return Status::error("cuDNN attention takes BF16 or F16 pools (F32 or pool-dtype output)");
  if (shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0 || shape.max_q > shape.max_kv ||
      shape.block_size <= 0 || shape.n_pool_blocks <= 0)
    return Status::error("not an attention shape: " + shape.describe());
  GraphBuilder g(api, &plan->descriptors);
  add_attention_ops(g, shape);
  cudnnBackendDescriptor_t graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "graph");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(g.ops.size()), g.ops.data(),
        "graph ops");
  if (target.handle != nullptr)
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle, "graph handle");
  g.finalize(graph, "graph");
  const std::vector<cudnnBackendDescriptor_t> configs = heuristic_configs(g, api, graph, target);
  if (!g.status.ok()) return g.status;
  if (configs.empty()) return Status::error("cuDNN's heuristics propose no engine for " + shape.describe());
  std::string refusals;
  for (cudnnBackendDescriptor_t config : configs) {
    cudnnBackendDescriptor_t p = g.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
    g.set_desc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config, "plan config");
    if (target.handle != nullptr)
      g.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle, "plan handle");
    if (target.device_prop != nullptr)
      g.set_desc(p, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, target.device_prop, "plan device");
    if (!g.status.ok()) return g.status;
    const cudnnStatus_t s = api.BackendFinalize(p);
    const int64_t engine = engine_index(api, config);
    std::string message;
    if (s != CUDNN_STATUS_SUCCESS) message = api.describe(s, "engine " + std::to_string(engine));
    const bool deviceless_ok = target.handle == nullptr && stopped_at_module_load(s, message);
    if (s == CUDNN_STATUS_SUCCESS || deviceless_ok) {
      plan->plan = p;
      plan->engine = engine;
      plan->executable = s == CUDNN_STATUS_SUCCESS && target.handle != nullptr;
      if (s == CUDNN_STATUS_SUCCESS) {
        int64_t n = 0;
        api.BackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                &plan->workspace_bytes);
      }
      plan->build_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return plan;
    }
    refusals += (refusals.empty() ? "" : "; ") + message;
  }
  return Status::error("cuDNN refuses every engine for " + shape.describe() + " (" + refusals + ")");
}

Result<CudnnDescriptor> make_sdpa_variant_pack(const CudnnApi& api, const SdpaShape& shape, const SdpaArgs& a,
                                               const float* masked) {
  const int64_t uids[] = {kUidQ,          kUidK,          kUidV,     kUidO,      kUidSeqQ,  kUidSeqKv,
                          kUidPageTableK, kUidPageTableV, kUidScale, kUidNegInf, kUidWindow};
  void* ptrs[] = {const_cast<void*>(a.q),
                  const_cast<void*>(a.k_pool),
                  const_cast<void*>(a.v_pool),
                  a.out,
                  const_cast<int32_t*>(a.meta + kSdpaQLenWord),
                  const_cast<int32_t*>(a.meta + kSdpaKvLenWord),
                  const_cast<int32_t*>(a.meta + kSdpaTableWord),
                  const_cast<int32_t*>(a.meta + kSdpaTableWord),
                  const_cast<float*>(&a.scale),
                  const_cast<float*>(masked),
                  const_cast<int32_t*>(&a.window)};
  const int64_t n = shape.windowed ? 11 : 10;  // WINDOW last: in windowed graphs only
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t s = api.BackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (s != CUDNN_STATUS_SUCCESS) return Status::error(api.describe(s, "variant pack"));
  CudnnDescriptor owned(&api, pack);
  void* workspace = a.workspace;
  if ((s = api.BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)) !=
          CUDNN_STATUS_SUCCESS ||
      (s = api.BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)) !=
          CUDNN_STATUS_SUCCESS ||
      (s = api.BackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)) !=
          CUDNN_STATUS_SUCCESS ||
      (s = api.BackendFinalize(pack)) != CUDNN_STATUS_SUCCESS)
    return Status::error(api.describe(s, "variant pack"));
  return owned;
}

Status execute_sdpa_plan(const CudnnApi& api, cudnnHandle_t handle, const SdpaPlan& plan, const SdpaArgs& a) {
  if (!plan.executable) return Status::error("plan " + plan.shape.describe() + " is not executable");
  const float masked = masked_score(api.version);  // read by cudnnBackendExecute (by value)
  Result<CudnnDescriptor> pack = make_sdpa_variant_pack(api, plan.shape, a, &masked);
  if (!pack.ok()) return pack.status();
  if (cudnnStatus_t s = api.BackendExecute(handle, plan.plan, pack.value().get()); s != CUDNN_STATUS_SUCCESS)
    return Status::error(api.describe(s, "execute " + plan.shape.describe()));
  return Status::ok_status();
}

Result<CudnnDescriptor> device_prop_from_json(const CudnnApi& api, const std::string& json) {
  cudnnBackendDescriptor_t d = nullptr;
  cudnnStatus_t s = api.BackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &d);
  if (s != CUDNN_STATUS_SUCCESS) return Status::error(api.describe(s, "device description (needs cuDNN 9.8)"));
  CudnnDescriptor owned(&api, d);
  if ((s = api.BackendSetAttribute(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                   int64_t(json.size()), json.data())) != CUDNN_STATUS_SUCCESS ||
      (s = api.BackendFinalize(d)) != CUDNN_STATUS_SUCCESS)
    return Status::error(api.describe(s, "device description from JSON"));
  return owned;
}

Result<std::string> device_prop_json(const CudnnApi& api, cudnnHandle_t handle, int32_t device) {
  cudnnBackendDescriptor_t d = nullptr;
  cudnnStatus_t s = api.BackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &d);
  if (s != CUDNN_STATUS_SUCCESS) return Status::error(api.describe(s, "device description (needs cuDNN 9.8)"));
  CudnnDescriptor owned(&api, d);
  if ((s = api.BackendSetAttribute(d, CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)) !=
          CUDNN_STATUS_SUCCESS ||
      (s = api.BackendSetAttribute(d, CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &device)) !=
          CUDNN_STATUS_SUCCESS ||
      (s = api.BackendFinalize(d)) != CUDNN_STATUS_SUCCESS)
    return Status::error(api.describe(s, "device description of device " + std::to_string(device)));
  int64_t n = 0;
  if ((s = api.BackendGetAttribute(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n,
                                   nullptr)) != CUDNN_STATUS_SUCCESS)
    return Status::error(api.describe(s, "device description size"));
  std::string json(static_cast<size_t>(n), '\0');
  if ((s = api.BackendGetAttribute(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n,
                                   json.data())) != CUDNN_STATUS_SUCCESS)
    return Status::error(api.describe(s, "device description JSON"));
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

}  // namespace prefixd::cuda
