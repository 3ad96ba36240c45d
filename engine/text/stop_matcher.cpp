// StopMatcher (see stop_matcher.h). The held text is always shorter than the
// longest stop string, so each feed scans only held + piece.
#include "engine/text/stop_matcher.h"

#include <algorithm>

namespace prefixd {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    stops_.push_back(std::move(stop_strings[i]));
    stop_ids_.push_back(static_cast<int32_t>(i));
  }
}

StopMatcher::Output StopMatcher::feed(std::string_view piece) {
  Output out;
  if (stopped_) {
    out.stopped = true;
    return out;
  }
  if (stops_.empty()) {
    out.text.assign(piece);
    return out;
  }
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(piece);

  // Earliest full match (longest stop string on a tie).
  size_t best_pos = std::string::npos;
  size_t best_len = 0;
  int32_t best_id = -1;
  for (size_t k = 0; k < stops_.size(); ++k) {
    const size_t pos = buf.find(stops_[k]);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stops_[k].size() > best_len)) {
      best_pos = pos;
      best_len = stops_[k].size();
      best_id = stop_ids_[k];
    }
  }
  if (best_pos != std::string::npos) {
    stopped_ = true;
    out.stopped = true;
    out.stop_index = best_id;
    out.text = buf.substr(0, best_pos);
    return out;
  }

  // Hold the longest suffix of buf that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_k = std::min(s.size() - 1, buf.size());
    for (size_t k = max_k; k > hold; --k) {
      if (std::string_view(buf).substr(buf.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  out.text = std::move(buf);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return std::string();
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace prefixd
