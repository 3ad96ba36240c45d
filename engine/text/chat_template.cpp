// Chat template detection and rendering into markup/content segments.
#include "engine/text/chat_template.h"

#include <utility>

namespace prefixd {
namespace {

bool contains(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}

// Collects segments, merging neighbours of the same kind.
class SegmentBuilder {
 public:
  void markup(const std::string& text) { add(text, true); }
  void content(const std::string& text) { add(text, false); }
  std::vector<TextSegment> take() { return std::move(segments_); }

 private:
  void add(const std::string& text, bool parse_special) {
    if (text.empty()) return;
    if (!segments_.empty() && segments_.back().parse_special == parse_special) {
      segments_.back().text += text;
    } else {
      segments_.push_back({text, parse_special});
    }
  }
  std::vector<TextSegment> segments_;
};

// Role names for the families that write the role inside a special token
// (<|user|>): anything unexpected is rendered as a user turn.
std::string fixed_role(const std::string& role) {
  return role == "system" || role == "assistant" ? role : "user";
}

// Jinja's `trim` on ASCII whitespace: Gemma's templates (2 and 3) write each
// user and model turn's content trimmed.
std::string trimmed(const std::string& text) {
  const char* kSpace = " \t\n\r\f\v";
  const size_t b = text.find_first_not_of(kSpace);
  if (b == std::string::npos) return "";
  return text.substr(b, text.find_last_not_of(kSpace) - b + 1);
}

// The families with no system role (system text opens the next user turn):
// Llama 2 and Mistral ([INST] turns), Gemma (<start_of_turn> turns).
enum class InstStyle { kLlama2, kMistral, kGemma };

void render_inst_turns(InstStyle style, const std::vector<ChatMessage>& messages,
                       bool add_generation_prompt, const std::string& eos_text,
                       SegmentBuilder& b) {
  std::string pending_system;
  bool have_system = false;
  bool first_turn = true;
  auto open_user = [&]() {
    if (style == InstStyle::kGemma) {
      b.markup("<start_of_turn>user\n");
    } else {
      b.markup(std::string(style == InstStyle::kLlama2 && !first_turn ? "<s>" : "") + "[INST] ");
    }
    if (have_system) {
      if (style == InstStyle::kLlama2) {
        b.markup("<<SYS>>\n");
        b.content(pending_system);
        b.markup("\n<</SYS>>\n\n");
      } else {
        b.content(pending_system);
        b.content("\n\n");
      }
      pending_system.clear();
      have_system = false;
    }
    first_turn = false;
  };
  auto close_user = [&]() { b.markup(style == InstStyle::kGemma ? "<end_of_turn>\n" : " [/INST]"); };
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (have_system) pending_system += "\n\n";
      pending_system += m.content;
      have_system = true;
    } else if (m.role == "assistant") {
      if (style == InstStyle::kGemma) {
        b.markup("<start_of_turn>model\n");
        b.content(trimmed(m.content));
        b.markup("<end_of_turn>\n");
      } else if (style == InstStyle::kLlama2) {
        b.content(" " + m.content + " ");
        b.markup(eos_text);
      } else {
        b.content(m.content);
        b.markup(eos_text);
      }
    } else {
      open_user();
      b.content(style == InstStyle::kGemma ? trimmed(m.content) : m.content);
      close_user();
    }
  }
  if (have_system) {  // a trailing system message: a user turn of its own
    open_user();
    close_user();
  }
  if (add_generation_prompt && style == InstStyle::kGemma) b.markup("<start_of_turn>model\n");
}

}  // namespace

std::vector<std::string> ChatTemplate::supported_names() {
  return {"chatml", "llama-3", "llama-2", "mistral", "gemma", "phi-3", "zephyr"};
}

Result<ChatTemplate> ChatTemplate::detect(const std::string& template_text,
                                          const std::string& override_name) {
  std::string names;
  for (const std::string& n : supported_names()) names += (names.empty() ? "" : ", ") + n;
  if (!override_name.empty()) {
    struct Alias {
      const char* name;
      Family family;
      const char* canonical;
    };
    static const Alias kAliases[] = {
        {"chatml", Family::kChatml, "chatml"},   {"llama-3", Family::kLlama3, "llama-3"},
        {"llama3", Family::kLlama3, "llama-3"},  {"llama-2", Family::kLlama2, "llama-2"},
        {"llama2", Family::kLlama2, "llama-2"},  {"mistral", Family::kMistral, "mistral"},
        {"gemma", Family::kGemma, "gemma"},      {"gemma3", Family::kGemma, "gemma"},
        {"phi-3", Family::kPhi3, "phi-3"},
        {"phi3", Family::kPhi3, "phi-3"},        {"zephyr", Family::kZephyr, "zephyr"},
    };
    for (const Alias& a : kAliases) {
      if (override_name == a.name) return ChatTemplate(a.family, a.canonical);
    }
    return Status::error("unknown chat template '" + override_name + "' (supported: " + names +
                         ")");
  }
  if (template_text.empty()) {
    return Status::error("the model has no tokenizer.chat_template; name one with --chat-template (" +
                         names + ")");
  }
  const std::string& t = template_text;
  if (contains(t, "<|im_start|>")) return ChatTemplate(Family::kChatml, "chatml");
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) {
    return ChatTemplate(Family::kLlama3, "llama-3");
  }
  if (contains(t, "<start_of_turn>")) return ChatTemplate(Family::kGemma, "gemma");
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) {
    return ChatTemplate(Family::kPhi3, "phi-3");
  }
  if (contains(t, "<|user|>") && contains(t, "<|assistant|>")) {
    return ChatTemplate(Family::kZephyr, "zephyr");
  }
  if (contains(t, "[INST]")) {
    if (contains(t, "<<SYS>>")) return ChatTemplate(Family::kLlama2, "llama-2");
    return ChatTemplate(Family::kMistral, "mistral");
  }
  return Status::error("unrecognised tokenizer.chat_template (first 80 bytes: '" + t.substr(0, 80) +
                       "'); name the format with --chat-template (" + names + ")");
}

std::vector<TextSegment> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt,
                                              const std::string& eos_text) const {
  SegmentBuilder b;
  switch (family_) {
    case Family::kChatml:
      for (const ChatMessage& m : messages) {
        b.markup("<|im_start|>");
        b.content(m.role);
        b.markup("\n");
        b.content(m.content);
        b.markup("<|im_end|>\n");
      }
      if (add_generation_prompt) b.markup("<|im_start|>assistant\n");
      break;
    case Family::kLlama3:
      for (const ChatMessage& m : messages) {
        b.markup("<|start_header_id|>");
        b.content(m.role);
        b.markup("<|end_header_id|>\n\n");
        b.content(m.content);
        b.markup("<|eot_id|>");
      }
      if (add_generation_prompt) b.markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case Family::kPhi3:
      for (const ChatMessage& m : messages) {
        b.markup("<|" + fixed_role(m.role) + "|>\n");
        b.content(m.content);
        b.markup("<|end|>\n");
      }
      if (add_generation_prompt) b.markup("<|assistant|>\n");
      break;
    case Family::kZephyr:
      for (const ChatMessage& m : messages) {
        b.markup("<|" + fixed_role(m.role) + "|>\n");
        b.content(m.content);
        b.markup(eos_text + "\n");
      }
      if (add_generation_prompt) b.markup("<|assistant|>\n");
      break;
    case Family::kLlama2:
      render_inst_turns(InstStyle::kLlama2, messages, add_generation_prompt, eos_text, b);
      break;
    case Family::kMistral:
      render_inst_turns(InstStyle::kMistral, messages, add_generation_prompt, eos_text, b);
      break;
    case Family::kGemma:
      render_inst_turns(InstStyle::kGemma, messages, add_generation_prompt, eos_text, b);
      break;
  }
  return b.take();
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& eos_text) const {
  std::string out;
  for (const TextSegment& s : render(messages, add_generation_prompt, eos_text)) out += s.text;
  return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer,
                                          const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt) const {
  const std::string eos_text =
      tokenizer.eos_id() >= 0 ? tokenizer.token_text(tokenizer.eos_id()) : std::string("</s>");
  return tokenizer.encode_segments(render(messages, add_generation_prompt, eos_text),
                                   /*add_special=*/true);
}

}  // namespace prefixd
