#include "cli_line_reader.h"

// readline.h uses FILE without including stdio.h: kept in this order.
// clang-format off
#include <cstdio>
#include <readline/readline.h>
#include <readline/history.h>
// clang-format on

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <istream>
#include <ostream>
#include <system_error>
#include <utility>

namespace servelab {

namespace {

class StreamLineReader : public LineReader {
 public:
  StreamLineReader(std::istream& in, std::ostream& err, bool prompt) : in_(in), err_(err), prompt_(prompt) {}
  std::optional<std::string> read(const char* prompt) override {
    if (prompt_) err_ << prompt << std::flush;
    std::string line;
    if (!std::getline(in_, line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }

 private:
  std::istream& in_;
  std::ostream& err_;
  bool prompt_;
};

// The most lines the history file keeps.
constexpr int kHistoryLines = 1000;

class ReadlineLineReader : public LineReader {
 public:
  ReadlineLineReader(std::string history_file, std::ostream& err)
      : file_(std::move(history_file)), err_(err) {}

  ~ReadlineLineReader() override {
    if (started_ && !warned_) history_truncate_file(file_.c_str(), kHistoryLines);
  }

  std::optional<std::string> read(const char* prompt) override {
    if (!started_) start();
    char* raw = readline(prompt);
    if (!raw) {
      // Ctrl-D on an empty line: the shell's prompt goes on a line of its own (readline ends the
      // line itself when bracketed paste is on).
      const char* paste = rl_variable_value("enable-bracketed-paste");
      if (!paste || std::strcmp(paste, "on") != 0) std::fputc('\n', stderr);
      return std::nullopt;
    }
    std::string line(raw);
    std::free(raw);
    const HIST_ENTRY* last = history_length > 0 ? history_get(history_base + history_length - 1) : nullptr;
    if (line.find_first_not_of(" \t") != std::string::npos && !(last && line == last->line)) {
      add_history(line.c_str());
      if (!warned_)
        if (int e = append_history(1, file_.c_str()); e != 0) warn(std::strerror(e));
    }
    return line;
  }

 private:
  // At the first line, not before: a chat that fails to start writes only its error.
  void start() {
    started_ = true;
    rl_readline_name = "servelab";
    rl_instream = stdin;
    rl_outstream = stderr;  // the prompt and the echo: never into a redirected stdout
    // No completion (Tab inserts itself) and so none of its colours.
    rl_bind_key('\t', rl_insert);
    rl_variable_bind("colored-stats", "off");
    rl_variable_bind("colored-completion-prefix", "off");
    using_history();
    stifle_history(kHistoryLines);
    if (file_.empty()) {
      warn("no HOME or XDG_STATE_HOME to keep it in");
      return;
    }
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(file_).parent_path(), ec);
    if (ec) {
      warn(ec.message());
      return;
    }
    if (int e = read_history(file_.c_str()); e != 0 && e != ENOENT) {
      warn(std::strerror(e));
      return;
    }
    // append_history() does not create the file.
    if (!std::filesystem::exists(file_, ec))
      if (int e = write_history(file_.c_str()); e != 0) warn(std::strerror(e));
  }

  void warn(const std::string& why) {
    warned_ = true;
    err_ << "servelab-cli: warning: the chat history is not kept" << (file_.empty() ? "" : " in " + file_)
         << ": " << why << "\n";
  }

  std::string file_;
  std::ostream& err_;
  bool started_ = false;
  bool warned_ = false;
};

}  // namespace

std::unique_ptr<LineReader> stream_line_reader(std::istream& in, std::ostream& err, bool prompt) {
  return std::make_unique<StreamLineReader>(in, err, prompt);
}

std::unique_ptr<LineReader> readline_line_reader(const std::string& history_file, std::ostream& err) {
  return std::make_unique<ReadlineLineReader>(history_file, err);
}

std::string chat_history_path() {
  namespace fs = std::filesystem;
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state && *state && fs::path(state).is_absolute())
    return (fs::path(state) / "servelab" / "chat_history").string();
  const char* home = std::getenv("HOME");
  if (!home || !*home) return {};
  return (fs::path(home) / ".local" / "state" / "servelab" / "chat_history").string();
}

}  // namespace servelab
