// kernels/paging.h on the CPU, each function against a brute-force or F64
// reference: slots through random block tables, the window's first key, the
// causal bound of a query suffix, the split-KV partition (every key exactly
// once) and the log-sum-exp merge of partial softmax results over random
// splits (equal to the F64 softmax-weighted sum within F32 tolerance).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kernels/op_math_ext.h"
#include "kernels/paging.h"

using namespace prefixd;

TEST_CASE("slot_of: the slot of every position through random block tables") {
  std::mt19937 rng(11);
  for (int32_t block_size : {1, 2, 7, 16, 32, 256}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int32_t n_blocks = 1 + static_cast<int32_t>(rng() % 40);
      // A random injective table: n_blocks distinct pool blocks out of 4 * n_blocks.
      std::vector<int32_t> ids(4 * n_blocks);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const std::vector<int32_t> table(ids.begin(), ids.begin() + n_blocks);
      // Brute force: walk the blocks in order, each covering block_size slots.
      std::vector<int32_t> want;
      for (int32_t b = 0; b < n_blocks; ++b)
        for (int32_t o = 0; o < block_size; ++o) want.push_back(table[b] * block_size + o);
      std::set<int32_t> distinct;
      int32_t wrong = 0;
      for (int32_t pos = 0; pos < n_blocks * block_size; ++pos) {
        const int32_t slot = paging::slot_of(table.data(), block_size, pos);
        wrong += slot != want[pos] || slot / block_size != table[pos / block_size];
        distinct.insert(slot);
      }
      CAPTURE(block_size);
      CHECK(wrong == 0);
      CHECK(distinct.size() == size_t(n_blocks) * block_size);  // no two positions share a slot
    }
  }
  // A table that starts mid-array (a sequence's table inside Batch::block_tables).
  const std::vector<int32_t> tables = {9, 9, 5, 3, 17};
  CHECK(paging::slot_of(tables.data() + 2, 16, 0) == 80);
  CHECK(paging::slot_of(tables.data() + 2, 16, 17) == 49);
  CHECK(paging::slot_of(tables.data() + 2, 16, 47) == 17 * 16 + 15);
}

TEST_CASE("window_first_key: the smallest key inside (q - window, q]") {
  for (int32_t window : {-1, 0, 1, 2, 3, 40, 512, 1000}) {
    int32_t wrong = 0;
    for (int32_t q = 0; q < 1200; q += (q < 100 ? 1 : 37)) {
      int32_t want = 0;  // brute force: the first k in [0, q] that the query reads
      if (window > 0)
        while (!(want > q - window)) ++want;
      const int32_t got = paging::window_first_key(q, window);
      wrong += got != want || got > q;  // a query always reads itself
    }
    CAPTURE(window);
    CHECK(wrong == 0);
  }
}

TEST_CASE("causal_key_end: a suffix of n_q queries over n_kv keys reads up to its own position") {
  for (int32_t n_kv = 1; n_kv <= 40; ++n_kv) {
    for (int32_t n_q = 1; n_q <= n_kv; ++n_q) {
      int32_t wrong = 0;
      for (int32_t row = 0; row < n_q; ++row) {
        // Brute force: the query's position and the count of keys at or before it.
        const int32_t q_pos = n_kv - n_q + row;
        int32_t visible = 0;
        for (int32_t k = 0; k < n_kv; ++k) visible += k <= q_pos ? 1 : 0;
        wrong += paging::causal_key_end(row, n_q, n_kv) != visible;
      }
      CHECK(wrong == 0);
      CHECK(paging::causal_key_end(n_q - 1, n_q, n_kv) == n_kv);  // the last query sees every key
    }
  }
  CHECK(paging::causal_key_end(0, 100, 8100) == 8001);  // 100 over a cached 8000
  CHECK(paging::causal_key_end(0, 1, 701) == 701);      // decode at position 700
}

TEST_CASE("split partition: every key exactly once, in order, balanced chunks") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    const int32_t first = static_cast<int32_t>(rng() % 3000);
    const int32_t n_keys = trial < 200 ? trial % 70 : static_cast<int32_t>(rng() % 20000);
    const int32_t end = first + n_keys;
    const int32_t chunk = std::vector<int32_t>{1, 3, 32, 64, 128}[rng() % 5];
    const int32_t max_splits = std::vector<int32_t>{1, 2, 4, 7, 8, 64}[rng() % 6];
    CAPTURE(first);
    CAPTURE(n_keys);
    CAPTURE(chunk);
    CAPTURE(max_splits);
    const int32_t used = paging::split_count(n_keys, chunk, max_splits);
    const int64_t n_chunks = n_keys == 0 ? 0 : (n_keys + chunk - 1) / chunk;
    CHECK(used == std::min<int64_t>(n_chunks, max_splits));
    // The used splits cover [first, end) contiguously, none empty, each
    // starting on a chunk boundary and holding floor or ceil of chunks / used.
    std::vector<int32_t> count(n_keys, 0);
    int32_t next = first;
    for (int32_t s = 0; s < used; ++s) {
      const paging::KeyRange r = paging::split_range(first, end, chunk, s, used);
      CHECK(r.begin == next);
      CHECK(r.end > r.begin);
      CHECK((r.begin - first) % chunk == 0);
      const int64_t chunks_here = (int64_t(r.end) - r.begin + chunk - 1) / chunk;
      CHECK(chunks_here >= n_chunks / used);
      CHECK(chunks_here <= (n_chunks + used - 1) / used);
      for (int32_t k = r.begin; k < r.end; ++k) ++count[k - first];
      next = r.end;
    }
    if (used > 0) CHECK(next == end);
    CHECK(std::count(count.begin(), count.end(), 1) == n_keys);
    // The same partition dealt to more splits than chunks still covers every
    // key once, the extra splits empty; splits past the count are empty.
    const int32_t wide = std::max<int32_t>(1, static_cast<int32_t>(n_chunks) + 3);
    std::fill(count.begin(), count.end(), 0);
    int32_t reversed = 0;
    for (int32_t s = 0; s < wide; ++s) {
      const paging::KeyRange r = paging::split_range(first, end, chunk, s, wide);
      reversed += r.begin > r.end;
      for (int32_t k = r.begin; k < r.end; ++k) ++count[k - first];
    }
    CHECK(reversed == 0);
    CHECK(std::count(count.begin(), count.end(), 1) == n_keys);
    const paging::KeyRange past = paging::split_range(first, end, chunk, used, std::max(used, 1));
    if (used > 0) CHECK(past.begin == past.end);
  }
  CHECK(paging::split_count(0, 64, 8) == 0);
  CHECK(paging::split_count(-3, 64, 8) == 0);
  // 8100 keys, chunks of 64, 64 splits: 127 chunks as 63 splits of 2 and one of 1.
  CHECK(paging::split_count(8100, 64, 64) == 64);
  const paging::KeyRange r0 = paging::split_range(0, 8100, 64, 0, 64);
  CHECK(r0.begin == 0);
  CHECK(r0.end == 64);
  const paging::KeyRange r63 = paging::split_range(0, 8100, 64, 63, 64);
  CHECK(r63.end == 8100);
  // Large positions: no int32 overflow in the chunk arithmetic.
  const int32_t big = 0x7fffffff - 100;
  const paging::KeyRange last = paging::split_range(0, big, 1, 63, 64);
  CHECK(last.end == big);
  CHECK(last.begin == static_cast<int32_t>(int64_t(big) * 63 / 64));
}

namespace {

// A partial of the keys [b, e): (m, l, acc[n_dims]) computed in F32 the way a
// kernel does it (chunks of 32 folded by op::softmax_fold_max).
void partial_f32(const std::vector<float>& scores, const std::vector<float>& values, int32_t n_dims,
                 int32_t b, int32_t e, float* out) {
  op::SoftmaxState st = op::softmax_init();
  std::vector<float> acc(n_dims, 0.0f);
  for (int32_t c0 = b; c0 < e; c0 += 32) {
    const int32_t c1 = std::min(e, c0 + 32);
    float mx = -INFINITY;
    for (int32_t j = c0; j < c1; ++j) mx = std::max(mx, scores[j]);
    const float f = op::softmax_fold_max(&st, mx);
    for (float& a : acc) a *= f;
    for (int32_t j = c0; j < c1; ++j) {
      const float p = std::exp(scores[j] - st.m);
      st.l += p;
      for (int32_t d = 0; d < n_dims; ++d) acc[d] += p * values[size_t(j) * n_dims + d];
    }
  }
  out[0] = st.m;
  out[1] = st.l;
  std::copy(acc.begin(), acc.end(), out + paging::kPartialHeaderFloats);
}

}  // namespace

TEST_CASE("log-sum-exp merge of partials over random splits equals the F64 softmax-weighted sum") {
  std::mt19937 rng(3);
  const int32_t n_dims = 8;
  const double kTolerance = 2e-5;  // F32 arithmetic on |v| <= 1, as test_cuda_ops' attention cases
  double worst = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int32_t n_keys = 1 + static_cast<int32_t>(rng() % 3000);
    // Scores over a wide range (some far below the max, some equal), values in [-1, 1].
    const float spread = std::vector<float>{0.1f, 4.0f, 30.0f, 80.0f}[trial % 4];
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> scores(n_keys), values(size_t(n_keys) * n_dims);
    for (float& s : scores) s = u(rng) * spread;
    if (trial % 7 == 0) std::fill(scores.begin(), scores.begin() + n_keys / 2, scores[0]);
    for (float& v : values) v = u(rng);
    // F64 reference.
    double mx = -INFINITY;
    for (float s : scores) mx = std::max(mx, double(s));
    double l = 0;
    std::vector<double> ref(n_dims, 0.0);
    for (int32_t j = 0; j < n_keys; ++j) {
      const double w = std::exp(double(scores[j]) - mx);
      l += w;
      for (int32_t d = 0; d < n_dims; ++d) ref[d] += w * values[size_t(j) * n_dims + d];
    }
    // Random split points (some splits empty), partials laid out with a padded stride.
    const int32_t n_parts = 1 + static_cast<int32_t>(rng() % 64);
    std::vector<int32_t> cuts = {0, n_keys};
    for (int32_t i = 1; i < n_parts; ++i)
      cuts.push_back(static_cast<int32_t>(rng() % (n_keys + 1)));
    std::sort(cuts.begin(), cuts.end());
    const int32_t stride = paging::kPartialHeaderFloats + n_dims + 3;
    std::vector<float> parts(size_t(n_parts) * stride, 0.0f);
    for (int32_t i = 0; i < n_parts; ++i)
      partial_f32(scores, values, n_dims, cuts[i], cuts[i + 1], parts.data() + size_t(i) * stride);
    const op::SoftmaxState total = paging::merge_partial_states(parts.data(), n_parts, stride);
    CHECK(total.m == paging::partials_max(parts.data(), n_parts, stride));
    CHECK(double(total.m) == mx);
    CHECK(std::fabs(total.l - l) <= 1e-5 * l);
    for (int32_t d = 0; d < n_dims; ++d) {
      const float out = paging::normalise(
          paging::merge_partial_acc(parts.data(), n_parts, stride, d, total.m), total.l);
      const double want = ref[d] / l;
      const double err = std::fabs(out - want);
      worst = std::max(worst, err);
      CAPTURE(trial);
      CAPTURE(n_keys);
      CAPTURE(n_parts);
      CHECK(err <= kTolerance);
    }
  }
  MESSAGE("worst |merged - F64| " << worst);
  // Only empty partials: the merged sum is 0 and the output 0, not NaN.
  std::vector<float> empty = {-INFINITY, 0.0f, 0.0f, -INFINITY, 0.0f, 0.0f};
  const op::SoftmaxState e = paging::merge_partial_states(empty.data(), 2, 3);
  CHECK(e.m == -INFINITY);
  CHECK(e.l == 0.0f);
  CHECK(paging::normalise(paging::merge_partial_acc(empty.data(), 2, 3, 0, e.m), e.l) == 0.0f);
  CHECK(paging::partial_weight(-INFINITY, 1.0f) == 0.0f);
  CHECK(paging::partial_weight(1.0f, 1.0f) == 1.0f);
}
