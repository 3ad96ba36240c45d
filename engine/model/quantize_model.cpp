// Model quantization: plan the types (quant_mix.cpp), then per tensor
// dequantize each input row to F32, quantize it, and dequantize the result
// again to measure the error. Rows are split into fixed chunks so the error
// sums are added in the same order whatever the thread count.
#include "engine/model/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "engine/model/gguf_writer.h"
#include "engine/model/quant_mix.h"
#include "kernels/quant/dequantize.h"
#include "kernels/quant/quantize.h"

namespace prefixd {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION, written by llama-quantize
constexpr int64_t kRowsPerChunk = 16;

struct ChunkError {
  double sum_sq_error = 0, sum_sq = 0, max_abs_error = 0;
};

// The model's layer count: <arch>.block_count, else one more than the highest blk.N.
int layer_count(const GgufFile& in) {
  if (Result<std::string> arch = in.get_string("general.architecture"); arch.ok()) {
    if (Result<uint64_t> n = in.get_uint(*arch + ".block_count"); n.ok())
      return static_cast<int>(*n);
  }
  int n = 0;
  for (const GgufTensorInfo& t : in.tensors()) {
    int layer = -1;
    if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1) n = std::max(n, layer + 1);
  }
  return n;
}

// Converts tensor `t` to `out_type` into `out` (rows * row bytes) and returns its error.
ChunkError convert_tensor(const GgufTensorInfo& t, WeightType out_type, std::vector<uint8_t>& out) {
  const int64_t cols = t.dims[0];
  const int64_t rows = t.n_elements() / cols;
  const size_t in_row_bytes = weight_row_bytes(t.type, cols),
               out_row_bytes = weight_row_bytes(out_type, cols);
  out.assign(out_row_bytes * static_cast<size_t>(rows), 0);
  const int64_t n_chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<ChunkError> errors(static_cast<size_t>(n_chunks));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    std::vector<float> w(static_cast<size_t>(cols)), deq(static_cast<size_t>(cols));  // (cols) f32
    for (int64_t c; (c = next.fetch_add(1)) < n_chunks;) {
      ChunkError& e = errors[static_cast<size_t>(c)];
      for (int64_t r = c * kRowsPerChunk; r < std::min(rows, (c + 1) * kRowsPerChunk); ++r) {
        uint8_t* dst = out.data() + static_cast<size_t>(r) * out_row_bytes;
        quant::dequantize_row(t.type, t.data + static_cast<size_t>(r) * in_row_bytes, w.data(),
                              cols);
        quant::quantize_row(out_type, w.data(), dst, cols);
        quant::dequantize_row(out_type, dst, deq.data(), cols);
        for (int64_t i = 0; i < cols; ++i) {
          const double d = static_cast<double>(w[i]) - deq[i];
          e.sum_sq_error += d * d;
          e.sum_sq += static_cast<double>(w[i]) * w[i];
          e.max_abs_error = std::max(e.max_abs_error, std::fabs(d));
        }
      }
    }
  };
  const unsigned hw = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const unsigned n_threads =
      static_cast<unsigned>(std::min<int64_t>(hw, std::max<int64_t>(1, rows * cols >> 16)));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n_threads; ++i) threads.emplace_back(work);
  work();
  for (std::thread& th : threads) th.join();
  ChunkError total;
  for (const ChunkError& e : errors) {
    total.sum_sq_error += e.sum_sq_error;
    total.sum_sq += e.sum_sq;
    total.max_abs_error = std::max(total.max_abs_error, e.max_abs_error);
  }
  return total;
}

}  // namespace

double QuantizeTypeStats::rel_rms_error() const {
  return sum_sq > 0 ? std::sqrt(sum_sq_error / sum_sq) : 0.0;
}

Status quantize_gguf(const GgufFile& in, const std::string& out_path, const std::string& type_name,
                     QuantizeReport* report) {
  Result<QuantMix> mix = find_quant_mix(type_name);
  if (!mix.ok()) return mix.status();

  std::vector<TensorShape> shapes;
  for (const GgufTensorInfo& t : in.tensors()) shapes.push_back(TensorShape{t.name, t.dims});
  const std::vector<WeightType> types = plan_quant_types(*mix, shapes, layer_count(in));

  GgufWriter w(3, in.alignment());
  for (const auto& [key, value] : in.metadata()) w.set(key, value);
  w.set_u32("general.quantization_version", kQuantizationVersion);
  w.set_u32("general.file_type", mix->file_type);

  QuantizeReport r;
  r.mix = mix->name;
  r.file_type = mix->file_type;
  std::map<uint32_t, QuantizeTypeStats> by_type;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const GgufTensorInfo& t = in.tensors()[i];
    std::vector<uint8_t> data;
    const ChunkError e = convert_tensor(t, types[i], data);
    QuantizeTypeStats& s = by_type[static_cast<uint32_t>(types[i])];
    s.type = types[i];
    ++s.n_tensors;
    s.n_bytes += data.size();
    s.n_values += t.n_elements();
    s.sum_sq_error += e.sum_sq_error;
    s.sum_sq += e.sum_sq;
    s.max_abs_error = std::max(s.max_abs_error, e.max_abs_error);
    r.in_tensor_bytes += t.n_bytes;
    r.out_tensor_bytes += data.size();
    r.tensors.emplace_back(t.name, types[i]);
    w.add_tensor(t.name, types[i], t.dims, std::move(data));
  }
  for (const auto& [type, s] : by_type) r.by_type.push_back(s);
  if (Status s = w.write_file(out_path); !s.ok()) return s;
  if (report != nullptr) *report = std::move(r);
  return Status();
}

Status quantize_model(const std::string& in_path, const std::string& out_path,
                      const std::string& type_name, QuantizeReport* report) {
  if (Result<QuantMix> mix = find_quant_mix(type_name); !mix.ok()) return mix.status();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(in_path, ec)) {
    return Status::error("input model '" + in_path +
                         "' does not exist or is not a file (expected a GGUF file)");
  }
  Result<std::shared_ptr<GgufFile>> in = GgufFile::open(in_path);
  if (!in.ok()) {
    return Status::error("input model '" + in_path +
                         "' is not a GGUF model this project reads (F32, F16, BF16 " +
                         "or ggml-quantized tensors): " + in.message());
  }
  return quantize_gguf(**in, out_path, type_name, report);
}

}  // namespace prefixd
