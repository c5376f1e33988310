#pragma once
// Where `servelab-cli chat` reads its turns from: a stream (a pipe, a file, or a terminal without
// line editing) or, at a terminal, GNU readline with the arrow keys, Ctrl-A/E, and history kept
// across runs in $XDG_STATE_HOME/servelab/chat_history.
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

namespace servelab {

class LineReader {
 public:
  virtual ~LineReader() = default;
  // The next line without its end of line (nothing at end of input), prompt shown first when the
  // reader shows prompts.
  virtual std::optional<std::string> read(const char* prompt) = 0;
};

// Lines from in; the prompt goes to err when prompt is on (a person at a terminal).
std::unique_ptr<LineReader> stream_line_reader(std::istream& in, std::ostream& err, bool prompt);

// GNU readline on stdin, its prompt and echo on stderr (so that a redirected stdout gets only the
// answers). Lines are kept in history_file (read first, appended to after each line); a file that
// cannot be read or written costs one warning line on err, never the chat.
std::unique_ptr<LineReader> readline_line_reader(const std::string& history_file, std::ostream& err);

// $XDG_STATE_HOME/servelab/chat_history, ~/.local/state/servelab/chat_history without
// XDG_STATE_HOME (or with a relative one, which the XDG spec says to ignore); empty without HOME.
std::string chat_history_path();

}  // namespace servelab
