// Server: prefixd's serve mode. Loads the model, tokenizer, chat template and
// engine from validated ServerOptions, binds the HTTP listener and routes
// requests to the handlers. HTTP worker threads never touch the model.
//
// Thread-safety: run() blocks the calling thread; shutdown() may be called
// from any other thread (the signal thread) while run() is serving.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/result.h"
#include "daemon/server_options.h"

namespace prefixd {

class Server {
 public:
  // Loads everything and binds the port (so port() is known before run()).
  static Result<std::unique_ptr<Server>> create(const ServerOptions& options);
  ~Server();

  int port() const;
  const std::string& model_id() const;

  // Serves until shutdown(); returns false when the listener failed.
  bool run();

  // Graceful stop: new generation requests get 503, in-flight ones have
  // `grace` to finish, then the rest are cancelled and the listener stops.
  void shutdown(std::chrono::milliseconds grace);

  // After run() returned: stops the listener and the engine, drains the
  // queued disk writes for at most --shutdown-flush-s (the rest is dropped,
  // counted), closes the cache tiers. Logs each step with the time since the
  // signal; returns the last line ("stopped N s after the signal; ...").
  // The destructor calls it when nobody did.
  std::string close();

  struct State;  // opaque: defined in server.cpp

 private:
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// `prefixd` with no subcommand: validates the options, blocks SIGINT/SIGTERM
// for a SignalWatcher, serves until a signal, shuts down gracefully.
// Returns the process exit code (0 after a signal, 1 on start-up failure,
// 2 on invalid options). Call it before any other thread exists.
int run_serve(ServerOptions options);

}  // namespace prefixd
