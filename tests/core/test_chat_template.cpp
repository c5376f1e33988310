// Chat templates: family detection, and ChatTemplate::format() against transformers'
// apply_chat_template on SmolLM2's template and a representative template of each family
// (tests/oracle/make_chat_fixtures.py writes the renderings to $SERVELAB_CHAT_ORACLE before this
// suite runs; the comparison skips, saying why, without them).
#include <QtTest>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "smollm2_chat_template.h"
#include "tokenizer/chat_template.h"
#include "util/errors.h"

using namespace servelab;
using nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// "<kind>: message" of the servelab::Error that fn throws, or a marker.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return std::string(error_kind_name(e.kind())) + ": " + e.what();
  } catch (const std::exception& e) {
    return std::string("<not a servelab::Error: ") + e.what() + ">";
  }
  return "<no exception>";
}

std::string printable(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void formats_match_hugging_face() {
    const char* env = std::getenv("SERVELAB_CHAT_ORACLE");
    if (!env || !*env || !std::filesystem::exists(env)) {
      QSKIP(
          "no chat fixtures: run this suite through ctest, which renders them with "
          "tests/oracle/make_chat_fixtures.py (needs .venv); the comparison with transformers is skipped");
    }
    const json oracle = json::parse(read_file(env));
    if (oracle.contains("smollm2_skip"))
      qWarning("SmolLM2's own template not checked: %s", oracle["smollm2_skip"].get<std::string>().c_str());
    QVERIFY(oracle["templates"].size() >= 11);
    int compared = 0, errors = 0, failures = 0;
    for (const auto& t : oracle["templates"]) {
      const std::string name = t["name"];
      const std::string jinja = t["template"];
      const auto family = detect_chat_family(jinja);
      QVERIFY2(family.has_value(), (name + ": family not detected").c_str());
      QCOMPARE(std::string(chat_family_name(*family)), t["family"].get<std::string>());
      const ChatTemplate chat = ChatTemplate::from_jinja(jinja, t["bos_token"], t["eos_token"]);
      QCOMPARE(std::string(chat.variant()), t["variant"].get<std::string>());
      if (name == "smollm2")
        QCOMPARE(chat.default_system(), oracle["smollm2_default_system"].get<std::string>());
      for (const auto& c : t["cases"]) {
        std::vector<ChatMessage> messages;
        for (const auto& m : c["messages"]) messages.push_back({m[0], m[1]});
        const bool agp = c["add_generation_prompt"];
        ChatTemplateOptions options;
        if (c.contains("enable_thinking")) options.enable_thinking = c["enable_thinking"].get<bool>();
        const std::string where =
            name + " / " + c["conversation"].get<std::string>() + (agp ? " + prompt" : "") +
            (options.enable_thinking ? (*options.enable_thinking ? " thinking" : " no thinking") : "");
        if (c.contains("text")) {
          std::string got;
          try {
            got = chat.format(messages, agp, options);
          } catch (const std::exception& e) {
            got = std::string("<threw: ") + e.what() + ">";
          }
          if (got != c["text"].get<std::string>()) {
            ++failures;
            qWarning("%s:\n  ours: %s\n  HF:   %s", where.c_str(), printable(got).c_str(),
                     printable(c["text"]).c_str());
          }
          ++compared;
        } else {
          // HF's template raised; so must we, with its message.
          const std::string hf = c["error"];
          const std::string message = hf.substr(hf.find(": ") + 2);
          const std::string ours = error_of([&] { chat.format(messages, agp, options); });
          if (!ours.starts_with("input error: ") || !contains(ours, message)) {
            ++failures;
            qWarning("%s: HF raises '%s', we give '%s'", where.c_str(), hf.c_str(), ours.c_str());
          }
          ++errors;
        }
      }
    }
    qInfo("compared %d renderings and %d template errors with transformers", compared, errors);
    QCOMPARE(failures, 0);
    QVERIFY(compared > 200);
  }

  void default_system_is_read_from_the_template() {
    const ChatTemplate smol =
        ChatTemplate::from_jinja(test::kSmolLM2ChatTemplate, "<|im_start|>", "<|im_end|>");
    QCOMPARE(smol.family(), ChatFamily::ChatML);
    QCOMPARE(smol.default_system(),
             std::string("You are a helpful AI assistant named SmolLM, trained by Hugging Face"));
    QCOMPARE(smol.format({{"system", "S"}, {"user", "U"}}, false),
             std::string("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"));
    // The same with Jinja's \n escapes in the literal, and Qwen 2.5's shape (the first literal is
    // followed by an expression, the default sits in the else branch).
    const std::string escaped =
        "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nBe \\'brief\\'.<|im_end|>\\n' }}{% "
        "endif %}"
        "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% "
        "endfor %}";
    QCOMPARE(ChatTemplate::from_jinja(escaped, "", "").default_system(), std::string("Be 'brief'."));
    const std::string qwen =
        "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
        "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You "
        "are a "
        "helpful assistant.<|im_end|>\\n' }}{%- endif %}";
    QCOMPARE(ChatTemplate::from_jinja(qwen, "", "").default_system(),
             std::string("You are Qwen, created by Alibaba Cloud. You are a helpful assistant."));
    const std::string plain =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}";
    QCOMPARE(ChatTemplate::from_jinja(plain, "", "").default_system(), std::string());
  }

  void other_families_are_not_taken_for_ours() {
    // llama.cpp's generic Phi-3 spelling ('<|' + role + '|>', any role), Phi-4, Falcon 3 / GLM-Edge,
    // Vicuna, Command-R, DeepSeek Coder: llama.cpp knows them, we render none of them (Phi-3's
    // published templates are rendered: the fixtures).
    for (const std::string& t : {
             std::string("{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + "
                         "message['content'] + "
                         "'<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' "
                         "}}{% endif %}"),
             std::string("{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}"),
             std::string("{{ '<|user|>\\n' + message['content'] + '\\n' }}{{ '<|assistant|>\\n' }}"),
             std::string("{{'USER: ' + message['content'] + '\\n'}}{{'ASSISTANT: '}}"),
             std::string(
                 "{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}"),
             std::string("{{'### Instruction:\\n' + message['content'] + '\\n'}}{{'<|EOT|>'}}"),
             std::string("{{ message['content'] }}"),
             std::string(""),
         }) {
      QVERIFY2(!detect_chat_family(t).has_value(), t.c_str());
      const std::string e = error_of([&] { ChatTemplate::from_jinja(t, "<s>", "</s>"); });
      QVERIFY2(e.starts_with("tokenizer error: chat template not recognised") && contains(e, "(starts: "),
               e.c_str());
    }
    // The markers of ours.
    QCOMPARE(detect_chat_family("x <|im_start|> y"), std::optional<ChatFamily>(ChatFamily::ChatML));
    QCOMPARE(detect_chat_family("[INST] <<SYS>>"), std::optional<ChatFamily>(ChatFamily::Llama2));
    QCOMPARE(detect_chat_family("mistral"), std::optional<ChatFamily>(ChatFamily::Llama2));
    QCOMPARE(detect_chat_family("[SYSTEM_PROMPT] [INST]"), std::optional<ChatFamily>(ChatFamily::Mistral));
    QCOMPARE(detect_chat_family("<|start_header_id|>x<|end_header_id|>"),
             std::optional<ChatFamily>(ChatFamily::Llama3));
    QCOMPARE(detect_chat_family("<start_of_turn>"), std::optional<ChatFamily>(ChatFamily::Gemma));
    QCOMPARE(detect_chat_family("<|user|> <|endoftext|>"), std::optional<ChatFamily>(ChatFamily::Zephyr));
    QCOMPARE(detect_chat_family("{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
                                "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"),
             std::optional<ChatFamily>(ChatFamily::Phi3));
    QCOMPARE(std::string(chat_family_name(ChatFamily::Zephyr)), std::string("zephyr"));
  }

  void variants_we_do_not_render_are_refused() {
    // Llama 3.1 writes a dated system header we do not reproduce.
    std::string e = error_of([&] {
      ChatTemplate::from_jinja(
          "{{- bos_token }}<|start_header_id|>system<|end_header_id|>Cutting Knowledge Date: "
          "December 2023",
          "", "");
    });
    QVERIFY2(contains(e, "not recognised") && contains(e, "Llama 3.1"), e.c_str());
    e = error_of([&] { ChatTemplate::from_jinja("[INST] <<SYS>> {{ message['content'] }}", "", ""); });
    QVERIFY2(contains(e, "not recognised") && contains(e, "Llama 2 variant"), e.c_str());
    e = error_of([&] { ChatTemplate::from_jinja("<start_of_turn>{{ message['content'] }}", "", ""); });
    QVERIFY2(contains(e, "not recognised") && contains(e, "Gemma variant"), e.c_str());
    e = error_of([&] { ChatTemplate::from_jinja("[SYSTEM_PROMPT]{{ c }}[/SYSTEM_PROMPT][INST]", "", ""); });
    QVERIFY2(contains(e, "v7-tekken"), e.c_str());
    // A ChatML template with reasoning blocks that is not Qwen3's (QwQ, DeepSeek-R1 distills) would
    // render wrong as plain ChatML.
    e = error_of([&] { ChatTemplate::from_jinja("<|im_start|>{{ m }}<think>\n", "", ""); });
    QVERIFY2(contains(e, "not recognised") && contains(e, "reasoning blocks"), e.c_str());
  }

  void thinking_switch_only_where_the_template_has_one() {
    const ChatTemplate smol = ChatTemplate::from_jinja(test::kSmolLM2ChatTemplate, "", "");
    QVERIFY(!smol.has_thinking_switch());
    ChatTemplateOptions off;
    off.enable_thinking = false;
    const std::string e = error_of([&] { smol.format({{"user", "hi"}}, true, off); });
    QVERIFY2(e.starts_with("input error: ") && contains(e, "enable_thinking") && contains(e, "chatml"),
             e.c_str());
    // nullopt is every template's default, with or without a switch.
    QVERIFY(!smol.format({{"user", "hi"}}, true, ChatTemplateOptions{}).empty());
  }

  void bad_messages_are_input_errors() {
    const ChatTemplate smol = ChatTemplate::from_jinja(test::kSmolLM2ChatTemplate, "", "");
    std::string e = error_of([&] { smol.format({}); });
    QVERIFY2(e.starts_with("input error: ") && contains(e, "no messages"), e.c_str());
    e = error_of([&] { smol.format({{"user", "bad \xFF utf-8"}}); });
    QVERIFY2(contains(e, "invalid UTF-8"), e.c_str());
  }
};

QTEST_APPLESS_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
