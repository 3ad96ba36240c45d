// SseParser: the client's text/event-stream decoder, bounded in memory.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace prefixd::client {

// Splits a text/event-stream byte stream into event payloads, whatever the chunk boundaries.
// Lines end in \n, \r\n or \r; "data:" lines of one event are joined with \n (one leading space
// after the colon is dropped); comment lines (":...") and other fields are ignored; a blank line
// dispatches the event. A line, or an event's data, longer than max_bytes is an error (a stream
// from a broken or hostile server cannot make the client buffer without bound). Not thread-safe.
class SseParser {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t{16} << 20;  // 16 MiB

  explicit SseParser(size_t max_bytes = kDefaultMaxBytes) : max_bytes_(max_bytes) {}

  // Feeds bytes; calls on_event(data) for every completed event with data. Stops early and
  // returns false when on_event returns false, or on a line or event over max_bytes (then
  // error() says so, and every later call returns false).
  bool feed(const char* bytes, size_t n_bytes,
            const std::function<bool(const std::string&)>& on_event);
  // End of stream: dispatches a final event that lacked its blank line. Returns on_event's
  // answer (true when nothing was pending; false after an error).
  bool finish(const std::function<bool(const std::string&)>& on_event);
  // Empty, or why the stream was refused ("SSE line longer than 16 MiB").
  const std::string& error() const { return error_; }

 private:
  bool end_line(const std::function<bool(const std::string&)>& on_event);
  bool fail(const char* what);
  size_t max_bytes_;   // bound on line_ and on data_
  std::string error_;  // set once a bound is exceeded
  std::string line_;   // current incomplete line
  std::string data_;   // data of the current event so far
  bool has_data_ = false;
  bool last_was_cr_ = false;  // previous byte was \r (a following \n is part of that line end)
};

}  // namespace prefixd::client
