// Generated test models: preset table, synthetic SPM vocabulary and a
// counter-based weight generator (value i of a tensor depends only on the
// preset, the tensor name and i, so any thread split gives the same bytes).
#include "engine/model/model_presets.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/quant_mix.h"
#include "engine/model/quantize_model.h"

namespace prefixd {
namespace {

const char* const kSpace = "\xE2\x96\x81";  // U+2581, SPM's space

// Common English words, most frequent first (a mix of general text and simple
// stories). Each gets "▁word" plus every "▁prefix", and the bare word.
const char* const kWords =
    "the of and to a in is it you that he was for on are with as i his they be at one have this "
    "from or had by not word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line "
    "differ turn cause much mean before move right boy old too same tell does set three want air "
    "well also play small end put home read hand port large spell add even land here must big high "
    "such follow act why ask men change went light kind off need house picture try us again animal "
    "point mother world near build self earth father head stand own page should country found "
    "answer school grow study still learn plant cover food sun four between state keep eye never "
    "last let thought city tree cross farm hard start might story saw far sea draw left late run "
    "while press close night real life few north open seem together next white children begin got "
    "walk example ease paper group always music those both mark often letter until mile river car "
    "feet care second book carry took science eat room friend began idea fish mountain stop once "
    "base hear horse cut sure watch color face wood main enough plain girl usual young ready above "
    "ever red list though feel talk bird soon body dog family direct pose leave song measure door "
    "product black short numeral class wind question happen complete ship area half rock order "
    "fire south problem piece told knew pass since top whole king space heard best hour better "
    "true during hundred five remember step early hold west ground interest reach fast verb sing "
    "listen six table travel less morning ten simple several vowel toward war lay against pattern "
    "slow center love person money serve appear road map rain rule govern pull cold notice voice "
    "unit power town fine certain fly fall lead cry dark machine note wait plan figure star box "
    "noun field rest correct able pound done beauty drive stood contain front teach week final gave "
    "green oh quick develop ocean warm free minute strong special mind behind clear tail produce "
    "fact street inch multiply nothing course stay wheel full force blue object decide surface deep "
    "moon island foot system busy test record boat common gold possible plane stead dry wonder "
    "laugh thousand ago ran check game shape equate hot miss brought heat snow tire bring yes "
    "distant fill east paint language among happy sad named lily ball toy park mom dad sky tiny "
    "upon saw loved wanted played jumped smiled friends cat dog bear bunny garden flower tree "
    "hello hi thanks please sorry today tomorrow yesterday computer data model cache token prefix "
    "server request response memory system file network code program function value return "
    "question answer help assistant user message chat explain example because really";

// Frequent suffixes and word pieces (bare, used inside words).
const char* const kSubwords =
    "s es ed ing er ers est ly tion tions sion ment ments ness able ible al ial ful less ous ive "
    "ize ise ity ty ance ence ant ent ist ism ure age ery ory ic ical en an ian y ie ies ied "
    "re un in im dis pre pro con com ex de sub inter over out up th ch sh wh qu ck ng nt st "
    "ll ss tt pp ff ee oo ea ai ou ow ay ey oy ar or ir ur";

// The chatml template (Jinja) written for presets with chat_template = true.
const char* const kChatmlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";

std::vector<std::string> split_words(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ' ' || *p == '\0') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur.push_back(*p);
    }
  }
  return out;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Element i of a tensor: Irwin-Hall sum of four 16-bit uniforms (approximately
// normal, unit variance after scaling) times `stddev`. Integer arithmetic and a
// single float multiply, so every compiler and FMA setting gives the same bits.
struct WeightGen {
  uint64_t seed;
  float scale;  // stddev * sqrt(3) / 65536
  float operator()(uint64_t i) const {
    uint64_t r = splitmix64(seed + i * 0xD1B54A32D192ED03ull);
    int32_t s = static_cast<int32_t>(r & 0xffff) + static_cast<int32_t>((r >> 16) & 0xffff) +
                static_cast<int32_t>((r >> 32) & 0xffff) + static_cast<int32_t>(r >> 48) -
                2 * 65536 + 2;  // centred: range [-131070, 131068]
    return static_cast<float>(s) * scale;
  }
};

// Fills `out` (n elements of `type`) from `gen`, split over threads.
void fill_tensor(const WeightGen& gen, GgmlType type, uint64_t n, uint8_t* out) {
  auto work = [&](uint64_t begin, uint64_t end) {
    switch (type) {
      case GgmlType::F32: {
        float* p = reinterpret_cast<float*>(out);
        for (uint64_t i = begin; i < end; ++i) p[i] = gen(i);
        break;
      }
      case GgmlType::F16: {
        uint16_t* p = reinterpret_cast<uint16_t*>(out);
        for (uint64_t i = begin; i < end; ++i) p[i] = f32_to_f16(gen(i));
        break;
      }
      case GgmlType::BF16: {
        uint16_t* p = reinterpret_cast<uint16_t*>(out);
        for (uint64_t i = begin; i < end; ++i) p[i] = f32_to_bf16(gen(i));
        break;
      }
      default:
        PREFIXD_CHECK(false, "the generator writes F32, F16 or BF16 (then quantize_gguf)");
    }
  };
  unsigned n_threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  if (n < (1u << 16) || n_threads == 1) {
    work(0, n);
    return;
  }
  std::vector<std::thread> threads;
  uint64_t chunk = (n + n_threads - 1) / n_threads;
  for (unsigned t = 0; t < n_threads; ++t) {
    uint64_t b = std::min<uint64_t>(n, t * chunk), e = std::min<uint64_t>(n, b + chunk);
    if (b < e) threads.emplace_back(work, b, e);
  }
  for (std::thread& th : threads) th.join();
}

class VocabBuilder {
 public:
  explicit VocabBuilder(size_t capacity) : capacity_(capacity) {}
  bool full() const { return pieces_.size() >= capacity_; }
  // Adds a piece unless present or full. Normal pieces get score -rank.
  void add(const std::string& text, int32_t type) {
    if (full() || !seen_.insert(text).second) return;
    float score = 0;
    if (type == 1) {
      if (n_normal_ > 0) score = -static_cast<float>(n_normal_);  // the first keeps +0
      ++n_normal_;
    }
    pieces_.push_back(VocabPiece{text, score, type});
  }
  // Adds every prefix of `word` (at least one character past `head`), then the word.
  void add_with_prefixes(const std::string& head, const std::string& word) {
    for (size_t len = 1; len <= word.size(); ++len) add(head + word.substr(0, len), 1);
  }
  std::vector<VocabPiece> take() { return std::move(pieces_); }

 private:
  size_t capacity_;
  std::vector<VocabPiece> pieces_;
  std::unordered_set<std::string> seen_;
  int64_t n_normal_ = 0;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny",      "smol-135m", "demo",      "llama-245m",  "llama-1b",
          "gemma3-1b", "lfm2-tiny", "lfm2-350m", "qwen35-tiny", "qwen35-0.8b"};
}

bool PresetSpec::is_delta_net(int32_t layer) const {
  return arch == "qwen35" && (layer + 1) % full_attention_interval != 0;
}

bool PresetSpec::is_conv(int32_t layer) const {
  return arch == "lfm2" && std::find(attention_layers.begin(), attention_layers.end(), layer) == attention_layers.end();
}

Result<PresetSpec> preset_spec(const std::string& preset) {
  PresetSpec s;
  s.name = preset;
  if (preset == "tiny") {
    s.n_embd = 256, s.n_layers = 4, s.n_heads = 8, s.n_kv_heads = 4, s.n_ff = 768;
    s.n_vocab = 32000, s.n_ctx = 4096, s.rope_base = 10000, s.tied_output = false;
  } else if (preset == "smol-135m") {
    s.n_embd = 576, s.n_layers = 30, s.n_heads = 9, s.n_kv_heads = 3, s.n_ff = 1536;
    s.n_vocab = 49152, s.n_ctx = 8192, s.rope_base = 100000, s.tied_output = true;
  } else if (preset == "demo") {
    s.n_embd = 256, s.n_layers = 4, s.n_heads = 8, s.n_kv_heads = 4, s.n_ff = 768;
    s.n_vocab = 4096, s.n_ctx = 4096, s.rope_base = 10000, s.tied_output = true;
    s.chat_template = true;
  } else if (preset == "llama-245m") {  // every row a multiple of 256: K quantizations fit
    s.n_embd = 1024, s.n_layers = 16, s.n_heads = 16, s.n_kv_heads = 4, s.n_ff = 2816;
    s.n_vocab = 32000, s.n_ctx = 8192, s.rope_base = 500000, s.tied_output = false;
  } else if (preset == "llama-1b") {  // Llama-3.2-1B's layers, synthetic vocabulary: GPU benchmarks
    s.n_embd = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8, s.n_ff = 8192;
    s.n_vocab = 32000, s.n_ctx = 16384, s.rope_base = 500000, s.tied_output = false;
  } else if (preset == "gemma3-1b") {  // google/gemma-3-1b-it's shape
    s.arch = "gemma3";
    s.n_embd = 1152, s.n_layers = 26, s.n_heads = 4, s.n_kv_heads = 1, s.key_length = 256;
    s.n_ff = 6912, s.n_vocab = 262144, s.n_ctx = 32768, s.rope_base = 1000000, s.tied_output = true;
    s.sliding_window = 512, s.rope_base_window = 10000;
    s.rms_eps = 1e-6f;
    return s;
  } else if (preset == "lfm2-tiny") {  // rand-lfm2-bf16's shape, for tests
    s.arch = "lfm2";
    s.n_embd = 256, s.n_layers = 6, s.n_heads = 4, s.n_kv_heads = 2, s.n_ff = 768;
    s.n_vocab = 1024, s.n_ctx = 4096, s.rope_base = 1000000, s.tied_output = true;
    s.attention_layers = {2, 5};
    s.conv_l_cache = 3;
  } else if (preset == "lfm2-350m") {  // LiquidAI/LFM2-350M's shape
    s.arch = "lfm2";
    s.n_embd = 1024, s.n_layers = 16, s.n_heads = 16, s.n_kv_heads = 8, s.n_ff = 4608;
    s.n_vocab = 65536, s.n_ctx = 32768, s.rope_base = 1000000, s.tied_output = true;
    s.attention_layers = {2, 5, 8, 10, 12, 14};
    s.conv_l_cache = 3;
  } else if (preset == "qwen35-tiny") {  // rand-qwen35-bf16's shape, for tests
    s.arch = "qwen35";
    s.n_embd = 256, s.n_layers = 4, s.n_heads = 4, s.n_kv_heads = 2, s.key_length = 64, s.n_ff = 768;
    s.n_vocab = 1024, s.n_ctx = 4096, s.rope_base = 10000000, s.tied_output = true;
    s.full_attention_interval = 4, s.ssm_k_heads = 2, s.ssm_v_heads = 4, s.ssm_head_dim = 32;
    s.rope_dims = 16, s.rope_sections = {3, 3, 2, 0};
    s.rms_eps = 1e-6f;
    return s;
  } else if (preset == "qwen35-0.8b") {  // Qwen/Qwen3.5-0.8B's shape
    s.arch = "qwen35";
    s.n_embd = 1024, s.n_layers = 24, s.n_heads = 8, s.n_kv_heads = 2, s.key_length = 256, s.n_ff = 3584;
    s.n_vocab = 248320, s.n_ctx = 32768, s.rope_base = 10000000, s.tied_output = true;
    s.full_attention_interval = 4, s.ssm_k_heads = 16, s.ssm_v_heads = 16, s.ssm_head_dim = 128;
    s.rope_dims = 64, s.rope_sections = {11, 11, 10, 0};
    s.rms_eps = 1e-6f;
    return s;
  } else {
    std::string known;
    for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    return Status::error("unknown model preset '" + preset + "' (known: " + known + ")");
  }
  s.rms_eps = 1e-5f;
  return s;
}

namespace {

// Filler until b is full: letter combinations of growing length (2 to 4),
// bare then with a leading space.
void add_filler(VocabBuilder& b) {
  const std::string sp = kSpace;
  std::string combo;
  for (int len = 2; len <= 4 && !b.full(); ++len) {
    uint64_t count = 1;
    for (int k = 0; k < len; ++k) count *= 26;
    for (int with_space = 0; with_space < 2 && !b.full(); ++with_space) {
      for (uint64_t idx = 0; idx < count && !b.full(); ++idx) {
        combo.assign(len, 'a');
        uint64_t x = idx;
        for (int k = len - 1; k >= 0; --k, x /= 26) combo[k] = static_cast<char>('a' + x % 26);
        b.add(with_space ? sp + combo : combo, 1);
      }
    }
  }
}

}  // namespace

std::vector<VocabPiece> synthetic_vocab(int32_t n_vocab, bool chatml) {
  PREFIXD_CHECK(n_vocab >= 1024, "the synthetic vocabulary needs at least 1024 ids");
  const size_t n_body = static_cast<size_t>(n_vocab) - (chatml ? 2 : 0);
  VocabBuilder b(n_body);
  b.add("<unk>", 2);
  b.add("<s>", 3);
  b.add("</s>", 3);
  for (int byte = 0; byte < 256; ++byte) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", byte);
    b.add(buf, 6);
  }
  const std::string sp = kSpace;
  b.add(sp, 1);
  for (char c = 'a'; c <= 'z'; ++c) b.add(std::string(1, c), 1);
  for (char c = 'a'; c <= 'z'; ++c) b.add(sp + c, 1);
  for (char c = '!'; c <= '~'; ++c) b.add(std::string(1, c), 1);
  for (char c = '!'; c <= '~'; ++c) b.add(sp + c, 1);
  b.add("\n", 1);
  b.add("\n\n", 1);
  b.add(sp + sp, 1);
  std::vector<std::string> words = split_words(kWords);
  std::vector<std::string> subwords = split_words(kSubwords);
  // Interleave so a small vocabulary still gets the most frequent words and suffixes.
  size_t n_sub = 0;
  for (size_t w = 0; w < words.size(); ++w) {
    b.add_with_prefixes(sp, words[w]);
    if (w % 4 == 3 && n_sub < subwords.size()) b.add_with_prefixes("", subwords[n_sub++]);
  }
  for (; n_sub < subwords.size(); ++n_sub) b.add_with_prefixes("", subwords[n_sub]);
  for (size_t w = 0; w < words.size(); ++w) {
    std::string cap = words[w];
    cap[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(cap[0])));
    b.add_with_prefixes(sp, cap);
  }
  for (const std::string& w : words) b.add_with_prefixes("", w);
  for (const std::string& w : words) {  // the bare word followed by common suffixes
    for (const char* suf : {"s", "ed", "ing"}) b.add(sp + w + suf, 1);
  }
  for (int d = 0; d < 100; ++d) b.add(std::to_string(d), 1);
  add_filler(b);
  PREFIXD_CHECK(b.full(), "synthetic vocabulary filler ran out");
  std::vector<VocabPiece> pieces = b.take();
  if (chatml) {
    pieces.push_back(VocabPiece{"<|im_start|>", 0, 3});
    pieces.push_back(VocabPiece{"<|im_end|>", 0, 3});
  }
  return pieces;
}

std::vector<PresetTensor> preset_tensors(const PresetSpec& s) {
  const int64_t E = s.n_embd, F = s.n_ff, V = s.n_vocab;
  const int64_t q_rows = static_cast<int64_t>(s.n_heads) * s.head_dim();
  const int64_t kv_rows = static_cast<int64_t>(s.n_kv_heads) * s.head_dim();
  const bool gemma3 = s.arch == "gemma3";
  const bool lfm2 = s.arch == "lfm2";
  const bool qwen35 = s.arch == "qwen35";
  std::vector<PresetTensor> out;
  out.push_back({"token_embd.weight", {E, V}, false});
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    out.push_back({p + "attn_norm.weight", {E}, true});
    if (s.is_delta_net(l)) {  // qwen35: q|k|v projection and its convolution, gates, output
      const int64_t heads = s.ssm_v_heads, value_dim = heads * s.ssm_head_dim;
      const int64_t channels = 2 * int64_t{s.ssm_k_heads} * s.ssm_head_dim + value_dim;
      out.push_back({p + "attn_qkv.weight", {E, channels}, false});
      out.push_back({p + "attn_gate.weight", {E, value_dim}, false});
      out.push_back({p + "ssm_beta.weight", {E, heads}, false});
      out.push_back({p + "ssm_alpha.weight", {E, heads}, false});
      out.push_back({p + "ssm_conv1d.weight", {s.ssm_conv_width, channels}, false, true});
      out.push_back({p + "ssm_dt.bias", {heads}, true});
      out.push_back({p + "ssm_a", {heads}, false, false, true});
      out.push_back({p + "ssm_norm.weight", {s.ssm_head_dim}, true});
      out.push_back({p + "ssm_out.weight", {value_dim, E}, false});
    } else if (qwen35) {  // gated attention: attn_q holds query and gate per head
      out.push_back({p + "attn_q.weight", {E, 2 * q_rows}, false});
      out.push_back({p + "attn_k.weight", {E, kv_rows}, false});
      out.push_back({p + "attn_v.weight", {E, kv_rows}, false});
      out.push_back({p + "attn_output.weight", {q_rows, E}, false});
      out.push_back({p + "attn_q_norm.weight", {s.head_dim()}, true});
      out.push_back({p + "attn_k_norm.weight", {s.head_dim()}, true});
    } else if (s.is_conv(l)) {  // lfm2: in-projection to B | C | x, kernel, out-projection
      out.push_back({p + "shortconv.conv.weight", {s.conv_l_cache, E}, false, true});
      out.push_back({p + "shortconv.in_proj.weight", {E, 3 * E}, false});
      out.push_back({p + "shortconv.out_proj.weight", {E, E}, false});
    } else {
      out.push_back({p + "attn_q.weight", {E, q_rows}, false});
      out.push_back({p + "attn_k.weight", {E, kv_rows}, false});
      out.push_back({p + "attn_v.weight", {E, kv_rows}, false});
      out.push_back({p + "attn_output.weight", {q_rows, E}, false});
    }
    if (gemma3 || (lfm2 && !s.is_conv(l))) {
      out.push_back({p + "attn_q_norm.weight", {s.head_dim()}, true});
      out.push_back({p + "attn_k_norm.weight", {s.head_dim()}, true});
    }
    if (gemma3) out.push_back({p + "post_attention_norm.weight", {E}, true});
    out.push_back({p + (qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight"), {E}, true});
    out.push_back({p + "ffn_gate.weight", {E, F}, false});
    out.push_back({p + "ffn_up.weight", {E, F}, false});
    out.push_back({p + "ffn_down.weight", {F, E}, false});
    if (gemma3) out.push_back({p + "post_ffw_norm.weight", {E}, true});
  }
  out.push_back({lfm2 ? "token_embd_norm.weight" : "output_norm.weight", {E}, true});
  if (!s.tied_output) out.push_back({"output.weight", {E, V}, false});
  return out;
}

uint64_t preset_tensor_bytes(const PresetSpec& s, WeightType weight_type) {
  uint64_t total = 0;
  for (const PresetTensor& t : preset_tensors(s)) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    total += ggml_type_bytes(t.is_norm || t.is_conv || t.is_decay ? GgmlType::F32 : weight_type, n);
  }
  return total;
}

namespace {

// The model's metadata: architecture, dimensions, RoPE, file type.
void write_preset_metadata(const PresetSpec& s, WeightType wtype, GgufWriter& w) {
  const int32_t head_dim = s.head_dim();
  const std::string a = s.arch + ".";
  const bool gemma3 = s.arch == "gemma3";
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", "prefixd-" + s.name);
  w.set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layers));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  if (s.arch == "lfm2") {  // per layer: 0 for a convolution layer
    std::vector<int32_t> kv(static_cast<size_t>(s.n_layers));
    for (int32_t l = 0; l < s.n_layers; ++l) kv[static_cast<size_t>(l)] = s.is_conv(l) ? 0 : s.n_kv_heads;
    w.set_i32_array(a + "attention.head_count_kv", kv);
    w.set_u32(a + "shortconv.l_cache", static_cast<uint32_t>(s.conv_l_cache));
  } else {
    w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  }
  if (s.arch == "qwen35") {
    w.set_u32(a + "full_attention_interval", static_cast<uint32_t>(s.full_attention_interval));
    w.set_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.ssm_conv_width));
    w.set_u32(a + "ssm.state_size", static_cast<uint32_t>(s.ssm_head_dim));
    w.set_u32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_k_heads));
    w.set_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_v_heads));
    w.set_u32(a + "ssm.inner_size", static_cast<uint32_t>(s.ssm_v_heads * s.ssm_head_dim));
    w.set_i32_array(a + "rope.dimension_sections", s.rope_sections);
  }
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + "rope.freq_base", s.rope_base);
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.rope_dims > 0 ? s.rope_dims : head_dim));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(s.n_vocab));
  if (s.key_length > 0) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(s.key_length));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(s.key_length));
  }
  if (gemma3 && s.sliding_window > 0) {
    w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    w.set_f32(a + "rope.freq_base_swa", s.rope_base_window);
  }
  w.set_u32("general.file_type", static_cast<uint32_t>(wtype == WeightType::F32 ? 0
                                                       : wtype == WeightType::F16 ? 1
                                                                                  : 32));
}

// The synthetic SentencePiece-style vocabulary (and ChatML template when the preset has one).
void write_preset_vocab(const PresetSpec& s, GgufWriter& w) {
  std::vector<VocabPiece> vocab = synthetic_vocab(s.n_vocab, s.chat_template);
  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const VocabPiece& p : vocab) {
    texts.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", texts);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  if (s.chat_template) {
    w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(s.n_vocab - 1));  // <|im_end|>
    w.set_string("tokenizer.chat_template", kChatmlTemplate);
  }
}

// Every tensor of preset_tensors(s): matrices in `wtype`, norms in F32, from
// a generator seeded by the preset's and the tensor's names.
void write_preset_tensors(const PresetSpec& s, WeightType wtype, GgufWriter& w) {
  const uint64_t preset_seed = fnv1a64("prefixd-preset:" + s.name);
  // A matrix [fan_in, fan_out] (ne[0] = fan_in) with stddev 1/sqrt(fan_in).
  auto matrix = [&](const std::string& name, int64_t fan_in, int64_t fan_out) {
    uint64_t n = static_cast<uint64_t>(fan_in * fan_out);
    std::vector<uint8_t> data(ggml_type_bytes(wtype, static_cast<int64_t>(n)));
    float stddev = 1.0f / std::sqrt(static_cast<float>(fan_in));
    WeightGen gen{splitmix64(preset_seed ^ fnv1a64(name)), stddev * 1.7320508f / 65536.0f};
    fill_tensor(gen, wtype, n, data.data());
    w.add_tensor(name, wtype, {fan_in, fan_out}, std::move(data));
  };
  // A norm weight [n] (default n_embd), F32, near 1.
  auto norm = [&](const std::string& name, int64_t n = 0) {
    if (n == 0) n = s.n_embd;
    std::vector<uint8_t> data(ggml_type_bytes(GgmlType::F32, n));
    WeightGen gen{splitmix64(preset_seed ^ fnv1a64(name)), 0.05f * 1.7320508f / 65536.0f};
    for (int64_t i = 0; i < n; ++i) {
      volatile float x = gen(static_cast<uint64_t>(i));  // volatile: no fused multiply-add
      float v = 1.0f + x;
      std::memcpy(data.data() + 4 * i, &v, 4);
    }
    w.add_tensor(name, GgmlType::F32, {n}, std::move(data));
  };

  // An lfm2 convolution kernel [l_cache, n_embd], F32, stddev 1/sqrt(l_cache).
  auto conv = [&](const std::string& name, int64_t taps, int64_t channels) {
    const int64_t n = taps * channels;
    std::vector<uint8_t> data(ggml_type_bytes(GgmlType::F32, n));
    WeightGen gen{splitmix64(preset_seed ^ fnv1a64(name)),
                  1.7320508f / std::sqrt(static_cast<float>(taps)) / 65536.0f};
    fill_tensor(gen, GgmlType::F32, static_cast<uint64_t>(n), data.data());
    w.add_tensor(name, GgmlType::F32, {taps, channels}, std::move(data));
  };

  // qwen35's ssm_a [heads], F32: the log-decay scale, in [-1.5, -0.5].
  auto decay = [&](const std::string& name, int64_t n) {
    std::vector<uint8_t> data(ggml_type_bytes(GgmlType::F32, n));
    WeightGen gen{splitmix64(preset_seed ^ fnv1a64(name)), 1.7320508f / 65536.0f};
    for (int64_t i = 0; i < n; ++i) {
      volatile float half_u = 0.5f * std::clamp(gen(static_cast<uint64_t>(i)), -1.0f, 1.0f);  // no FMA
      const float v = -1.0f - half_u;
      std::memcpy(data.data() + 4 * i, &v, 4);
    }
    w.add_tensor(name, GgmlType::F32, {n}, std::move(data));
  };

  for (const PresetTensor& t : preset_tensors(s)) {
    if (t.is_norm) {
      norm(t.name, t.dims[0]);
    } else if (t.is_decay) {
      decay(t.name, t.dims[0]);
    } else if (t.is_conv) {
      conv(t.name, t.dims[0], t.dims[1]);
    } else {
      matrix(t.name, t.dims[0], t.dims[1]);
    }
  }
}

// The whole preset model with matrices in `wtype` (F32, F16 or BF16).
Status build_preset(const PresetSpec& s, WeightType wtype, GgufWriter& w) {
  write_preset_metadata(s, wtype, w);
  write_preset_vocab(s, w);
  write_preset_tensors(s, wtype, w);
  return Status();
}

}  // namespace

Status write_preset_model(const std::string& preset, WeightType weight_type,
                          const std::string& path) {
  Result<PresetSpec> spec = preset_spec(preset);
  if (!spec.ok()) return spec.status();
  if (weight_type != WeightType::F32 && weight_type != WeightType::F16 &&
      weight_type != WeightType::BF16) {
    return Status::error(std::string("generated models are F32, F16 or BF16, not ") +
                         weight_type_name(weight_type) + "; pass a quantization name (" +
                         quant_mix_names() + ") to get a quantized preset");
  }
  GgufWriter w(3, 32);
  if (Status st = build_preset(*spec, weight_type, w); !st.ok()) return st;
  return w.write_file(path);
}

Status write_preset_model(const std::string& preset, const std::string& type_name,
                          const std::string& path) {
  const std::string t = lower(type_name);
  if (t == "f32") return write_preset_model(preset, WeightType::F32, path);
  if (t == "f16") return write_preset_model(preset, WeightType::F16, path);
  if (t == "bf16") return write_preset_model(preset, WeightType::BF16, path);
  Result<QuantMix> mix = find_quant_mix(type_name);
  if (!mix.ok()) {
    return Status::error("unknown preset weight type '" + type_name +
                         "' (accepted, any case: f32, f16, bf16, " + quant_mix_names() + ")");
  }
  Result<PresetSpec> spec = preset_spec(preset);
  if (!spec.ok()) return spec.status();
  // F32 in memory, then the same quantizer as `prefixd quantize`.
  std::vector<uint8_t> f32_bytes;
  {
    GgufWriter w(3, 32);
    if (Status st = build_preset(*spec, WeightType::F32, w); !st.ok()) return st;
    f32_bytes = w.to_bytes();
  }
  Result<std::shared_ptr<GgufFile>> f32 = GgufFile::parse(f32_bytes.data(), f32_bytes.size());
  if (!f32.ok()) return f32.status();
  return quantize_gguf(**f32, path, mix->name, nullptr);
}

}  // namespace prefixd
