// Conversation: formatting through the model's chat template exactly as the server's
// /v1/chat/completions formats the same messages, the policy that leaves out the oldest exchanges
// when the transcript outgrows the context, and JSON / Markdown export and validated import. The
// tokenizer spells every byte as one token, so token counts are the text's length in bytes.
#include <QtTest>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "generate/conversation.h"
#include "serve/request_parser.h"
#include "smollm2_chat_template.h"
#include "test_support.h"
#include "util/errors.h"

using namespace servelab;
using nlohmann::json;

namespace {

using test::ByteTokenizer;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string input_error(const std::function<void()>& fn) { return test::error_of(ErrorKind::Input, fn); }

Conversation three_exchanges() {
  Conversation c;
  c.system = "Be brief.";
  c.add_user("first question");
  c.add_assistant("first answer");
  c.add_user("second question");
  c.add_assistant("second answer");
  c.add_user("third question");
  c.add_assistant("third answer");
  c.add_user("newest question");
  return c;
}

}  // namespace

class TestConversation : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void formatsAsTheServerDoes() {
    const ByteTokenizer tok(test::kSmolLM2ChatTemplate);
    for (bool with_system : {true, false}) {
      Conversation c = three_exchanges();
      if (!with_system) c.system.clear();
      const ChatPrompt p = fit_chat_prompt(tok, c, 100000, 16);
      RequestParserContext ctx;
      ctx.tokenizer = &tok;
      ctx.model_id = "m";
      ctx.max_total_tokens = 100000;
      const json body = {{"messages", conversation_to_json(c)}};
      const ParsedRequest server = parse_api_request(ApiEndpoint::ChatCompletions, body.dump(), ctx);
      QCOMPARE(p.text, server.prompt_text);
      QVERIFY(p.ids == server.request.prompt_ids);
      QCOMPARE(p.dropped_exchanges, int64_t{0});
      QVERIFY(p.dropped_note().empty());
      // The template's own default system message stands in for an empty system prompt.
      QCOMPARE(contains(p.text, "named SmolLM"), !with_system);
      QVERIFY(contains(p.text,
                       "<|im_start|>user\nfirst question<|im_end|>\n<|im_start|>assistant\nfirst "
                       "answer<|im_end|>\n"));
      QVERIFY(p.text.size() > 30 && p.text.substr(p.text.size() - 22) == "<|im_start|>assistant\n");
    }
  }

  void leavesOutTheOldestExchangesWhenTheContextIsFull() {
    const ByteTokenizer tok(test::kSmolLM2ChatTemplate);
    const Conversation c = three_exchanges();
    const auto full = static_cast<int64_t>(fit_chat_prompt(tok, c, 100000, 0).ids.size());
    const int64_t answer = 10;
    // One token short of the whole transcript: exactly the oldest exchange goes.
    const ChatPrompt one = fit_chat_prompt(tok, c, full + answer - 1, answer);
    QCOMPARE(one.dropped_exchanges, int64_t{1});
    QCOMPARE(one.dropped_messages, int64_t{2});
    QVERIFY(!contains(one.text, "first question") && !contains(one.text, "first answer"));
    QVERIFY(contains(one.text, "Be brief.") && contains(one.text, "second question"));
    QVERIFY(static_cast<int64_t>(one.ids.size()) + answer <= full + answer - 1);
    const std::string note = one.dropped_note();
    QVERIFY2(contains(note, "1 oldest exchange (2 turns)") &&
                 contains(note, std::to_string(one.ids.size())) &&
                 contains(note, std::to_string(full + answer - 1)),
             note.c_str());
    // Just enough for the system prompt and the newest turn: every exchange goes, never those two.
    Conversation alone;
    alone.system = c.system;
    alone.add_user("newest question");
    const auto minimum = static_cast<int64_t>(fit_chat_prompt(tok, alone, 100000, 0).ids.size());
    const ChatPrompt all = fit_chat_prompt(tok, c, minimum + answer, answer);
    QCOMPARE(all.dropped_exchanges, int64_t{3});
    QCOMPARE(all.text, fit_chat_prompt(tok, alone, 100000, 0).text);
    // One token fewer: the newest turn alone does not fit, and the error names the numbers.
    const std::string e = input_error([&] { fit_chat_prompt(tok, c, minimum + answer - 1, answer); });
    QVERIFY2(contains(e, "newest user turn needs " + std::to_string(minimum)) &&
                 contains(e, "context of " + std::to_string(minimum + answer - 1)) &&
                 contains(e, "the " + std::to_string(answer) + " kept for the answer"),
             e.c_str());
  }

  void keepsTheTurnsAlternating() {
    Conversation c;
    QVERIFY(contains(input_error([&] { c.add_assistant("hi"); }), "must answer a user turn"));
    c.add_user("a");
    QVERIFY(c.awaiting_answer());
    QVERIFY(contains(input_error([&] { c.add_user("b"); }), "already ends with a user turn"));
    c.add_assistant("b");
    const ByteTokenizer tok(test::kSmolLM2ChatTemplate);
    QVERIFY(contains(input_error([&] { fit_chat_prompt(tok, c, 1000, 10); }), "must end with a user turn"));
    // A model without a chat template cannot chat.
    const ByteTokenizer plain("");
    c.add_user("c");
    const std::string e = test::error_of(ErrorKind::Tokenizer, [&] { fit_chat_prompt(plain, c, 1000, 10); });
    QVERIFY2(contains(e, "no chat template"), e.c_str());
  }

  void exportsAndImports() {
    Conversation c = three_exchanges();
    c.add_assistant("newest answer, with \"quotes\"\nand a second line");
    const json j = conversation_to_json(c);
    QCOMPARE(j.size(), size_t{9});
    QVERIFY(j[0] == (json{{"role", "system"}, {"content", "Be brief."}}));
    QVERIFY(j[1] == (json{{"role", "user"}, {"content", "first question"}}));
    QCOMPARE(j[8]["role"].get<std::string>(), std::string("assistant"));
    const Conversation back = conversation_from_json_text(j.dump());
    QCOMPARE(back.system, c.system);
    QCOMPARE(back.turns.size(), c.turns.size());
    for (size_t i = 0; i < c.turns.size(); ++i) {
      QCOMPARE(back.turns[i].role, c.turns[i].role);
      QCOMPARE(back.turns[i].content, c.turns[i].content);
    }
    // The object form a chat request has, {"messages": [...]}, is read too.
    QCOMPARE(conversation_from_json(json{{"messages", j}}).turns.size(), c.turns.size());
    const std::string md = conversation_to_markdown(c);
    QVERIFY2(
        contains(md,
                 "# Conversation\n\n## System\n\nBe brief.\n\n## User\n\nfirst question\n\n## Assistant\n\n"
                 "first answer\n"),
        md.c_str());
    QVERIFY(contains(md, "## Assistant\n\nnewest answer, with \"quotes\"\nand a second line\n"));
  }

  void refusesMalformedConversations() {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"(null)", "messages must be a list of {role, content}, got null"},
        {R"("hello")", "messages must be a list of {role, content}, got a string"},
        {R"([1])", "messages[0] must be an object, got a number"},
        {R"([{"role": "tool", "content": "x"}])",
         "messages[0].role must be system, user or assistant, got \"tool\""},
        {R"([{"role": 3, "content": "x"}])",
         "messages[0].role must be a string (system, user or assistant), got a number"},
        {R"([{"content": "x"}])", "messages[0].role must be a string"},
        {R"([{"role": "user", "content": ["x"]}])", "messages[0].content must be a string, got a list"},
        {R"([{"role": "user"}])", "messages[0].content must be a string"},
        {R"([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])",
         "messages[1] is a system message: only the first message may be one"},
        {R"([{"role": "assistant", "content": "a"}])", "messages[0].role is assistant where the turns"},
        {R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])",
         "messages[1].role is user where the turns alternating from a user turn need assistant"},
        {R"({"messages": 5})", "messages must be a list of {role, content}, got a number"},
        {R"({"other": []})", "needs a \"messages\" list"},
        {R"([{"role": "user", "content": "a"})", "not valid JSON"},
    };
    for (const auto& [text, expected] : cases) {
      const std::string e = input_error([&] { conversation_from_json_text(text); });
      QVERIFY2(contains(e, expected), (text + " -> " + e).c_str());
    }
  }
};

QTEST_GUILESS_MAIN(TestConversation)
#include "test_conversation.moc"
