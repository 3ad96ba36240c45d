// StopMatcher: finds stop strings in streamed text whose pieces (decoded
// tokens) may split a stop string anywhere. Holds back text that could still
// become a stop string; emits the rest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prefixd {

// Thread-safety: none; one per request, used by the engine thread.
class StopMatcher {
 public:
  // Empty stop strings are ignored.
  explicit StopMatcher(std::vector<std::string> stop_strings);

  struct Output {
    std::string text;      // safe to emit now (may be empty)
    bool stopped = false;  // a stop string matched: `text` ends just before it
    int32_t stop_index = -1;  // which stop string (index into the constructor's list)
  };

  // Feeds the next decoded piece. Once stopped, further pieces are ignored
  // (empty output, stopped = true). With several stop strings, the one that
  // starts earliest in the text wins (the longest on a tie).
  Output feed(std::string_view piece);

  // At the end of the stream (length, EOS, cancel): the held-back text, which
  // turned out not to be a stop string. Empty once stopped.
  std::string flush();

  bool stopped() const { return stopped_; }
  bool empty() const { return stops_.empty(); }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::vector<int32_t> stop_ids_;  // index of each kept stop in the caller's list
  std::string held_;               // text not yet emitted: a prefix of some stop string
  bool stopped_ = false;
};

}  // namespace prefixd
