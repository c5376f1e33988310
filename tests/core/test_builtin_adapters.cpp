// The built-in adapters (docs/adapters.md): the folders in resources/adapters/ that
// scripts/train_adapters wrote, found by builtin_adapters_dir(), loaded and described by the engine
// on the built-in model (rank 16, alpha 32, the seven projections of every layer); the course's NER
// sentence through predibase/conllpp, greedy, gives the course's JSON with the right entities while
// the base model alone does not; the prompt formats are the course's templates. Greedy decoding is
// deterministic: the tokens are asserted, never a time.
#include <QTest>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "experiments/multi_lora.h"
#include "generate/generation.h"
#include "lora/builtin_adapters.h"
#include "lora/lora_adapter.h"
#include "model/builtin_model.h"
#include "model/engine.h"
#include "tokenizer/prompt.h"

namespace fs = std::filesystem;
using namespace servelab;

namespace {

const std::string kModel = SERVELAB_SOURCE_DIR "/.venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kShipped = SERVELAB_SOURCE_DIR "/resources/adapters";
const std::vector<std::string> kProjections = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                               "gate_proj", "up_proj", "down_proj"};

// The course's Output schema: an object with the four keys, each a list of strings.
bool valid_ner(const nlohmann::json& j, QString* why) {
  if (!j.is_object()) {
    *why = "not an object";
    return false;
  }
  for (const char* key : {"person", "organization", "location", "miscellaneous"}) {
    if (!j.contains(key) || !j[key].is_array()) {
      *why = QString("no list \"%1\"").arg(key);
      return false;
    }
    for (const auto& e : j[key])
      if (!e.is_string()) {
        *why = QString("\"%1\" holds a non-string").arg(key);
        return false;
      }
  }
  return true;
}

}  // namespace

class TestBuiltinAdapters : public QObject {
  Q_OBJECT
  std::unique_ptr<Engine> engine_;

  GenerateResult greedy(const std::string& prompt, std::shared_ptr<const LoraAdapter> adapter, int64_t n) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.stop_at_eos = true;
    if (adapter) o.adapters = {adapter};
    return generate(engine_->model(), engine_->tokenizer(), {encode_prompt(engine_->tokenizer(), prompt)}, o);
  }

 private Q_SLOTS:
  void initTestCase() {
    if (!fs::exists(kModel))
      QSKIP(qPrintable(
          QString::fromStdString("the built-in model is absent (scripts/bootstrap installs it): " + kModel)));
    EngineOptions o;
    o.threads = 1;  // two OpenMP threads spinning on a busy 2-core machine cost more than they give
    engine_ = Engine::load_gguf(kModel, o);
  }

  void promptFormatsAreTheCourses() {
    // The course's order and ids.
    std::vector<std::string> ids;
    for (const BuiltinAdapter& a : builtin_adapters()) ids.push_back(a.id);
    QCOMPARE(ids, (std::vector<std::string>{"predibase/hellaswag_processed", "predibase/cnn",
                                            "predibase/conllpp"}));
    const BuiltinAdapter* ner = find_builtin_adapter("predibase/conllpp");
    QVERIFY(ner);
    QVERIFY(!find_builtin_adapter("predibase/other"));
    // pt_conllpp.format(inpt=...): Python's {{ }} undone, the input after "Input: ".
    const std::string p = builtin_adapter_prompt(*ner, ner->example_input);
    QVERIFY(p.rfind("\nYour task is a Named Entity Recognition (NER) task.", 0) == 0);
    QVERIFY(p.find("Output: {\"person\":\n[], \"organization\": [\"EU\"]") != std::string::npos);
    QVERIFY(p.ends_with("Input: Only France and Britain backed Fischler 's proposal . Output:"));
    const BuiltinAdapter* cnn = find_builtin_adapter("predibase/cnn");
    QVERIFY(cnn);
    const std::string c = builtin_adapter_prompt(*cnn, "X");
    QCOMPARE(c,
             std::string("You are given a news article below. Please summarize the article, including only "
                         "its highlights.\n### Article: X\n### Summary: "));
    const std::string h = builtin_adapter_prompt(*find_builtin_adapter("predibase/hellaswag_processed"), "Y");
    QVERIFY(h.ends_with("\nNow please finish the following passage:\n### Passage: Y\n### Ending: "));
  }

  void shippedFoldersAreFound() {
    for (const BuiltinAdapter& a : builtin_adapters()) {
      QVERIFY2(fs::exists(fs::path(kShipped) / a.folder / "adapter_config.json"), a.folder.c_str());
      QVERIFY2(fs::exists(fs::path(kShipped) / a.folder / "adapter_model.safetensors"), a.folder.c_str());
    }
    const std::vector<AdapterSource> sources = builtin_adapter_sources();
    QCOMPARE(sources.size(), size_t(3));
    for (const AdapterSource& s : sources) {
      QVERIFY(builtin_adapter_of(s));
      QCOMPARE(builtin_adapter_of(s)->id, s.name);
    }
    // A folder of another name, or a random adapter under a built-in id, is not a built-in adapter.
    AdapterSource other = sources[0];
    other.peft_dir = "/somewhere/else";
    QVERIFY(!builtin_adapter_of(other));
    other.peft_dir.clear();
    QVERIFY(!builtin_adapter_of(other));
  }

  void describedOnTheBuiltinModel() {
    QVERIFY(is_builtin_model(*engine_));
    const nlohmann::json info = engine_->info();
    QVERIFY(info.contains("builtin_adapters"));
    QCOMPARE(info["builtin_adapters"]["ids"].size(), size_t(3));
    for (const AdapterSource& s : builtin_adapter_sources()) {
      const AdapterInfo d = describe_adapter(*engine_, s);
      QCOMPARE(d.rank, int64_t(16));
      QCOMPARE(d.alpha, 32.0);
      QCOMPARE(d.scale, 2.0);
      // The seven projections of each of the 30 layers.
      QCOMPARE(d.modules.size(), size_t(7 * 30));
      std::set<std::string> kinds;
      for (const std::string& m : d.modules) kinds.insert(m.substr(m.rfind('.') + 1));
      QCOMPARE(kinds, std::set<std::string>(kProjections.begin(), kProjections.end()));
      QVERIFY(d.parameters > 0 && d.parameters < d.base_parameters / 10);
    }
  }

  void demoModelIsNotTheBuiltinOne() {
    EngineOptions o;
    o.threads = 1;
    const std::unique_ptr<Engine> demo = Engine::load_demo(o);
    QVERIFY(!is_builtin_model(*demo));
    QVERIFY(!demo->info().contains("builtin_adapters"));
  }

  void courseNerSentenceThroughConllpp() {
    const BuiltinAdapter* ner = find_builtin_adapter("predibase/conllpp");
    AdapterSource source;
    for (const AdapterSource& s : builtin_adapter_sources())
      if (s.name == ner->id) source = s;
    const auto adapter = load_adapter(source, engine_->model());
    const std::string prompt = builtin_adapter_prompt(*ner, ner->example_input);
    const GenerateResult with = greedy(prompt, adapter, 64);
    const std::string text = with.sequences[0].text;
    qInfo("predibase/conllpp: %s (%s)", text.c_str(), with.sequences[0].finish_reason.c_str());
    QCOMPARE(with.sequences[0].finish_reason, std::string("eos"));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    QVERIFY2(!j.is_discarded(), text.c_str());
    QString why;
    QVERIFY2(valid_ner(j, &why), qPrintable(why));
    const nlohmann::json expected = nlohmann::json::parse(
        R"({"person": ["Fischler"], "organization": [], "location": ["France", "Britain"], "miscellaneous": []})");
    QVERIFY2(j == expected, j.dump().c_str());
    // The course's format exactly: a space after "Output:", keys in order, ", " and ": " as
    // Python's json.dumps writes them.
    QCOMPARE(text,
             std::string(" {\"person\": [\"Fischler\"], \"organization\": [], \"location\": [\"France\", "
                         "\"Britain\"], \"miscellaneous\": []}"));

    // The base model alone answers otherwise.
    const GenerateResult base = greedy(prompt, nullptr, 64);
    qInfo("base model: %s", base.sequences[0].text.c_str());
    QVERIFY(base.sequences[0].generated_ids != with.sequences[0].generated_ids);
    QVERIFY(base.sequences[0].text != text);
  }

  void eachAdapterChangesTheGreedyText() {
    // Every adapter on its own prompt gives other tokens than the base model on that prompt.
    for (const AdapterSource& s : builtin_adapter_sources()) {
      const BuiltinAdapter* b = builtin_adapter_of(s);
      const std::string prompt = builtin_adapter_prompt(*b, b->example_input);
      const GenerateResult with = greedy(prompt, load_adapter(s, engine_->model()), 16);
      const GenerateResult base = greedy(prompt, nullptr, 16);
      qInfo("%s: %s | base: %s", s.name.c_str(), with.sequences[0].text.c_str(),
            base.sequences[0].text.c_str());
      QVERIFY2(with.sequences[0].generated_ids != base.sequences[0].generated_ids, s.name.c_str());
    }
  }
};

QTEST_MAIN(TestBuiltinAdapters)
#include "test_builtin_adapters.moc"
