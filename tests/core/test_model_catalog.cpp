// The model catalog (model/model_catalog.h) on a computer in miniature (model_catalog_tree.h): every
// field of every entry, refs/main and the newest snapshot, Ollama's manifests and blobs, the user's
// folder with a dangling link and a link loop, "why not" equal to what loading says, the loadable
// ones loading, and the default roots from the environment.
#include <QTemporaryDir>
#include <QTest>
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "model/engine.h"
#include "model/gguf_file.h"
#include "model/model_catalog.h"
#include "model_catalog_tree.h"
#include "test_support.h"
#include "util/errors.h"

using namespace servelab;
using namespace servelab::test;
namespace fs = std::filesystem;

namespace {

// What loading the path says, or "" when it loads.
std::string load_error(const std::string& path) {
  try {
    Engine::load(path, EngineOptions{});
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

std::uint64_t size_of_files(const fs::path& dir) {
  std::uint64_t n = 0;
  for (const fs::directory_entry& f : fs::directory_iterator(dir)) n += fs::file_size(f.path());
  return n;
}

}  // namespace

class TestModelCatalog : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  CatalogTree tree_;
  std::vector<CatalogEntry> entries_;

  const CatalogEntry& entry(const std::string& name) const {
    const auto it =
        std::find_if(entries_.begin(), entries_.end(), [&](const CatalogEntry& e) { return e.name == name; });
    if (it == entries_.end()) throw std::runtime_error("no catalog entry " + name);
    return *it;
  }

  // The fields every entry has, checked at once; why_not is compared where the test knows it.
  void check(const std::string& name, ModelSource source, const fs::path& root, const fs::path& path,
             const std::string& architecture, const std::string& format, const std::string& quantization,
             std::uint64_t size, bool loadable) {
    const CatalogEntry& e = entry(name);
    QCOMPARE(model_source_name(e.source), model_source_name(source));
    QCOMPARE(e.root, root.string());
    QCOMPARE(e.path, path.string());
    QCOMPARE(e.architecture, architecture);
    QCOMPARE(e.format, format);
    QCOMPARE(e.quantization, quantization);
    QCOMPARE(e.size_bytes, size);
    QCOMPARE(e.loadable, loadable);
    QCOMPARE(e.why_not.empty(), loadable);
    QVERIFY2(e.why_not.find('\n') == std::string::npos, e.why_not.c_str());
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    if (!have_builtin_model()) QSKIP(kNoBuiltinModel);
    tree_ = catalog_environment(tmp_.path().toStdString());
    CatalogRoots roots = default_catalog_roots();
    roots.folders = {tree_.mine().string()};
    entries_ = scan_models(roots);
  }

  // Progress after every model judged, in order; a cancel read before the next folder or model
  // stops the scan with ScanCancelled (a closed Models dialog stops its scan so).
  void progressAndCancel() {
    CatalogRoots roots = default_catalog_roots();
    roots.folders = {tree_.mine().string()};
    std::vector<size_t> counts;
    std::vector<std::string> paths;
    ScanControl control;
    control.progress = [&](size_t found, const std::string& path) {
      counts.push_back(found);
      paths.push_back(path);
    };
    const std::vector<CatalogEntry> all = scan_models(roots, control);
    QCOMPARE(counts.size(), all.size());
    for (size_t i = 0; i < counts.size(); ++i) QCOMPARE(counts[i], i + 1);
    std::vector<std::string> listed;
    for (const CatalogEntry& e : all) listed.push_back(e.path);
    std::sort(listed.begin(), listed.end());
    std::sort(paths.begin(), paths.end());
    QCOMPARE(paths, listed);

    std::atomic<bool> cancel{false};
    size_t seen = 0;
    control.cancel = &cancel;
    control.progress = [&](size_t found, const std::string&) {
      seen = found;
      if (found == 2) cancel = true;
    };
    bool cancelled = false;
    try {
      scan_models(roots, control);
    } catch (const ScanCancelled&) {
      cancelled = true;
    }
    QVERIFY(cancelled);
    QCOMPARE(seen, size_t{2});
    cancel = true;  // set before the scan: nothing is judged
    seen = 0;
    QVERIFY_THROWS_EXCEPTION(ScanCancelled, scan_models(roots, control));
    QCOMPARE(seen, size_t{0});
  }

  void everyModelInOrder() {
    std::vector<std::string> names;
    for (const CatalogEntry& e : entries_) names.push_back(e.name);
    // Roots in order (Hugging Face, LM Studio, Ollama, the user's), names sorted within each; the
    // link back up the user's folder adds nothing.
    const std::vector<std::string> expected = {"org/bert-tiny",
                                               "org/llama-gptq",
                                               "org/tiny-gpt2",
                                               "bartowski/SmolLM2-GGUF/SmolLM2.Q4_1.gguf",
                                               "someone/broken/broken.gguf",
                                               "smollm2:135m",
                                               "someone/gone:latest",
                                               "dangling.gguf",
                                               "deep/er/bert.gguf",
                                               "tiny"};
    QCOMPARE(names, expected);
  }

  void huggingFaceCache() {
    // refs/main names snapshot bbb (aaa, a t5, is not listed); its files are links into blobs/.
    check("org/tiny-gpt2", ModelSource::HfCache, tree_.hub(), tree_.tiny_snapshot(), "gpt2", "safetensors",
          "F32", size_of_files(tree_.tiny_blobs()), true);
    // Without refs/main the newest snapshot: "new", a bert, which no record loads.
    check("org/bert-tiny", ModelSource::HfCache, tree_.hub(), tree_.bert_snapshot(), "bert", "safetensors",
          "F32", size_of_files(tree_.bert_snapshot()), false);
    QCOMPARE(entry("org/bert-tiny").why_not, load_error(tree_.bert_snapshot().string()));
    QVERIFY(entry("org/bert-tiny").why_not.find("model_type \"bert\" is not supported") != std::string::npos);
    // A pre-quantized checkpoint: its method and bits, refused by name before any weight is read.
    check("org/llama-gptq", ModelSource::HfCache, tree_.hub(), tree_.gptq_snapshot(), "llama", "safetensors",
          "gptq 4-bit", size_of_files(tree_.gptq_snapshot()), false);
    QCOMPARE(entry("org/llama-gptq").why_not, load_error(tree_.gptq_snapshot().string()));
    QVERIFY(entry("org/llama-gptq").why_not.find("pre-quantized checkpoint") != std::string::npos);
  }

  void lmStudio() {
    const std::uint64_t builtin = fs::file_size(SERVELAB_BUILTIN_MODEL);
    check("bartowski/SmolLM2-GGUF/SmolLM2.Q4_1.gguf", ModelSource::LmStudio, tree_.lm_studio(),
          tree_.lm_gguf(), "llama", "gguf", "Q4_1", builtin, true);
    // A file that only starts like a GGUF: listed with the reader's reason.
    check("someone/broken/broken.gguf", ModelSource::LmStudio, tree_.lm_studio(), tree_.corrupt_gguf(), "",
          "gguf", "", 5, false);
    QCOMPARE(entry("someone/broken/broken.gguf").why_not, load_error(tree_.corrupt_gguf().string()));
  }

  void ollama() {
    check("smollm2:135m", ModelSource::Ollama, tree_.ollama(), tree_.ollama_blob(), "llama", "gguf", "Q4_1",
          fs::file_size(SERVELAB_BUILTIN_MODEL), true);
    const fs::path manifest =
        tree_.ollama() / "manifests" / "registry.ollama.ai" / "someone" / "gone" / "latest";
    check("someone/gone:latest", ModelSource::Ollama, tree_.ollama(), manifest, "", "gguf", "", 0, false);
    QCOMPARE(entry("someone/gone:latest").why_not,
             (tree_.ollama() / "blobs" / ("sha256-" + std::string(64, 'b'))).string() +
                 ": not found (the model layer of " + manifest.string() + ")");
  }

  void userFolder() {
    check("tiny", ModelSource::Folder, tree_.mine(), tree_.user_tiny(), "gpt2", "safetensors", "F32",
          size_of_files(tree_.user_tiny()), true);
    // An architecture no record loads; its type from general.file_type.
    check("deep/er/bert.gguf", ModelSource::Folder, tree_.mine(), tree_.bert_gguf(), "bert", "gguf", "Q8_0",
          fs::file_size(tree_.bert_gguf()), false);
    QCOMPARE(entry("deep/er/bert.gguf").why_not, load_error(tree_.bert_gguf().string()));
    check("dangling.gguf", ModelSource::Folder, tree_.mine(), tree_.dangling(), "", "gguf", "", 0, false);
    QCOMPARE(entry("dangling.gguf").why_not, load_error(tree_.dangling().string()));
  }

  // "Loadable" is kept: the folder and the Ollama blob (a GGUF without the extension) load.
  void loadableOnesLoad() {
    QCOMPARE(load_error(entry("tiny").path), std::string());
    // The blob is named by its digest; the loaded model by the file's general.name.
    const auto blob = Engine::load(entry("smollm2:135m").path, EngineOptions{});
    const auto name = GgufFile::open(SERVELAB_BUILTIN_MODEL).find_string("general.name");
    QVERIFY(name.has_value());
    QCOMPARE(blob->name(), *name);
  }

  void table() {
    const std::string t = catalog_table(entries_);
    QVERIFY(t.rfind("name", 0) == 0);
    QVERIFY(t.find("architecture") != std::string::npos);
    size_t reasons = 0;
    for (const CatalogEntry& e : entries_) {
      QVERIFY2(t.find(e.name) != std::string::npos, e.name.c_str());
      if (!e.loadable)
        QVERIFY2(t.find("    why not: " + e.why_not + "\n") != std::string::npos, e.why_not.c_str());
      reasons += e.loadable ? 0 : 1;
    }
    size_t lines = 0;
    for (size_t at = t.find("why not: "); at != std::string::npos; at = t.find("why not: ", at + 1)) ++lines;
    QCOMPARE(lines, reasons);
    QCOMPARE(catalog_table({}), std::string("no models found\n"));
    QCOMPARE(human_size(999), std::string("999 B"));
    QCOMPARE(human_size(1500), std::string("1.5 KB"));
    QCOMPARE(human_size(135'000'000), std::string("135 MB"));
  }

  void json() {
    const nlohmann::json j = entry("smollm2:135m").to_json();
    QCOMPARE(j["source"].get<std::string>(), std::string("ollama"));
    QCOMPARE(j["quantization"].get<std::string>(), std::string("Q4_1"));
    QCOMPARE(j["loadable"].get<bool>(), true);
    QCOMPARE(j["size_bytes"].get<std::uint64_t>(),
             static_cast<std::uint64_t>(fs::file_size(SERVELAB_BUILTIN_MODEL)));
  }

  void badFolders() {
    CatalogRoots r;
    r.folders = {(tree_.root / "nowhere").string()};
    QCOMPARE(error_of(ErrorKind::Input, [&] { scan_models(r); }),
             "model folder " + r.folders[0] + " does not exist");
    r.folders = {tree_.bert_gguf().string()};
    QCOMPARE(error_of(ErrorKind::Input, [&] { scan_models(r); }),
             r.folders[0] + " is not a folder (give a folder to search for models)");
    r.folders = {""};
    QCOMPARE(error_of(ErrorKind::Input, [&] { scan_models(r); }),
             std::string("a folder to search for models is empty (give its path)"));
    // Roots that are not there hold nothing.
    CatalogRoots none;
    none.hf_cache = (tree_.root / "nowhere").string();
    none.ollama = none.hf_cache;
    none.lm_studio = {none.hf_cache};
    QVERIFY(scan_models(none).empty());
  }

  void defaultRoots() {
    const std::string home = tree_.home().string();
    QCOMPARE(default_catalog_roots().hf_cache, tree_.hub().string());
    ::unsetenv("HF_HUB_CACHE");
    ::setenv("HF_HOME", "/x/hf", 1);
    QCOMPARE(default_catalog_roots().hf_cache, std::string("/x/hf/hub"));
    ::unsetenv("HF_HOME");
    // huggingface_hub's next place: $XDG_CACHE_HOME/huggingface/hub, then the home folder's.
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const std::string saved_xdg = xdg ? xdg : "";
    ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
    QCOMPARE(default_catalog_roots().hf_cache, std::string("/x/cache/huggingface/hub"));
    ::unsetenv("XDG_CACHE_HOME");
    QCOMPARE(default_catalog_roots().hf_cache, home + "/.cache/huggingface/hub");
    if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
    QCOMPARE(default_catalog_roots().lm_studio,
             (std::vector<std::string>{home + "/.lmstudio/models", home + "/.cache/lm-studio/models"}));
    QCOMPARE(default_catalog_roots().ollama, tree_.ollama().string());
    ::unsetenv("OLLAMA_MODELS");
    QCOMPARE(default_catalog_roots().ollama, home + "/.ollama/models");
    tree_.use_as_environment();
  }
};

QTEST_GUILESS_MAIN(TestModelCatalog)
#include "test_model_catalog.moc"
