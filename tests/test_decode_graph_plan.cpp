// CPU-only checks of the CUDA backend's decode-graph plan and activation-twin
// bookkeeping (kernels/cuda/decode_graph_plan.h, activation_twins.h): bucket
// and table-capacity choice, which steps are recorded, the padded batch (its
// validity, inert rows in slots of their own), the packed layout that keys a
// graph, and the twin rules. Then the padding itself through the real forward
// pass: a backend that pads decode steps as the CUDA backend does, and runs
// each padded step twice (as recording a graph does), over the CPU backend,
// gives the logits and greedy tokens of the CPU backend as it is.
// Runs everywhere.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "kernels/cuda/activation_twins.h"
#include "kernels/cuda/decode_graph_plan.h"
#include "kernels/cuda/launch_config.h"
#include "tests/decode_streams.h"
#include "tests/golden.h"

using namespace prefixd;
using namespace prefixd::cuda;

namespace {

// A decode batch: one row per sequence at the given positions, sequence i
// owning blocks 10 i + j (j-th table entry), all rows output rows.
Batch decode_batch(const std::vector<int32_t>& positions, int32_t block_size) {
  BatchBuilder b(block_size);
  for (size_t i = 0; i < positions.size(); ++i) {
    const int32_t pos = positions[i];
    std::vector<int32_t> table;
    for (int32_t j = 0; j <= pos / block_size; ++j) table.push_back(int32_t(10 * i) + j);
    b.add(std::vector<int32_t>{int32_t(100 + i)}, pos, table, LogitsWanted::kLast);
  }
  return b.batch();
}

}  // namespace

TEST_CASE("bucket: the smallest of 1, 2, 4 ... 64 holding the rows, within the caller's limit") {
  CHECK(decode_graph_bucket(0, 64) == 0);
  CHECK(decode_graph_bucket(1, 64) == 1);
  CHECK(decode_graph_bucket(2, 64) == 2);
  CHECK(decode_graph_bucket(3, 64) == 4);
  CHECK(decode_graph_bucket(5, 64) == 8);
  CHECK(decode_graph_bucket(9, 64) == 16);
  CHECK(decode_graph_bucket(33, 64) == 64);
  CHECK(decode_graph_bucket(64, 64) == 64);
  CHECK(decode_graph_bucket(65, 1000) == 0);  // beyond the largest bucket: eager
  CHECK(decode_graph_bucket(3, 3) == 0);      // bucket 4 exceeds the caller's buffers
  CHECK(decode_graph_bucket(2, 3) == 2);
  CHECK(decode_graph_bucket(1, 1) == 1);
}

TEST_CASE("table capacity: the next power of two; scratch blocks: one slot per padding row") {
  CHECK(decode_table_capacity(0) == 1);
  CHECK(decode_table_capacity(1) == 1);
  CHECK(decode_table_capacity(2) == 2);
  CHECK(decode_table_capacity(3) == 4);
  CHECK(decode_table_capacity(5) == 8);
  CHECK(decode_table_capacity(1024) == 1024);
  CHECK(decode_table_capacity(1025) == 2048);
  CHECK(decode_scratch_blocks(16) == 4);
  CHECK(decode_scratch_blocks(1) == 64);
  CHECK(decode_scratch_blocks(48) == 2);
  CHECK(decode_scratch_blocks(64) == 1);
  CHECK(decode_scratch_blocks(256) == 1);
  for (int32_t bs : {1, 3, 16, 48, 64, 256})
    CHECK(decode_scratch_blocks(bs) * bs >= kMaxDecodeGraphRows);
}

TEST_CASE("step kinds: only one-row sequences whose every row is an output row are recorded") {
  const int32_t bs = 16;
  {
    DecodeStepPlan p = plan_decode_step(decode_batch({5, 40, 17}, bs), 64, bs);
    CHECK(p.kind == StepKind::kGraph);
    CHECK(p.n_rows == 3);
    CHECK(p.bucket == 4);
    CHECK(p.table_capacity == 4);  // position 40: 3 blocks -> 4
    CHECK(p.max_block_id == 21);   // sequence 2's second block
    CHECK(p.max_token == 102);
  }
  CHECK(plan_decode_step(Batch{}, 64, bs).kind == StepKind::kEmpty);
  {
    BatchBuilder b(bs);
    b.add(std::vector<int32_t>{1}, 4, std::vector<int32_t>{0}, LogitsWanted::kLast);
    b.add(std::vector<int32_t>{1, 2}, 0, std::vector<int32_t>{1},
          LogitsWanted::kLast);  // a 2-row chunk
    CHECK(plan_decode_step(b.batch(), 64, bs).kind == StepKind::kNotDecode);
  }
  {
    BatchBuilder b(bs);
    b.add(std::vector<int32_t>{1}, 4, std::vector<int32_t>{0}, LogitsWanted::kLast);
    b.add(std::vector<int32_t>{1}, 0, std::vector<int32_t>{1},
          LogitsWanted::kNone);  // a 1-token chunk
    CHECK(plan_decode_step(b.batch(), 64, bs).kind == StepKind::kPartialOutputs);
  }
  {
    BatchBuilder b(bs);
    b.add(std::vector<int32_t>{1}, 4, std::vector<int32_t>{0}, LogitsWanted::kLast,
          std::vector<int32_t>{3});
    CHECK(plan_decode_step(b.batch(), 64, bs).kind == StepKind::kWindowTables);
  }
  CHECK(plan_decode_step(decode_batch(std::vector<int32_t>(65, 3), bs), 1000, bs).kind ==
        StepKind::kTooManyRows);
  CHECK(plan_decode_step(decode_batch({1, 2, 3}, bs), 3, bs).kind == StepKind::kTooManyRows);
  {
    // 33 sequences (bucket 64), one of 20000 blocks (capacity 32768): 2M table words.
    std::vector<int32_t> pos(33, 3);
    pos[7] = 20000 * 4 - 1;
    const int32_t small_bs = 4;
    BatchBuilder b(small_bs);
    for (size_t i = 0; i < pos.size(); ++i) {
      std::vector<int32_t> table(static_cast<size_t>(pos[i] / small_bs + 1), int32_t(i));
      b.add(std::vector<int32_t>{1}, pos[i], table, LogitsWanted::kLast);
    }
    const DecodeStepPlan p = plan_decode_step(b.batch(), 64, small_bs);
    CHECK(p.kind == StepKind::kTableTooLarge);
    CHECK(std::string(step_kind_name(p.kind)) == "table too large");
  }
}

TEST_CASE(
    "padded batch: valid, the step's rows first and unchanged, inert rows in scratch slots of "
    "their own") {
  for (int32_t bs : {1, 4, 16}) {
    for (const std::vector<int32_t>& pos :
         std::vector<std::vector<int32_t>>{{0}, {5, 40, 17}, {3, 3, 3, 3, 3}, {63}}) {
      CAPTURE(bs);
      CAPTURE(pos.size());
      const Batch b = decode_batch(pos, bs);
      REQUIRE(validate_batch(b, bs).ok());
      const DecodeStepPlan p = plan_decode_step(b, 64, bs);
      REQUIRE(p.kind == StepKind::kGraph);
      const int32_t first_scratch = 1000;  // the pool's n_blocks
      const Batch padded = pad_decode_batch(b, p, bs, first_scratch);
      CHECK(validate_batch(padded, bs).ok());
      REQUIRE(padded.n_tokens() == p.bucket);
      REQUIRE(padded.seqs.size() == size_t(p.bucket));
      CHECK(padded.block_tables.size() == size_t(p.bucket) * p.table_capacity);
      for (int32_t r = 0; r < p.bucket; ++r) CHECK(padded.output_rows[r] == r);
      std::set<int32_t> slots;
      for (int32_t i = 0; i < p.n_rows; ++i) {
        const BatchSeq& s = padded.seqs[i];
        const BatchSeq& o = b.seqs[i];
        CHECK(padded.tokens[i] == b.tokens[i]);
        CHECK(padded.positions[i] == b.positions[i]);
        CHECK(padded.slots[i] == b.slots[i]);
        CHECK(s.pos0 == o.pos0);
        CHECK(s.table_start == i * p.table_capacity);
        for (int32_t t = 0; t < o.n_table; ++t)
          CHECK(padded.block_tables[s.table_start + t] == b.block_tables[o.table_start + t]);
        slots.insert(padded.slots[i]);
      }
      std::set<int32_t> pad_slots;
      for (int32_t i = p.n_rows; i < p.bucket; ++i) {
        const BatchSeq& s = padded.seqs[i];
        const int32_t slot = padded.slots[i];
        CHECK(padded.tokens[i] == 0);
        CHECK(slot / bs >= first_scratch);
        CHECK(slot / bs < first_scratch + decode_scratch_blocks(bs));
        CHECK(pad_slots.insert(slot).second);  // no two rows write one slot
        CHECK(slots.count(slot) == 0);
        // Every key it reads is a slot a padding row of this step writes.
        for (int32_t k = 0; k <= s.pos0; ++k) {
          const int32_t key = padded.block_tables[s.table_start + k / bs] * bs + k % bs;
          CHECK(pad_slots.count(key) == 1);
        }
      }
    }
  }
}

TEST_CASE("packed graph step: layout a function of the key, split from the key's longest length") {
  const int32_t bs = 16;
  const Batch a = decode_batch({5, 40, 17}, bs);
  const Batch b = decode_batch({50, 2, 33}, bs);  // other lengths, same bucket and capacity
  const Batch c = decode_batch({5, 40}, bs);      // bucket 2
  const Batch d = decode_batch({5, 70, 17}, bs);  // capacity 8
  auto pack = [&](const Batch& x) {
    const DecodeStepPlan p = plan_decode_step(x, 64, bs);
    return std::make_pair(p, pack_decode_step(pad_decode_batch(x, p, bs, 500), p, bs));
  };
  const auto [pa, ka] = pack(a);
  const auto [pb, kb] = pack(b);
  const auto [pc, kc] = pack(c);
  const auto [pd, kd] = pack(d);
  CHECK(same_graph_layout(ka, kb));
  CHECK(ka.words.size() == kb.words.size());
  CHECK_FALSE(same_graph_layout(ka, kc));
  CHECK_FALSE(same_graph_layout(ka, kd));
  CHECK(ka.max_decode_kv_len == 4 * bs);
  CHECK(kd.max_decode_kv_len == 8 * bs);
  CHECK(ka.max_block_id == pa.max_block_id);  // the step's own ids, not the scratch blocks'
  CHECK(kb.max_block_id == 22);
  CHECK(ka.max_token == 102);
  CHECK(ka.n_decode_seqs == 4);
  CHECK(ka.n_prefill_tiles == 0);
  // The decode split (what the attention launch's grid comes from) is the
  // key's, and covers every sequence the key can hold.
  for (int32_t sms : {1, 132}) {
    const int32_t sa = decode_split_count(int64_t(ka.n_decode_seqs) * 8, ka.max_decode_kv_len, sms);
    const int32_t sb = decode_split_count(int64_t(kb.n_decode_seqs) * 8, kb.max_decode_kv_len, sms);
    CHECK(sa == sb);
    CHECK(sa >= 1);
  }
  // Everything else is pack_batch of the padded batch.
  const PackedBatch plain = pack_batch(pad_decode_batch(a, pa, bs, 500), bs);
  CHECK(plain.words == ka.words);
  CHECK(plain.max_decode_kv_len == 41);
  CHECK(plain.max_block_id == 500);  // the padding row's scratch block
  CHECK_FALSE(same_graph_layout(plain, ka));
}

TEST_CASE("activation twins: registered per buffer, current only until another op") {
  ActivationTwins tw;
  float x[64], y[64];
  uint16_t store[256];
  CHECK(tw.target_for(x, 10) == nullptr);
  tw.add(x, ActivationTwins::Twin{store, DType::BF16, 256});
  CHECK(tw.has(x));
  CHECK_FALSE(tw.has(y));
  REQUIRE(tw.target_for(x, 256) != nullptr);
  CHECK(tw.target_for(x, 257) == nullptr);  // too small: the op writes f32 only
  CHECK(tw.target_for(y, 1) == nullptr);
  CHECK(tw.current_for(x, 10, DType::BF16) == nullptr);  // nothing written yet
  tw.wrote(x, 64, *tw.target_for(x, 64));
  CHECK(tw.current_for(x, 64, DType::BF16) == store);
  CHECK(tw.current_for(x, 32, DType::BF16) == store);
  CHECK(tw.current_for(x, 65, DType::BF16) == nullptr);  // more than was written
  CHECK(tw.current_for(x, 64, DType::F16) == nullptr);   // another type: converted
  CHECK(tw.current_for(y, 64, DType::BF16) == nullptr);
  CHECK(tw.overlaps_current(x + 63, 4));
  CHECK_FALSE(tw.overlaps_current(y, sizeof y));
  tw.forget_current();
  CHECK(tw.current_for(x, 64, DType::BF16) == nullptr);
  uint16_t scratch[64];
  tw.converted(y, 64, scratch, DType::F16);  // a GEMM's conversion into the scratch
  CHECK(tw.current_for(y, 64, DType::F16) == scratch);
  tw.wrote(x, 64, *tw.target_for(x, 64));
  CHECK(tw.current_for(y, 64, DType::F16) == nullptr);  // one current twin at a time
  const std::vector<ActivationTwins::Twin> gone = tw.remove(x);
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].data == store);
  CHECK(tw.current_for(x, 64, DType::BF16) == nullptr);
  CHECK(tw.size() == 0);
}

namespace {

// A backend over the CPU backend that runs run_step as the CUDA backend's
// decode graphs do, without a GPU: a kGraph step padded to its bucket (the
// pool holds decode_scratch_blocks() more blocks than it says) and its body
// run twice, as recording runs it before the capture.
class PaddingBackend final : public Backend {
 public:
  explicit PaddingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::set<int32_t> buckets;  // buckets of the padded steps
  int64_t padded_steps = 0;

  void run_step(const Batch& batch, const KvPool& pool, const StepInfo& info,
                const StepBody& body) override {
    const int32_t bs = pool.geom.block_size;
    const DecodeStepPlan p = plan_decode_step(batch, info.max_rows, bs);
    if (p.kind != StepKind::kGraph) {
      Backend::run_step(batch, pool, info, body);
      return;
    }
    const Batch padded = pad_decode_batch(batch, p, bs, pool.geom.n_blocks);
    REQUIRE(validate_batch(padded, bs).ok());
    for (int run = 0; run < 2; ++run) {
      in_->prepare_batch(padded, bs);
      body(padded);
    }
    buckets.insert(p.bucket);
    ++padded_steps;
  }
  Result<KvPool> allocate_kv_pool(const KvGeometry& geom) override {
    KvGeometry g = geom;
    g.n_blocks += decode_scratch_blocks(geom.block_size);
    Result<KvPool> pool = in_->allocate_kv_pool(g);
    if (pool.ok()) pool.value().geom.n_blocks = geom.n_blocks;
    return pool;
  }

  std::string name() const override { return in_->name(); }
  int n_threads() const override { return in_->n_threads(); }
  void* alloc(size_t n) override { return in_->alloc(n); }
  void free(void* p) override { in_->free(p); }
  void upload(void* d, const void* s, size_t n) override { in_->upload(d, s, n); }
  void download(void* d, const void* s, size_t n) override { in_->download(d, s, n); }
  void synchronize() override { in_->synchronize(); }
  std::unique_ptr<Matrix> upload_matrix(WeightType t, int64_t r, int64_t c, const void* h,
                                        bool o) override {
    return in_->upload_matrix(t, r, c, h, o);
  }
  bool supports_window_group() const override { return false; }
  void free_kv_pool(KvPool& pool) override { in_->free_kv_pool(pool); }
  void prepare_batch(const Batch& b, int32_t bs) override { in_->prepare_batch(b, bs); }
  void embed(const Matrix& t, float* out) override { in_->embed(t, out); }
  void rmsnorm(const float* x, const float* w, float* out, int64_t n, int64_t dim,
               float eps) override {
    in_->rmsnorm(x, w, out, n, dim, eps);
  }
  void matmul(const Matrix& w, const float* x, float* y, int64_t n) override {
    in_->matmul(w, x, y, n);
  }
  void matmul_same_x(const Matrix* const* ws, const float* x, float* const* ys, int count,
                     int64_t n) override {
    in_->matmul_same_x(ws, x, ys, count, n);
  }
  void add_bias(float* y, const float* b, int64_t n, int64_t dim) override {
    in_->add_bias(y, b, n, dim);
  }
  void add(float* y, const float* x, int64_t n) override { in_->add(y, x, n); }
  void swiglu(const float* g, const float* u, float* out, int64_t n) override {
    in_->swiglu(g, u, out, n);
  }
  void geglu(const float* g, const float* u, float* out, int64_t n) override {
    in_->geglu(g, u, out, n);
  }
  void scale(float* y, float f, int64_t n) override { in_->scale(y, f, n); }
  void rope(float* x, int32_t nh, int32_t hd, int32_t rd, float base, const float* ff,
            RopeStyle st) override {
    in_->rope(x, nh, hd, rd, base, ff, st);
  }
  void kv_store(KvPool& pool, int32_t layer, const float* k, const float* v) override {
    KvPool all = with_scratch(pool);
    in_->kv_store(all, layer, k, v);
  }
  void attention(const KvPool& pool, int32_t layer, const float* q, float* out, int32_t nh,
                 float sc, int32_t window) override {
    in_->attention(with_scratch(pool), layer, q, out, nh, sc, window);
  }
  void gather_output_rows(const float* x, float* out, int64_t dim) override {
    in_->gather_output_rows(x, out, dim);
  }
  void copy_block(KvPool& pool, int32_t s, int32_t d) override { in_->copy_block(pool, s, d); }
  void read_block(const KvPool& pool, int32_t id, void* dst) override {
    in_->read_block(pool, id, dst);
  }
  void write_block(KvPool& pool, int32_t id, const void* src) override {
    in_->write_block(pool, id, src);
  }

 private:
  // The pool as the CPU backend allocated it: with the scratch blocks.
  static KvPool with_scratch(const KvPool& pool) {
    KvPool all = pool;
    all.geom.n_blocks += decode_scratch_blocks(pool.geom.block_size);
    return all;
  }

  std::unique_ptr<Backend> in_;
};

}  // namespace

TEST_CASE(
    "the forward pass over padded decode steps, each run twice, equals it over the steps as "
    "given") {
  // Models without a window group (a padded step is never a window-tables step).
  for (const std::string name : {"stories260K", "rand-qwen3-bf16"}) {
    CAPTURE(name);
    auto file = GgufFile::open(testing::shared_path("models/" + name + ".gguf"));
    REQUIRE(file.ok());
    std::unique_ptr<Backend> plain = make_cpu_backend(2);
    auto padding = std::make_unique<PaddingBackend>(make_cpu_backend(2));
    PaddingBackend* pad = padding.get();
    std::unique_ptr<Backend> padded_be = std::move(padding);
    auto m_plain = Model::load(file.value(), *plain);
    auto m_pad = Model::load(file.value(), *padded_be);
    REQUIRE(m_plain.ok());
    REQUIRE(m_pad.ok());
    for (int32_t bs : {4, 16}) {
      CAPTURE(bs);
      const int32_t n_seqs = 9, n_steps = 12;
      const testing::DecodeStreamsRun a =
          testing::run_decode_streams(*m_plain.value(), DType::F32, bs, n_seqs, n_steps, 16);
      const testing::DecodeStreamsRun b =
          testing::run_decode_streams(*m_pad.value(), DType::F32, bs, n_seqs, n_steps, 16);
      CHECK(a.tokens == b.tokens);
      REQUIRE(a.logits.size() == b.logits.size());
      double worst = 0;
      for (size_t t = 0; t < a.logits.size(); ++t) {
        REQUIRE(a.logits[t].size() == b.logits[t].size());
        for (size_t i = 0; i < a.logits[t].size(); ++i)
          worst = std::max(worst, std::fabs(double(a.logits[t][i]) - b.logits[t][i]));
      }
      MESSAGE(name << " block size " << bs << ": padded vs as given, max logit difference "
                   << worst);
      CHECK(worst <= 1e-4);
    }
    CHECK(pad->padded_steps == 2 * 12);
    CHECK(pad->buckets == std::set<int32_t>{1, 2, 4, 8, 16});
  }
}
