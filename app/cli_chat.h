#pragma once
// `servelab-cli chat`: a conversation with the model in its own chat template, one answer streamed
// per user turn. At a terminal it is an interactive loop (/help, /reset, /system TEXT, /exit); from
// a pipe it reads one user turn per line, so a conversation can be scripted. At a terminal the line
// is edited with GNU readline (cli_line_reader.h), its history kept across runs.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "cli_line_reader.h"
#include "model/engine.h"

namespace servelab {

struct ChatCommand {
  CLI::App* cmd = nullptr;
  std::string system;
  int64_t max_new_tokens = 256;
  bool greedy = false;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
  int64_t top_k = 0;
  std::uint64_t seed = 0;
  bool show_prompt = false;
  std::string save;

  // Adds the subcommand to the app (the caller adds the model options).
  void add_to(CLI::App* app);
  // Reads turns from in until its end or /exit (UsageError first for a command line that contradicts
  // itself: the sampling flags without --temperature). Answers go to out (coloured when colour),
  // notes to err. interactive: a person at a terminal; a turn the model cannot answer is then
  // reported and the loop goes on; otherwise it ends the run with the error (thrown).
  int run(const Engine& engine, LineReader& in, std::ostream& out, std::ostream& err, bool interactive,
          bool colour);
};

}  // namespace servelab
