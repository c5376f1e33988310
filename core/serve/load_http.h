#pragma once
// The load generator's HTTP side as its other parts use it (load_generator.cpp runs the scenarios
// over it): the target's URL taken apart, which APIs are OpenAI's, and stopping the clients of a
// cancelled run. run_stream, list_models and scrape_server_load (load_generator.h) are defined in
// load_http.cpp with these; cpp-httplib stays inside that file. Internal: not for the CLI or the UI.
#include <atomic>
#include <chrono>
#include <string>
#include <utility>

#include "serve/load_generator.h"

namespace servelab::load_http {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A number as the messages spell it (a stream's default format: 0.5, 120, 1e+06).
std::string num(double v);

// http(s)://host[:port][/prefix] -> ("http(s)://host[:port]", "/prefix" without a trailing '/').
// InputError naming --url for a URL without a scheme of http or https, or without a host.
std::pair<std::string, std::string> split_url(const std::string& url);

bool is_openai(LoadApi api);

// The clients of streams in flight, by the cancel flag they watch: a stream whose server is silent
// sits in a blocking read that the flag cannot interrupt, so whoever raises the flag also calls
// stop_clients(), which shuts the sockets down (httplib's Client::stop, safe from another thread).
void stop_clients(const std::atomic<bool>* cancel);

}  // namespace servelab::load_http
