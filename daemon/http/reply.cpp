// Reply over httplib::Response (see reply.h).
#include "daemon/http/reply.h"

#include <httplib.h>

#include <utility>

#include "daemon/http/http_util.h"

namespace prefixd {
namespace {

// httplib's DataSink as a ChunkSink.
class DataSinkChunks : public ChunkSink {
 public:
  explicit DataSinkChunks(httplib::DataSink& sink) : sink_(sink) {}
  bool write(std::string_view bytes) override { return sink_.write(bytes.data(), bytes.size()); }
  void done() override { sink_.done(); }

 private:
  httplib::DataSink& sink_;
};

}  // namespace

void Reply::json(const nlohmann::json& body, int status) { send_json(res_, body, status); }

void Reply::error(const ApiError& e) { send_error(res_, e); }

void Reply::header(const std::string& name, const std::string& value) {
  res_.set_header(name, value);
}

void Reply::content(const std::string& body, const char* content_type, int status) {
  res_.status = status;
  res_.set_content(body, content_type);
}

void Reply::stream(const char* content_type, std::function<bool(ChunkSink&)> pump) {
  res_.set_chunked_content_provider(
      content_type, [pump = std::move(pump)](size_t /*offset*/, httplib::DataSink& sink) {
        DataSinkChunks chunks(sink);
        return pump(chunks);
      });
}

}  // namespace prefixd
