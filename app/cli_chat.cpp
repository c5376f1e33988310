#include "cli_chat.h"

#include <fstream>
#include <iostream>
#include <optional>

#include "cli_usage.h"
#include "generate/conversation.h"
#include "generate/generation.h"
#include "util/errors.h"

namespace servelab {

namespace {

const char* const kHelp =
    "/help          this list\n"
    "/reset         forget the turns so far (the system prompt stays)\n"
    "/system TEXT   set the system prompt (/system alone: the template's default)\n"
    "/exit          end the chat (so does end of input)\n";

// Streams each finished piece of text as the model makes it.
class StreamSink : public GenerationSink {
 public:
  explicit StreamSink(std::ostream& out) : out_(out) {}
  void on_token(const TokenEvent& e) override { out_ << e.piece << std::flush; }

 private:
  std::ostream& out_;
};

void save_transcript(const std::string& path, const Conversation& c) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << conversation_to_json(c).dump(2) << "\n";
  if (!f) throw InputError("--save " + path + ": cannot write the file");
}

}  // namespace

void ChatCommand::add_to(CLI::App* app) {
  cmd = app->add_subcommand(
      "chat",
      "Chat with the model in its own chat template: interactive at a terminal, one user turn per line "
      "from a pipe");
  cmd->add_option("--system", system, "the system prompt (default: the template's own, if it has one)");
  cmd->add_option("--max-new-tokens", max_new_tokens, "the most tokens of each answer");
  cmd->add_flag("--greedy", greedy, "argmax decoding (the default)");
  cmd->add_option("--temperature", temperature, "sample with this temperature (> 0)");
  cmd->add_option("--top-k", top_k, "sample from the k most likely tokens");
  cmd->add_option("--top-p", top_p, "sample from the smallest set with this probability mass");
  cmd->add_option("--min-p", min_p, "sample only tokens at least this fraction as likely as the top one");
  cmd->add_option("--seed", seed, "sampling seed");
  cmd->add_option("--repetition-penalty", repetition_penalty,
                  "divide the logits of tokens seen in the prompt or output (> 0; 1: off)");
  cmd->add_flag("--show-prompt", show_prompt,
                "write each turn's formatted prompt (the template's text the model reads) to stderr");
  cmd->add_option("--save", save, "write the conversation as OpenAI chat messages (JSON) after each answer");
}

int ChatCommand::run(const Engine& engine, LineReader& in, std::ostream& out, std::ostream& err,
                     bool interactive, bool colour) {
  const bool sampling = cmd->count("--temperature") > 0;
  if (greedy && sampling)
    throw UsageError("--greedy and --temperature contradict each other: give one of them");
  for (const char* flag : {"--top-k", "--top-p", "--min-p", "--seed"})
    if (cmd->count(flag) && !sampling)
      throw UsageError(std::string(flag) + " needs --temperature (without it the answers are greedy)");
  GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.report_top = 0;
  o.sampling.greedy = !sampling;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.sampling.top_p = top_p;
  o.sampling.min_p = min_p;
  o.sampling.seed = seed;
  o.sampling.repetition_penalty = repetition_penalty;
  o.sampling.validate();
  const int64_t context = engine.shape().context;
  if (max_new_tokens < 1 || max_new_tokens >= context)
    throw InputError("--max-new-tokens must be in [1, " + std::to_string(context - 1) +
                     "] for this model's context of " + std::to_string(context) + " tokens, got " +
                     std::to_string(max_new_tokens));
  // Fails here, before the first turn, for a model without a chat template.
  if (engine.tokenizer().chat_template().empty())
    throw InputError("the model " + engine.name() +
                     " has no chat template, so it cannot chat: use `servelab-cli generate` with plain text");

  Conversation conversation;
  conversation.system = system;
  if (interactive)
    err << "Chatting with " << engine.name() << " (/help for commands, end of input to quit)\n";
  const char* on = colour ? "\x1b[36m" : "";
  const char* off = colour ? "\x1b[0m" : "";
  while (true) {
    const std::optional<std::string> next = in.read("> ");
    if (!next) break;
    const std::string& line = *next;
    if (line.empty()) continue;
    if (line[0] == '/') {
      const std::string word = line.substr(0, line.find(' '));
      const std::string rest = line.size() > word.size() ? line.substr(word.size() + 1) : std::string();
      if (word == "/exit" || word == "/quit") break;
      if (word == "/help") {
        err << kHelp;
      } else if (word == "/reset") {
        conversation.turns.clear();
        err << "(the conversation starts over)\n";
      } else if (word == "/system") {
        conversation.system = rest;
        err << (rest.empty() ? "(the template's default system prompt)\n" : "(system prompt set)\n");
      } else {
        const std::string problem = "unknown command " + word + " (/help lists them)";
        if (!interactive) throw InputError(problem);
        err << problem << "\n";
      }
      continue;
    }
    conversation.add_user(line);
    try {
      const ChatPrompt prompt = fit_chat_prompt(engine.tokenizer(), conversation, context, max_new_tokens);
      if (!prompt.dropped_note().empty()) err << "(" << prompt.dropped_note() << ")\n";
      if (show_prompt)
        err << "--- prompt, " << prompt.ids.size() << " of " << context << " tokens ---\n"
            << prompt.text << "\n--- end of prompt ---\n";
      StreamSink sink(out);
      out << on;
      const GenerateResult r = generate(engine.model(), engine.tokenizer(), {prompt.ids}, o, &sink);
      out << off << "\n" << std::flush;
      conversation.add_assistant(r.sequences.front().text);
    } catch (const Error& e) {
      conversation.turns.pop_back();  // the turn that was not answered
      if (!interactive) throw;
      out << off << std::flush;
      std::string what = e.what();
      for (char& c : what)
        if (c == '\n') c = ' ';
      err << "error: " << what << "\n";
      continue;
    }
    if (!save.empty()) save_transcript(save, conversation);
  }
  if (!save.empty()) save_transcript(save, conversation);
  return 0;
}

}  // namespace servelab
