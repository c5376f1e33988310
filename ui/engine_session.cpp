#include "engine_session.h"

#include <QByteArray>
#include <QCoreApplication>
#include <QDir>
#include <QThread>
#include <atomic>

#include "model/engine.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"

namespace servelab::ui {

namespace {
std::atomic<qint64> g_engine_calls{0}, g_gui_engine_calls{0};
}  // namespace

void noteEngineCall() {
  g_engine_calls.fetch_add(1, std::memory_order_relaxed);
  const QCoreApplication* app = QCoreApplication::instance();
  if (app && QThread::currentThread() == app->thread())
    g_gui_engine_calls.fetch_add(1, std::memory_order_relaxed);
}

EngineCallCount engineCallCount() {
  return {g_engine_calls.load(std::memory_order_relaxed), g_gui_engine_calls.load(std::memory_order_relaxed)};
}

double decodeTokensPerSecond(const QVector<double>& stepMs) {
  double ms = 0;
  for (qsizetype i = 1; i < stepMs.size(); ++i) ms += stepMs[i];
  return ms > 0 ? 1000.0 * static_cast<double>(stepMs.size() - 1) / ms : 0.0;
}

QStringList availableDevices() {
  QStringList out;
  for (const std::string& d : servelab::available_devices()) out << QString::fromStdString(d);
  return out;
}

std::unique_ptr<servelab::Engine> loadEngine(const ModelRequest& r) {
  noteEngineCall();
  servelab::EngineOptions o{r.device.toStdString(), r.dtype.toStdString(), r.threads};
  o.cuda_graphs = r.cudaGraphs;
  if (r.demo) return servelab::Engine::load_demo(o);
  return r.folder.isEmpty() ? servelab::Engine::load_builtin(o)
                            : servelab::Engine::load(QDir::cleanPath(r.folder).toStdString(), o);
}

ModelSummary summarize(const servelab::Engine& engine, const QString& folder) {
  noteEngineCall();
  const nlohmann::json j = engine.info();
  const servelab::ModelShape& c = engine.shape();
  ModelSummary s;
  s.name = QString::fromStdString(engine.name());
  s.folder = folder;
  s.demo = engine.is_demo();
  s.builtin = j.value("builtin_model", false);
  s.architecture = QString::fromStdString(j["architecture"].get<std::string>());
  s.format = QString::fromStdString(j["format"].get<std::string>());
  if (j.contains("chat_template") && j["chat_template"].is_string() && j["chat_template"] != "unrecognised")
    s.chatFamily = QString::fromStdString(j["chat_template"].get<std::string>());
  s.caveat = QString::fromStdString(engine.text_caveat());
  s.device = QString::fromStdString(j["device"].get<std::string>());
  s.dtype = QString::fromStdString(j["dtype"].get<std::string>());
  s.tokenizer = QString::fromStdString(j["tokenizer"].get<std::string>());
  s.threads = j["threads"].get<int>();
  s.parameters = j["parameters"].get<qint64>();
  s.weightBytes = j["weight_bytes"].get<qint64>();
  s.layers = static_cast<int>(c.n_layer);
  s.heads = static_cast<int>(c.n_head);
  s.width = static_cast<int>(c.n_embd);
  s.positions = static_cast<int>(c.context);
  s.vocab = static_cast<int>(c.vocab_size);
  s.inner = static_cast<int>(c.n_inner);
  for (const nlohmann::json& p : j["projections"])
    s.projections.append({QString::fromStdString(p["name"].get<std::string>()), p["in"].get<qint64>(),
                          p["out"].get<qint64>()});
  s.dtypeBytes = static_cast<int>(engine.dtype_bytes());
  if (j.contains("cuda_graphs") && j["cuda_graphs"].is_object()) {
    s.cudaGraphs = j["cuda_graphs"].value("active", false);
    s.cudaGraphsWhyNot = QString::fromStdString(j["cuda_graphs"].value("why_not", std::string()));
  }
  if (j.contains("cpu") && j["cpu"].is_object()) {
    const nlohmann::json& cpu = j["cpu"];
    s.cpuModel = QString::fromStdString(cpu.value("model", std::string()));
    s.cpuIsa = QString::fromStdString(cpu.value("isa", std::string()));
    if (cpu.contains("kernels") && cpu["kernels"].is_object())
      for (const auto& [path, kernel] : cpu["kernels"].items())
        if (kernel.is_string())
          s.cpuKernels << QStringLiteral("%1: %2").arg(QString::fromStdString(path),
                                                       QString::fromStdString(kernel.get<std::string>()));
  }
  return s;
}

QString readableToken(const servelab::Engine& engine, int id) {
  noteEngineCall();
  const servelab::Tokenizer& tokenizer = engine.tokenizer();
  if (id < 0 || id >= tokenizer.vocab_size()) return QStringLiteral("<id %1>").arg(id);
  const std::string bytes = tokenizer.token_bytes(id);
  const QByteArray raw = QByteArray::fromStdString(bytes);
  QString text = QString::fromUtf8(raw);
  if (text.contains(QChar::ReplacementCharacter) || text.toUtf8() != raw) {
    text.clear();
    for (unsigned char c : bytes)
      text +=
          (c >= 0x20 && c < 0x7f) ? QString(QChar(c)) : QStringLiteral("<0x%1>").arg(c, 2, 16, QChar('0'));
    return text;
  }
  if (text.startsWith(QLatin1Char(' '))) text.replace(0, 1, QStringLiteral("\u2423"));
  text.replace(QLatin1Char('\n'), QStringLiteral("\\n"));
  text.replace(QLatin1Char('\t'), QStringLiteral("\\t"));
  text.replace(QLatin1Char('\r'), QStringLiteral("\\r"));
  return text;
}

namespace {

// The tab's summary of one generated sequence from promptText.
GenerateSummary summarizeRun(const std::string& promptText, const servelab::GenerateResult& g) {
  const servelab::GeneratedSequence& seq = g.sequences.front();
  GenerateSummary s;
  for (int32_t id : seq.prompt_ids) s.promptIds.push_back(id);
  for (int32_t id : seq.generated_ids) s.generatedIds.push_back(id);
  s.promptText = QString::fromStdString(promptText);
  s.text = QString::fromStdString(seq.text);
  for (double ms : g.step_ms) s.stepMs.push_back(ms);
  s.totalMs = g.total_ms;
  s.ttftMs = s.stepMs.isEmpty() ? 0 : s.stepMs.front();
  s.decodeTokensPerSecond = decodeTokensPerSecond(s.stepMs);
  s.finishReason = QString::fromStdString(seq.finish_reason);
  return s;
}

}  // namespace

GenerateSummary generateText(const servelab::Engine& engine, const GenerateRequest& request,
                             servelab::GenerationSink* sink, const std::atomic<bool>* cancel) {
  noteEngineCall();
  servelab::GenerateOptions o = request.options;
  o.cancel = cancel;
  const std::string text = request.chat
                               ? servelab::chat_prompt(engine.tokenizer(), request.prompt.toStdString())
                               : request.prompt.toStdString();
  const std::vector<int32_t> ids = servelab::encode_prompt(engine.tokenizer(), text);
  if (ids.empty()) throw servelab::InputError("the prompt is empty: type at least one character");
  return summarizeRun(text, servelab::generate(engine.model(), engine.tokenizer(), {ids}, o, sink));
}

ChatTurnSummary chatTurn(const servelab::Engine& engine, const ChatTurnRequest& request,
                         servelab::GenerationSink* sink, const std::atomic<bool>* cancel) {
  noteEngineCall();
  servelab::GenerateOptions o = request.options;
  o.cancel = cancel;
  const servelab::ChatPrompt prompt = servelab::fit_chat_prompt(engine.tokenizer(), request.conversation,
                                                                engine.shape().context, o.max_new_tokens);
  ChatTurnSummary s;
  s.generation = summarizeRun(prompt.text,
                              servelab::generate(engine.model(), engine.tokenizer(), {prompt.ids}, o, sink));
  s.context = prompt.context;
  s.droppedExchanges = prompt.dropped_exchanges;
  s.droppedNote = QString::fromStdString(prompt.dropped_note());
  return s;
}

servelab::PaddedPrompts padPrompts(const servelab::Engine& engine, const QStringList& prompts) {
  noteEngineCall();
  std::vector<std::string> texts;
  for (const QString& p : prompts) texts.push_back(p.toStdString());
  servelab::PaddedPrompts padded = servelab::pad_prompts(engine.model(), engine.tokenizer(), texts);
  for (size_t r = 0; r < padded.input_ids.size(); ++r)
    for (size_t c = 0; c < padded.input_ids[r].size(); ++c)
      if (padded.attention_mask[r][c] != 0 && r < padded.pieces.size() && c < padded.pieces[r].size())
        padded.pieces[r][c] = readableToken(engine, static_cast<int>(padded.input_ids[r][c])).toStdString();
  return padded;
}

void makeReadable(const servelab::Engine& engine, servelab::QuantModeResult& mode) {
  noteEngineCall();
  for (servelab::GreedyComparison& g : mode.greedy) {
    g.reference_pieces.clear();
    g.pieces.clear();
    for (int32_t id : g.reference_tokens)
      g.reference_pieces.push_back(readableToken(engine, id).toStdString());
    for (int32_t id : g.tokens) g.pieces.push_back(readableToken(engine, id).toStdString());
  }
}

}  // namespace servelab::ui
