// SseParser: line splitting across chunk boundaries, event assembly, and the bounds.
#include "client/sse_parser.h"

#include <string_view>

namespace prefixd::client {

// Drops what was buffered and keeps the reason; the parser accepts nothing more.
bool SseParser::fail(const char* what) {
  const std::string limit = max_bytes_ % (size_t{1} << 20) == 0
                                ? std::to_string(max_bytes_ >> 20) + " MiB"
                                : std::to_string(max_bytes_) + " bytes";
  error_ = std::string(what) + " longer than " + limit + ": stream aborted";
  line_.clear();
  line_.shrink_to_fit();
  data_.clear();
  data_.shrink_to_fit();
  return false;
}

bool SseParser::feed(const char* bytes, size_t n_bytes,
                     const std::function<bool(const std::string&)>& on_event) {
  if (!error_.empty()) return false;
  size_t i = 0;
  while (i < n_bytes) {
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (bytes[i] == '\n') {  // second half of a \r\n split or not across chunks
        ++i;
        continue;
      }
    }
    size_t j = i;
    while (j < n_bytes && bytes[j] != '\n' && bytes[j] != '\r') ++j;
    if (j - i > max_bytes_ - line_.size()) return fail("SSE line");
    line_.append(bytes + i, j - i);
    if (j == n_bytes) break;
    last_was_cr_ = bytes[j] == '\r';
    i = j + 1;
    if (!end_line(on_event)) return false;
  }
  return true;
}

bool SseParser::finish(const std::function<bool(const std::string&)>& on_event) {
  if (!error_.empty()) return false;
  last_was_cr_ = false;
  if (!line_.empty() && !end_line(on_event)) return false;
  return end_line(on_event);  // an empty line: dispatches pending data
}

bool SseParser::end_line(const std::function<bool(const std::string&)>& on_event) {
  if (line_.empty()) {
    if (!has_data_) return true;
    std::string event = std::move(data_);
    data_.clear();
    has_data_ = false;
    return on_event(event);
  }
  if (line_[0] != ':') {
    size_t colon = line_.find(':');
    std::string_view field(line_.data(), colon == std::string::npos ? line_.size() : colon);
    if (field == "data") {
      size_t start = colon == std::string::npos ? line_.size() : colon + 1;
      if (start < line_.size() && line_[start] == ' ') ++start;
      if (data_.size() + 1 + (line_.size() - start) > max_bytes_) return fail("SSE event");
      if (has_data_) data_.push_back('\n');
      data_.append(line_, start, std::string::npos);
      has_data_ = true;
    }
  }
  line_.clear();
  return true;
}

}  // namespace prefixd::client
