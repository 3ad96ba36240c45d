// Gated DeltaNet kernels (kernels/cpu/delta_net.h) against F64 references,
// and the CPU backend's recurrent ops over batches with state slots: a
// sequence computed in pieces equals the whole run bit for bit, wherever it
// is split, and a sequence at position 0 starts from zeros whatever its slot
// holds; every instruction set's convolution and rule give the same bits.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "engine/batch_builder.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/delta_net.h"

namespace prefixd {
namespace {

using cpu::delta_net::conv_silu;
using cpu::delta_net::gates;
using cpu::delta_net::l2_normalize;
using cpu::delta_net::rule_step;
using cpu::delta_net::rule_steps;

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

double silu64(double z) { return z / (1.0 + std::exp(-z)); }

}  // namespace

TEST_CASE("conv_silu: the causal depthwise convolution with SiLU, its tail carried between calls") {
  std::mt19937 rng(7);
  const int64_t n = 23, ch = 70;
  for (int32_t width : {2, 4}) {
    CAPTURE(width);
    const std::vector<float> x0 = random_floats(rng, n * ch, -2, 2);
    const std::vector<float> w = random_floats(rng, ch * width);
    const std::vector<float> tail0 = random_floats(rng, (width - 1) * ch, -2, 2);
    // F64 reference over tail0 followed by x0.
    std::vector<double> want(n * ch);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < ch; ++c) {
        double acc = 0;
        for (int32_t j = 0; j < width; ++j) {
          const int64_t src = t - (width - 1) + j;  // < 0: the tail's rows
          const double in = src >= 0 ? x0[src * ch + c] : tail0[(src + width - 1) * ch + c];
          acc += double(w[c * width + j]) * in;
        }
        want[t * ch + c] = silu64(acc);
      }
    }
    std::vector<float> x = x0, tail = tail0;
    conv_silu(x.data(), n, ch, w.data(), width, tail.data(), 0, 37);  // two channel ranges
    conv_silu(x.data(), n, ch, w.data(), width, tail.data(), 37, ch);
    CHECK(max_abs_diff(x, want) < 1e-5);
    for (int32_t j = 0; j < width - 1; ++j) {  // the new tail: the last inputs
      for (int64_t c = 0; c < ch; ++c) CHECK(tail[j * ch + c] == x0[(n - width + 1 + j) * ch + c]);
    }
    // One channel at a time (the one-lane path) and the whole range (16
    // channels at a time): the same bits.
    std::vector<float> one = x0, one_tail = tail0;
    for (int64_t c = 0; c < ch; ++c) conv_silu(one.data(), n, ch, w.data(), width, one_tail.data(), c, c + 1);
    CHECK(std::memcmp(one.data(), x.data(), x.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(one_tail.data(), tail.data(), tail.size() * sizeof(float)) == 0);
    // In two pieces at every split: bit for bit the whole.
    for (int64_t s = 1; s < n; ++s) {
      std::vector<float> y = x0, t2 = tail0;
      conv_silu(y.data(), s, ch, w.data(), width, t2.data(), 0, ch);
      conv_silu(y.data() + s * ch, n - s, ch, w.data(), width, t2.data(), 0, ch);
      CHECK(std::memcmp(y.data(), x.data(), x.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(t2.data(), tail.data(), tail.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("l2_normalize divides by max(norm, eps)") {
  std::mt19937 rng(3);
  std::vector<float> x = random_floats(rng, 32);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] / std::sqrt(ss);
  l2_normalize(x.data(), 32, 1e-6f);
  CHECK(max_abs_diff(x, want) < 1e-6);
  std::vector<float> tiny(8, 1e-9f);
  l2_normalize(tiny.data(), 8, 1e-6f);  // norm below eps: divided by eps
  CHECK(std::fabs(tiny[0] - 1e-3f) < 1e-9f);
}

TEST_CASE("gates: softplus(alpha + dt_bias) * a and sigmoid(beta)") {
  std::vector<float> alpha = {-3.0f, 0.5f, 25.0f, 2.0f};
  std::vector<float> beta = {-1.0f, 0.0f, 4.0f, 0.25f};
  const std::vector<float> dt = {0.1f, -0.2f, 0.0f, 1.0f};
  const std::vector<float> a = {-0.5f, -1.0f, -2.0f, -0.01f};
  std::vector<double> want_a(4), want_b(4);
  for (int h = 0; h < 4; ++h) {
    const double z = double(alpha[h]) + dt[h];
    want_a[h] = (z > 20 ? z : std::log1p(std::exp(z))) * a[h];
    want_b[h] = 1.0 / (1.0 + std::exp(-double(beta[h])));
  }
  gates(alpha.data(), beta.data(), dt.data(), a.data(), 4);
  CHECK(max_abs_diff(alpha, want_a) < 1e-5);
  CHECK(max_abs_diff(beta, want_b) < 1e-6);
}

TEST_CASE("rule_step over a sequence matches the F64 gated delta rule") {
  std::mt19937 rng(11);
  const int32_t dk = 16, dv = 12, n = 40;
  const float scale = 1.0f / std::sqrt(float(dk));
  std::vector<float> state(dv * dk, 0.0f);
  std::vector<double> ref(dv * dk, 0.0);
  double worst_out = 0;
  for (int32_t t = 0; t < n; ++t) {
    std::vector<float> q = random_floats(rng, dk), k = random_floats(rng, dk), v = random_floats(rng, dv);
    l2_normalize(q.data(), dk, 1e-6f);
    l2_normalize(k.data(), dk, 1e-6f);
    const float g = -std::uniform_real_distribution<float>(0.0f, 0.5f)(rng);
    const float b = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    std::vector<float> out(dv);
    rule_step(state.data(), q.data(), k.data(), v.data(), g, b, scale, out.data(), dk, dv);
    for (int32_t j = 0; j < dv; ++j) {
      double* s = &ref[j * dk];
      double sk = 0;
      for (int32_t i = 0; i < dk; ++i) {
        s[i] *= std::exp(double(g));
        sk += s[i] * k[i];
      }
      const double d = double(b) * (v[j] - sk);
      double o = 0;
      for (int32_t i = 0; i < dk; ++i) {
        s[i] += d * k[i];
        o += s[i] * q[i];
      }
      worst_out = std::max(worst_out, std::fabs(out[j] - o * scale));
    }
  }
  CHECK(worst_out < 1e-5);
  CHECK(max_abs_diff(state, ref) < 1e-5);
}

TEST_CASE("rule_steps over n tokens is bit for bit n calls of rule_step") {
  std::mt19937 rng(17);
  // d_k 40: two 16-lane groups and a tail; d_v 20: a row tile of 8 and a
  // partial one; 70 tokens: two token tiles of 32 and a partial one.
  for (int32_t dk : {40, 128}) {
    CAPTURE(dk);
    const int32_t dv = 20, n = 70, stride = 3 * dk, gb_stride = 2;
    const float scale = 1.0f / std::sqrt(float(dk));
    std::vector<float> rows = random_floats(rng, size_t(n) * stride);  // q | k | v per token
    for (int32_t t = 0; t < n; ++t) {
      l2_normalize(&rows[size_t(t) * stride], dk, 1e-6f);
      l2_normalize(&rows[size_t(t) * stride + dk], dk, 1e-6f);
    }
    std::vector<float> g(size_t(n) * gb_stride), b(size_t(n) * gb_stride);
    for (float& x : g) x = -std::uniform_real_distribution<float>(0.0f, 0.5f)(rng);
    for (float& x : b) x = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    const std::vector<float> state0 = random_floats(rng, size_t(dv) * dk, -0.5f, 0.5f);
    std::vector<float> one_state = state0, one_out(size_t(n) * dv);
    for (int32_t t = 0; t < n; ++t) {
      const float* r = &rows[size_t(t) * stride];
      rule_step(one_state.data(), r, r + dk, r + 2 * dk, g[size_t(t) * gb_stride], b[size_t(t) * gb_stride], scale,
                &one_out[size_t(t) * dv], dk, dv);
    }
    std::vector<float> state = state0, out(size_t(n) * dv);
    rule_steps(state.data(), rows.data(), rows.data() + dk, stride, rows.data() + 2 * dk, stride, g.data(),
               b.data(), gb_stride, scale, out.data(), dv, n, dk, dv);
    CHECK(std::memcmp(state.data(), one_state.data(), state.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(out.data(), one_out.data(), out.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("rule_chunked equals the F64 recurrence, and bit for bit when split on a chunk boundary") {
  std::mt19937 rng(13);
  const int32_t dk = 16, dv = 8, n = 50, chunk = 16, pos0 = 5;
  const float scale = 1.0f / std::sqrt(float(dk));
  std::vector<float> q = random_floats(rng, n * dk), k = random_floats(rng, n * dk), v = random_floats(rng, n * dv);
  std::vector<float> g(n), b(n);
  for (int32_t t = 0; t < n; ++t) {
    l2_normalize(&q[t * dk], dk, 1e-6f);
    l2_normalize(&k[t * dk], dk, 1e-6f);
    g[t] = -std::uniform_real_distribution<float>(0.0f, 0.5f)(rng);
    b[t] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  }
  const std::vector<float> s_init = random_floats(rng, dv * dk, -0.5f, 0.5f);
  // F64 recurrence from s_init.
  std::vector<double> ref(s_init.begin(), s_init.end()), want_out(n * dv);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t j = 0; j < dv; ++j) {
      double* s = &ref[j * dk];
      double sk = 0;
      for (int32_t i = 0; i < dk; ++i) sk += (s[i] *= std::exp(double(g[t]))) * k[t * dk + i];
      const double d = double(b[t]) * (v[t * dv + j] - sk);
      double o = 0;
      for (int32_t i = 0; i < dk; ++i) o += (s[i] += d * k[t * dk + i]) * q[t * dk + i];
      want_out[t * dv + j] = o * scale;
    }
  }
  std::vector<float> scratch(cpu::delta_net::chunk_scratch_floats(chunk, dv));
  std::vector<float> state = s_init, out(n * dv);
  cpu::delta_net::rule_chunked(state.data(), q.data(), k.data(), dk, v.data(), dv, g.data(), b.data(), 1, scale,
                               out.data(), dv, n, pos0, chunk, dk, dv, scratch.data());
  CHECK(max_abs_diff(out, want_out) < 1e-5);
  CHECK(max_abs_diff(state, ref) < 1e-5);
  // Split where the absolute position is a multiple of the chunk: 16 - pos0 = 11, 32 - pos0 = 27.
  for (int32_t split : {11, 27}) {
    CAPTURE(split);
    std::vector<float> st = s_init, o2(n * dv);
    cpu::delta_net::rule_chunked(st.data(), q.data(), k.data(), dk, v.data(), dv, g.data(), b.data(), 1, scale,
                                 o2.data(), dv, split, pos0, chunk, dk, dv, scratch.data());
    cpu::delta_net::rule_chunked(st.data(), &q[split * dk], &k[split * dk], dk, &v[split * dv], dv, &g[split],
                                 &b[split], 1, scale, &o2[split * dv], dv, n - split, pos0 + split, chunk, dk,
                                 dv, scratch.data());
    CHECK(std::memcmp(o2.data(), out.data(), out.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(st.data(), state.data(), state.size() * sizeof(float)) == 0);
  }
}

namespace {

// The recurrent ops (delta_conv, delta_gates, delta_rule) of one DeltaNet
// layer over sequences given as (slot, tokens' inputs, pos0); returns the
// rule's output rows of each, concatenated.
struct RecurrentRun {
  DeltaNetShape shape;
  std::vector<float> conv_w, dt_bias, a;
  std::unique_ptr<Backend> backend = make_cpu_backend(2);
  KvPool pool;

  RecurrentRun() {
    shape.n_k_heads = 2, shape.n_v_heads = 4, shape.d_k = 8, shape.d_v = 8, shape.conv_width = 4;
    shape.state_offset = 5;  // a layer that is not the slot's first
    std::mt19937 rng(5);
    conv_w = random_floats(rng, shape.conv_channels() * shape.conv_width);
    dt_bias = random_floats(rng, 4);
    a = random_floats(rng, 4, -1.0f, -0.1f);
    KvGeometry g;
    g.n_layers = 1, g.n_blocks = 4, g.block_size = 16, g.n_kv_heads = 1, g.head_dim = 8;
    g.dtype = DType::F32;
    g.n_state_slots = 3;
    g.state_floats = shape.state_offset + shape.state_floats();
    pool = backend->allocate_kv_pool(g).value();
  }
  ~RecurrentRun() { backend->free_kv_pool(pool); }

  struct Piece {
    int32_t slot;
    int32_t pos0;
    const std::vector<float>* x;  // (rows, conv_channels + 2 * n_v_heads): q,k,v then alpha, beta
    int32_t row0, n;
  };

  std::vector<float> run(const std::vector<Piece>& pieces) {
    BatchBuilder b(16);
    const std::vector<int32_t> table = {0, 1, 2, 3};
    const int64_t ch = shape.conv_channels(), hv = shape.n_v_heads, width = ch + 2 * hv;
    std::vector<float> qkv, g, beta;
    for (const Piece& p : pieces) {
      b.add(std::vector<int32_t>(p.n, 5), p.pos0, table, LogitsWanted::kNone);
      b.set_last_state_slot(p.slot);
      for (int32_t r = p.row0; r < p.row0 + p.n; ++r) {
        const float* row = p.x->data() + r * width;
        qkv.insert(qkv.end(), row, row + ch);
        g.insert(g.end(), row + ch, row + ch + hv);
        beta.insert(beta.end(), row + ch + hv, row + width);
      }
    }
    const int64_t n = b.n_tokens();
    backend->prepare_batch(b.batch(), 16);
    std::vector<float> out(n * hv * shape.d_v);
    backend->delta_gates(g.data(), beta.data(), dt_bias.data(), a.data(), n, shape.n_v_heads);
    backend->delta_conv(pool, shape, conv_w.data(), qkv.data());
    backend->delta_rule(pool, shape, qkv.data(), g.data(), beta.data(), out.data(), 1e-6f);
    return out;
  }
};

}  // namespace

TEST_CASE("recurrent ops: pieces through a state slot equal the whole run bit for bit; position 0 starts from zeros") {
  RecurrentRun r;
  std::mt19937 rng(9);
  const int32_t n = 37;
  const int64_t width = r.shape.conv_channels() + 2 * r.shape.n_v_heads;
  const std::vector<float> x = random_floats(rng, n * width, -2, 2);
  const std::vector<float> y = random_floats(rng, n * width, -2, 2);
  const std::vector<float> whole = r.run({{0, 0, &x, 0, n}});
  const size_t out_row = static_cast<size_t>(r.shape.n_v_heads) * r.shape.d_v;
  for (int32_t s : {1, 3, 4, 16, 20, 36}) {
    CAPTURE(s);
    // Slot 1 holds another sequence's state first: position 0 ignores it.
    r.run({{1, 0, &y, 0, n}});
    std::vector<float> got = r.run({{1, 0, &x, 0, s}});
    // The rest in one batch beside another sequence (slot 2) at its start.
    const std::vector<float> rest = r.run({{2, 0, &y, 0, 5}, {1, s, &x, s, n - s}});
    got.insert(got.end(), rest.begin() + 5 * out_row, rest.end());
    REQUIRE(got.size() == whole.size());
    CHECK(std::memcmp(got.data(), whole.data(), whole.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("every instruction set's DeltaNet convolution and rule give the portable set's bits") {
  std::mt19937 rng(11);
  // A rule head at Qwen3.5's shape (d_k = d_v = 128) and a ragged one, over
  // 45 tokens (a tile and a part); 70 channels (four blocks of 16 and 6 scalar).
  const int64_t n = 45, channels = 70;
  const int32_t width = 4;
  const std::vector<float> x0 = random_floats(rng, static_cast<size_t>(n * channels));
  const std::vector<float> w = random_floats(rng, static_cast<size_t>(channels * width));
  const std::vector<float> tail0 = random_floats(rng, static_cast<size_t>((width - 1) * channels));
  const cpu::CpuKernels& ref = cpu::cpu_kernels(cpu::CpuIsa::kPortable);
  for (cpu::CpuIsa isa : cpu::all_cpu_isas()) {
    if (!cpu::cpu_supports(isa)) continue;
    CAPTURE(cpu::cpu_isa_name(isa));
    const cpu::CpuKernels& k = cpu::cpu_kernels(isa);
    std::vector<float> xa = x0, xb = x0, ta = tail0, tb = tail0;
    ref.delta_conv_silu(xa.data(), n, channels, w.data(), width, ta.data(), 0, channels);
    k.delta_conv_silu(xb.data(), n, channels, w.data(), width, tb.data(), 0, channels);
    CHECK(std::memcmp(xa.data(), xb.data(), xa.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(ta.data(), tb.data(), ta.size() * sizeof(float)) == 0);
    for (const auto& [d_k, d_v] : {std::pair<int32_t, int32_t>{128, 128}, {40, 24}}) {
      CAPTURE(d_k);
      std::vector<float> q = random_floats(rng, static_cast<size_t>(n * d_k));
      std::vector<float> kk = random_floats(rng, static_cast<size_t>(n * d_k));
      for (int64_t t = 0; t < n; ++t) {
        l2_normalize(q.data() + t * d_k, d_k, 1e-6f);
        l2_normalize(kk.data() + t * d_k, d_k, 1e-6f);
      }
      const std::vector<float> v = random_floats(rng, static_cast<size_t>(n * d_v));
      const std::vector<float> g = random_floats(rng, static_cast<size_t>(n), -1.0f, 0.0f);
      const std::vector<float> beta = random_floats(rng, static_cast<size_t>(n), 0.0f, 1.0f);
      const std::vector<float> s0 = random_floats(rng, static_cast<size_t>(d_v * d_k), -0.1f, 0.1f);
      std::vector<float> sa = s0, sb = s0, oa(static_cast<size_t>(n * d_v)), ob(oa.size());
      ref.delta_rule_steps(sa.data(), q.data(), kk.data(), d_k, v.data(), d_v, g.data(), beta.data(), 1, 0.125f,
                           oa.data(), d_v, n, d_k, d_v);
      k.delta_rule_steps(sb.data(), q.data(), kk.data(), d_k, v.data(), d_v, g.data(), beta.data(), 1, 0.125f,
                         ob.data(), d_v, n, d_k, d_v);
      CHECK(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace prefixd
