// Deterministic generated test models: llama- (and gemma3-, lfm2-, qwen35-) architecture
// GGUF files with pseudo-random weights and a synthetic SPM vocabulary,
// byte-identical on every machine. Used by the demo daemon, benchmarks and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "kernels/quant/weight_type.h"

namespace prefixd {

// Hyper-parameters of one preset (llama.cpp metadata names in comments; the
// `llama.` prefix is the architecture's).
struct PresetSpec {
  std::string name;         // general.name
  std::string arch = "llama";  // general.architecture: "llama", "gemma3" or "lfm2"
  int32_t n_embd = 0;       // llama.embedding_length
  int32_t n_layers = 0;     // llama.block_count
  int32_t n_heads = 0;      // llama.attention.head_count
  int32_t n_kv_heads = 0;   // llama.attention.head_count_kv
  int32_t n_ff = 0;         // llama.feed_forward_length
  int32_t n_vocab = 0;      // llama.vocab_size
  int32_t n_ctx = 0;        // llama.context_length
  float rope_base = 10000;  // llama.rope.freq_base
  float rms_eps = 1e-5f;    // llama.attention.layer_norm_rms_epsilon
  bool tied_output = true;  // no output.weight: the output head reuses token_embd.weight
  bool chat_template = false;  // writes a chatml tokenizer.chat_template and its control tokens
  int32_t key_length = 0;      // llama.attention.key_length when > 0 (else n_embd / n_heads)
  // gemma3 only: gemma3.attention.sliding_window (default pattern 6) and the
  // window layers' gemma3.rope.freq_base_swa.
  int32_t sliding_window = 0;
  float rope_base_window = 10000;
  // lfm2 only: the attention layers (the others are gated short convolutions;
  // lfm2.attention.head_count_kv is 0 for them) and lfm2.shortconv.l_cache.
  std::vector<int32_t> attention_layers;
  int32_t conv_l_cache = 3;
  // qwen35 only: every full_attention_interval-th layer is gated attention,
  // the rest Gated DeltaNet with ssm_k_heads key heads and ssm_v_heads value
  // heads of ssm_head_dim (qwen35.ssm.*) and a convolution of ssm_conv_width;
  // rope_dims rotated dims per head (rope.dimension_count, 0 = all) in the
  // M-RoPE rope_sections (pairs per section).
  int32_t full_attention_interval = 0;
  int32_t ssm_k_heads = 0;
  int32_t ssm_v_heads = 0;
  int32_t ssm_head_dim = 0;
  int32_t ssm_conv_width = 4;
  int32_t rope_dims = 0;
  std::vector<int32_t> rope_sections;
  bool is_conv(int32_t layer) const;
  bool is_delta_net(int32_t layer) const;
  int32_t head_dim() const { return key_length > 0 ? key_length : n_embd / n_heads; }
};

// The presets: "tiny", "smol-135m", "demo", "llama-245m" (1024 hidden, 16
// layers, 16 heads / 4 KV heads, FFN 2816, vocab 32000, untied: every row a
// multiple of 256, so the K quantizations need no fallback), "llama-1b"
// (Llama-3.2-1B's layer shapes: 2048 hidden, 16 layers, 32 heads / 8 KV heads,
// FFN 8192, synthetic vocab 32000, untied, RoPE base 500000, context 16384;
// 2.2 GB as BF16, the GPU benchmark model of kernels/cuda/README.md) and
// "gemma3-1b" (Gemma 3 1B's shape: gemma3, 1152 hidden, 26 layers, 4 heads /
// 1 KV head of 256, FFN 6912, window 512, vocab 262144, tied), "lfm2-tiny"
// (rand-lfm2-bf16's shape: 256 hidden, 6 layers, attention in 2 and 5) and "lfm2-350m"
// (LiquidAI/LFM2-350M's shape: lfm2, 1024 hidden, 16 layers of which 2, 5, 8,
// 10, 12 and 14 attention with 16 heads / 8 KV heads, the rest short
// convolutions of width 3, FFN 4608, vocab 65536, tied, RoPE base 1000000),
// "qwen35-tiny" (rand-qwen35-bf16's shape: qwen35, 256 hidden, 4 layers,
// DeltaNet 2 key / 4 value heads of 32, attention in layer 3 with 4 heads /
// 2 KV heads of 64, 16 rotated dims) and "qwen35-0.8b" (Qwen3.5-0.8B's
// shape: 1024 hidden, 24 layers, every 4th gated attention with 8 heads / 2
// KV heads of 256 and 64 rotated dims, the rest Gated DeltaNet with 16 key
// and 16 value heads of 128, convolution width 4, FFN 3584, vocab 248320,
// tied, RoPE base 1e7).
std::vector<std::string> preset_names();
// Fails for an unknown name (the message lists the known ones).
Result<PresetSpec> preset_spec(const std::string& preset);

// One tensor of a preset file, in file order: ggml dims (ne[0] = fan_in for
// matrices). Norms are F32 [n_embd]; matrices take the requested weight type.
struct PresetTensor {
  std::string name;
  std::vector<int64_t> dims;
  bool is_norm = false;
  bool is_conv = false;  // a convolution kernel [width, channels], F32 (lfm2, qwen35)
  bool is_decay = false;  // qwen35's ssm_a [value heads], F32, negative
};
// Every tensor the writer emits for `spec`, in the order it emits them.
std::vector<PresetTensor> preset_tensors(const PresetSpec& spec);
// The bytes of all tensor data (no header or padding) with matrices stored as
// `weight_type` (F32, F16 or BF16): what the file costs on disk and in memory.
uint64_t preset_tensor_bytes(const PresetSpec& spec, WeightType weight_type);

// One piece of the synthetic SPM vocabulary.
struct VocabPiece {
  std::string text;  // UTF-8; U+2581 stands for a space
  float score = 0;   // higher = merged first (0 for special and byte tokens)
  int32_t type = 1;  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte
};

// The synthetic vocabulary with exactly n_vocab pieces (n_vocab >= 1024):
// <unk>, <s>, </s>, <0x00>..<0xFF> (ids 3..258), "▁", single characters,
// English words and subwords with every prefix of each word present (so SPM
// merges reach whole words), then letter combinations as filler. With
// `chatml`, the last two ids are the control tokens <|im_start|>, <|im_end|>.
// No text appears twice.
std::vector<VocabPiece> synthetic_vocab(int32_t n_vocab, bool chatml);

// Writes the preset as a GGUF v3 file at `path` (atomically). Matrices are
// stored as `weight_type` (F32, F16 or BF16; other types are refused); norm
// weights are always F32. Weights: ~N(0, 1/fan_in) from a counter-based
// splitmix64 generator, so the bytes do not depend on the thread count. Fills
// with all hardware threads; safe to call from several threads at once.
Status write_preset_model(const std::string& preset, WeightType weight_type,
                          const std::string& path);

// The same with the type named, any case: "f32", "f16", "bf16", or a
// quantization mix (quant_mix.h: "q8_0", "q4_k_m", ...), which generates the
// F32 model in memory and quantizes it with quantize_gguf (quantize_model.h),
// exactly as `prefixd quantize` would the F32 file.
Status write_preset_model(const std::string& preset, const std::string& type_name,
                          const std::string& path);

}  // namespace prefixd
