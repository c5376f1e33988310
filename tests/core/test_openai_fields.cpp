// The OpenAI routes' fields: implemented, refused by name, or (defined by neither OpenAI nor vLLM)
// ignored. Parsing only: a byte tokenizer with SmolLM2's chat template, no model.
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "generate/token_constraint.h"
#include "serve/openai_fields.h"
#include "serve/request_parser.h"
#include "smollm2_chat_template.h"
#include "test_support.h"
#include "util/errors.h"

using namespace servelab;
using nlohmann::json;

namespace {

class AnyToken : public TokenConstraint {
 public:
  void mask(float*, int64_t) override {}
  bool accept(int32_t) override { return true; }
};

struct Fixture {
  test::ByteTokenizer tok{test::kSmolLM2ChatTemplate};
  RequestParserContext ctx;
  std::string schema_seen;
  Fixture() {
    ctx.tokenizer = &tok;
    ctx.model_id = "m";
    ctx.max_total_tokens = 100000;
    ctx.json_constraint = [this](const std::string& schema) {
      schema_seen = schema;
      return std::make_unique<AnyToken>();
    };
    ctx.fresh_seed = [] { return uint64_t{7}; };
  }
  json body(bool chat, const json& extra) const {
    json b = chat ? json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}} : json{{"prompt", "hi"}};
    for (const auto& [k, v] : extra.items()) b[k] = v;
    return b;
  }
  ParsedRequest parse(bool chat, const json& extra) const {
    return parse_api_request(chat ? ApiEndpoint::ChatCompletions : ApiEndpoint::Completions,
                             body(chat, extra).dump(), ctx);
  }
  // The message of the validation error parse() throws, or "" when it parses.
  std::string refusal(bool chat, const json& extra) const {
    try {
      parse(chat, extra);
      return "";
    } catch (const ApiError& e) {
      return e.what();
    }
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

class TestOpenAiFields : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void everyUnimplementedFieldIsRefusedByName() {
    const Fixture f;
    int checked = 0;
    for (const UnimplementedField& field : unimplemented_openai_fields())
      for (const bool chat : {true, false}) {
        if (chat ? !field.chat : !field.completions) continue;
        // A value no field accepts as a no-op.
        const std::string why = f.refusal(chat, {{field.name, json{{"x", 1}}}});
        QVERIFY2(contains(why, field.name + " is not supported"),
                 qPrintable(QString::fromStdString(field.name + (chat ? " (chat): " : ": ") + why)));
        // Its no-op values pass.
        for (const std::string& ok : field.accepted) {
          const std::string r = f.refusal(chat, {{field.name, json::parse(ok)}});
          QVERIFY2(r.empty(), qPrintable(QString::fromStdString(field.name + " = " + ok + ": " + r)));
        }
        // null means the default, as for every field.
        QVERIFY(f.refusal(chat, {{field.name, nullptr}}).empty());
        ++checked;
      }
    QVERIFY(checked > 40);
  }

  void toolsAreRefusedWithAClearReason() {
    const Fixture f;
    const json tools = json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
    const std::string why = f.refusal(true, {{"tools", tools}});
    QVERIFY2(
        contains(why, "tools is not supported by this server (only [])") && contains(why, "tool calling"),
        why.c_str());
    QVERIFY(contains(f.refusal(true, {{"tool_choice", "auto"}}), "tool_choice"));
    QVERIFY(f.refusal(true, {{"tools", json::array()}, {"tool_choice", "none"}}).empty());
    // The HTTP server answers a validation error on the OpenAI routes with 400.
    try {
      f.parse(true, {{"tools", tools}});
      QFAIL("tools were not refused");
    } catch (const ApiError& e) {
      QCOMPARE(e.status(), 422);  // the parser's; http_server maps it to 400 on /v1/* (test_serve)
    }
  }

  void fieldsWithoutEffectAndUnknownFieldsAreAccepted() {
    const Fixture f;
    for (const auto& [name, why] : accepted_openai_fields_without_effect()) {
      QVERIFY(!why.empty());
      for (const bool chat : {true, false}) QVERIFY2(f.refusal(chat, {{name, "abc"}}).empty(), name.c_str());
    }
    // Defined by neither OpenAI nor vLLM: ignored, as vLLM ignores them.
    QVERIFY(f.refusal(false, {{"my_own_field", 3}}).empty());
    QVERIFY(f.refusal(true, {{"x_trace", {{"a", 1}}}}).empty());
  }

  void guidedJsonIsAJsonSchema() {
    Fixture f;
    const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
    QVERIFY(f.parse(false, {{"guided_json", schema}}).constraint);
    QCOMPARE(json::parse(f.schema_seen), schema);
    f.schema_seen.clear();
    QVERIFY(f.parse(true, {{"guided_json", schema.dump()}}).constraint);  // its text, as vLLM takes it
    QCOMPARE(json::parse(f.schema_seen), schema);
    QVERIFY(contains(f.refusal(false, {{"guided_json", "{not json"}}),
                     "guided_json is a string that is not JSON"));
    QVERIFY(contains(f.refusal(false, {{"guided_json", 3}}), "guided_json must be a JSON Schema object"));
    QVERIFY(
        contains(f.refusal(false, {{"guided_json", schema}, {"response_format", {{"type", "json_object"}}}}),
                 "not both"));
  }

  void chatTemplateKwargsSwitchQwen3sThinkingOnly() {
    Fixture smol;
    QVERIFY(contains(
        smol.refusal(true, {{"chat_template_kwargs", {{"enable_thinking", false}}}}),
        "chat_template_kwargs.enable_thinking: this model's chat template (chatml) has no thinking switch"));
    QVERIFY(smol.refusal(true, {{"chat_template_kwargs", json::object()}}).empty());
    QVERIFY(contains(smol.refusal(true, {{"chat_template_kwargs", {{"tools_in_user_message", true}}}}),
                     "chat_template_kwargs.tools_in_user_message is not supported"));
    QVERIFY(contains(smol.refusal(true, {{"chat_template_kwargs", 3}}),
                     "chat_template_kwargs must be an object"));
    // A Qwen3 template (recognised by its markers; ChatTemplate renders it): false opens the
    // assistant's turn with an empty reasoning block, true and absent do not.
    Fixture qwen;
    qwen.tok =
        test::ByteTokenizer("<|im_start|>{# enable_thinking last_query_index reasoning_content <think> #}");
    const auto prompt = [&](const json& extra) { return qwen.parse(true, extra).prompt_text; };
    const std::string plain = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    QCOMPARE(prompt(json::object()), plain);
    QCOMPARE(prompt({{"chat_template_kwargs", {{"enable_thinking", true}}}}), plain);
    QCOMPARE(prompt({{"chat_template_kwargs", {{"enable_thinking", false}}}}),
             plain + "<think>\n\n</think>\n\n");
    QVERIFY(contains(qwen.refusal(true, {{"chat_template_kwargs", {{"enable_thinking", "no"}}}}),
                     "enable_thinking must be a boolean"));
    // /tokenize counts the same prompt.
    const json counted = json::parse(tokenize_api(json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                       {"chat_template_kwargs", {{"enable_thinking", false}}}}
                                                      .dump(),
                                                  qwen.ctx, false));
    QCOMPARE(counted["count"].get<size_t>(), (plain + "<think>\n\n</think>\n\n").size());
  }

  void theServingGuideListsEveryRefusedField() {
    std::ifstream in(std::string(SERVELAB_SOURCE_DIR) + "/docs/serving.md");
    std::stringstream doc;
    doc << in.rdbuf();
    const std::string text = doc.str();
    QVERIFY(!text.empty());
    for (const UnimplementedField& field : unimplemented_openai_fields())
      QVERIFY2(contains(text, "`" + field.name + "`"), field.name.c_str());
    for (const auto& [name, why] : accepted_openai_fields_without_effect())
      QVERIFY2(contains(text, "`" + name + "`"), name.c_str());
  }
};

QTEST_GUILESS_MAIN(TestOpenAiFields)
#include "test_openai_fields.moc"
