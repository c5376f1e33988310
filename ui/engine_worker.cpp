#include "engine_worker.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <new>

#include "model/engine.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"

namespace servelab::ui {

double decodeTokensPerSecond(const QVector<double>& stepMs) {
  double ms = 0;
  for (qsizetype i = 1; i < stepMs.size(); ++i) ms += stepMs[i];
  return ms > 0 ? 1000.0 * static_cast<double>(stepMs.size() - 1) / ms : 0.0;
}

namespace {

// The token's own bytes as readable text: a leading space as "␣", newlines and tabs as escapes,
// bytes that are not complete UTF-8 as <0xNN>.
QString readableToken(const servelab::Tokenizer& tokenizer, int32_t id) {
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

class TokenRelay : public servelab::GenerationSink {
 public:
  TokenRelay(EngineWorker* worker, const servelab::Tokenizer& tokenizer)
      : worker_(worker), tokenizer_(tokenizer) {}
  void on_token(const servelab::TokenEvent& e) override {
    TokenInfo t;
    t.step = e.step;
    t.id = e.id;
    t.piece = QString::fromStdString(e.piece);
    t.display = readableToken(tokenizer_, e.id);
    t.stepMs = e.step_ms;
    t.top.reserve(static_cast<qsizetype>(e.top.size()));
    for (const auto& c : e.top)
      t.top.push_back({c.id, readableToken(tokenizer_, c.id), static_cast<double>(c.probability),
                       static_cast<double>(c.logit)});
    Q_EMIT worker_->token(t);
  }

 private:
  EngineWorker* worker_;
  const servelab::Tokenizer& tokenizer_;
};

class ExperimentRelay : public servelab::ExperimentSink {
 public:
  explicit ExperimentRelay(EngineWorker* worker) : worker_(worker) {}
  void on_point(const std::string& series, double x, double y) override {
    Q_EMIT worker_->point(QString::fromStdString(series), x, y);
  }
  void on_reset(const std::string& series) override {
    Q_EMIT worker_->seriesReset(QString::fromStdString(series));
  }
  void on_progress(double fraction, const std::string& stage) override {
    Q_EMIT worker_->progress(fraction, QString::fromStdString(stage));
  }

 private:
  EngineWorker* worker_;
};

// Scheduler events as queued signals, in the order the engine makes them.
class BatchRelay : public servelab::BatchSink {
 public:
  explicit BatchRelay(EngineWorker* worker) : worker_(worker) {}
  void on_run_start(const std::string& method, int64_t requests, int64_t slots) override {
    Q_EMIT worker_->batchRunStarted(QString::fromStdString(method), requests, slots);
  }
  void on_admit(int64_t request, int64_t slot, int64_t step, double ms) override {
    Q_EMIT worker_->batchAdmitted(request, slot, step, ms);
  }
  void on_token(int64_t request, int32_t id, const std::string& piece, int64_t step, double ms) override {
    Q_EMIT worker_->batchToken(request, id, QString::fromStdString(piece), step, ms);
  }
  void on_retire(const servelab::RequestResult& r) override { Q_EMIT worker_->batchRetired(r); }
  void on_step(const servelab::BatchStep& s) override { Q_EMIT worker_->batchStep(s); }

 private:
  EngineWorker* worker_;
};

// The greedy comparison's tokens as the Generate tab shows them (their own bytes, a leading space as
// an open box) instead of the vocabulary's spellings ("Ġfox").
void makePiecesReadable(servelab::QuantModeResult& mode, const servelab::Tokenizer& tokenizer) {
  for (servelab::GreedyComparison& g : mode.greedy) {
    g.reference_pieces.clear();
    g.pieces.clear();
    for (int32_t id : g.reference_tokens)
      g.reference_pieces.push_back(readableToken(tokenizer, id).toStdString());
    for (int32_t id : g.tokens) g.pieces.push_back(readableToken(tokenizer, id).toStdString());
  }
}

// Each mode's result as a queued signal, as soon as the experiment has it.
class QuantRelay : public servelab::QuantizationSink {
 public:
  QuantRelay(EngineWorker* worker, const servelab::Tokenizer& tokenizer)
      : worker_(worker), tokenizer_(tokenizer) {}
  void on_mode(const servelab::QuantModeResult& mode) override {
    servelab::QuantModeResult m = mode;
    makePiecesReadable(m, tokenizer_);
    Q_EMIT worker_->quantizationMode(m);
  }

 private:
  EngineWorker* worker_;
  const servelab::Tokenizer& tokenizer_;
};

QString firstLine(const char* what) {
  QString s = QString::fromUtf8(what);
  const qsizetype nl = s.indexOf(QLatin1Char('\n'));
  return nl < 0 ? s : s.left(nl);
}

}  // namespace

EngineWorker::EngineWorker(std::atomic<bool>* cancel) : cancel_(cancel) {}
EngineWorker::~EngineWorker() = default;

template <typename F>
bool EngineWorker::guarded(const QString& what, F&& job) {
  try {
    job();
    return true;
  } catch (const servelab::Error& e) {
    const QString kind = QString::fromUtf8(servelab::error_kind_name(e.kind()));
    Q_EMIT log(QStringLiteral("%1 failed (%2): %3").arg(what, kind, firstLine(e.what())));
    Q_EMIT failed(kind, firstLine(e.what()));
  } catch (const std::bad_alloc&) {
    Q_EMIT failed(QStringLiteral("out of memory"), what + QStringLiteral(": out of memory"));
  } catch (const std::exception& e) {
    Q_EMIT log(QStringLiteral("%1 failed: %2").arg(what, firstLine(e.what())));
    Q_EMIT failed(QStringLiteral("engine"), firstLine(e.what()));
  }
  return false;
}

ModelSummary EngineWorker::summarize(const QString& folder) const {
  const nlohmann::json j = engine_->info();
  const servelab::ModelShape& c = engine_->shape();
  ModelSummary s;
  s.name = QString::fromStdString(engine_->name());
  s.folder = folder;
  s.demo = engine_->is_demo();
  s.architecture = QString::fromStdString(j["architecture"].get<std::string>());
  s.format = QString::fromStdString(j["format"].get<std::string>());
  if (j.contains("chat_template") && j["chat_template"].is_string() && j["chat_template"] != "unrecognised")
    s.chatFamily = QString::fromStdString(j["chat_template"].get<std::string>());
  s.caveat = QString::fromStdString(engine_->text_caveat());
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
  s.dtypeBytes = static_cast<int>(engine_->dtype_bytes());
  return s;
}

void EngineWorker::loadModel(const ModelRequest& r) {
  const QString what = r.demo ? QStringLiteral("loading the GPT-2 shape with random weights")
                       : r.folder.isEmpty()
                           ? QStringLiteral("loading the built-in model")
                           : QStringLiteral("loading %1").arg(QDir::toNativeSeparators(r.folder));
  Q_EMIT log(what + QStringLiteral(" on %1 %2").arg(r.device, r.dtype));
  Q_EMIT progress(0.0, what);
  QElapsedTimer clock;
  clock.start();
  std::unique_ptr<servelab::Engine> next;
  try {
    const servelab::EngineOptions o{r.device.toStdString(), r.dtype.toStdString(), r.threads};
    next = r.demo               ? servelab::Engine::load_demo(o)
           : r.folder.isEmpty() ? servelab::Engine::load_builtin(o)
                                : servelab::Engine::load(QDir::cleanPath(r.folder).toStdString(), o);
  } catch (const servelab::Error& e) {
    // The previous engine stays loaded and usable.
    Q_EMIT log(QStringLiteral("%1 failed: %2").arg(what, firstLine(e.what())));
    Q_EMIT modelLoadFailed(firstLine(e.what()));
    return;
  } catch (const std::bad_alloc&) {
    Q_EMIT modelLoadFailed(what + QStringLiteral(": out of memory"));
    return;
  } catch (const std::exception& e) {
    Q_EMIT log(QStringLiteral("%1 failed: %2").arg(what, firstLine(e.what())));
    Q_EMIT modelLoadFailed(firstLine(e.what()));
    return;
  }
  engine_ = std::move(next);
  folder_ = r.folder;
  Q_EMIT log(
      QStringLiteral("loaded %1 in %2 ms").arg(QString::fromStdString(engine_->name())).arg(clock.elapsed()));
  Q_EMIT modelLoaded(summarize(folder_));
}

void EngineWorker::generate(const GenerateRequest& request) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("generate"), [&] {
    servelab::GenerateOptions o = request.options;
    o.cancel = cancel_;
    const std::string text = request.chat
                                 ? servelab::chat_prompt(engine_->tokenizer(), request.prompt.toStdString())
                                 : request.prompt.toStdString();
    const std::vector<int32_t> ids = encode_prompt(engine_->tokenizer(), text);
    if (ids.empty()) throw servelab::InputError("the prompt is empty: type at least one character");
    TokenRelay relay(this, engine_->tokenizer());
    const servelab::GenerateResult g =
        servelab::generate(engine_->model(), engine_->tokenizer(), {ids}, o, &relay);
    const servelab::GeneratedSequence& seq = g.sequences.front();
    GenerateSummary s;
    for (int32_t id : seq.prompt_ids) s.promptIds.push_back(id);
    for (int32_t id : seq.generated_ids) s.generatedIds.push_back(id);
    s.promptText = QString::fromStdString(text);
    s.text = QString::fromStdString(seq.text);
    for (double ms : g.step_ms) s.stepMs.push_back(ms);
    s.totalMs = g.total_ms;
    s.ttftMs = s.stepMs.isEmpty() ? 0 : s.stepMs.front();
    s.decodeTokensPerSecond = decodeTokensPerSecond(s.stepMs);
    s.finishReason = QString::fromStdString(seq.finish_reason);
    Q_EMIT generateFinished(s);
  });
}

void EngineWorker::runKvCacheTiming(const servelab::KvCacheTimingParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("KV-cache timing"), [&] {
    ExperimentRelay relay(this);
    const servelab::KvCacheTimingResult r =
        servelab::run_kv_cache_timing(*engine_, params, servelab::ExperimentControl{&relay, cancel_});
    Q_EMIT kvCacheTimingFinished(r);
  });
}

void EngineWorker::runBatchSweep(const servelab::BatchSweepParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("batch sweep"), [&] {
    ExperimentRelay relay(this);
    const servelab::BatchSweepResult r =
        servelab::run_batch_sweep(*engine_, params, servelab::ExperimentControl{&relay, cancel_});
    Q_EMIT batchSweepFinished(r);
  });
}

void EngineWorker::runSyncVsContinuous(const servelab::SyncVsContinuousParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("synchronous vs continuous batching"), [&] {
    ExperimentRelay relay(this);
    BatchRelay batch(this);
    const servelab::SyncVsContinuousResult r = servelab::run_sync_vs_continuous(
        *engine_, params, servelab::ExperimentControl{&relay, cancel_, &batch});
    Q_EMIT syncVsContinuousFinished(r);
  });
}

void EngineWorker::runSeedBenchmark(const servelab::SeedBenchmarkParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("seed benchmark"), [&] {
    ExperimentRelay relay(this);
    BatchRelay batch(this);
    const servelab::SeedBenchmarkResult r =
        servelab::run_seed_benchmark(*engine_, params, servelab::ExperimentControl{&relay, cancel_, &batch});
    Q_EMIT seedBenchmarkFinished(r);
  });
}

void EngineWorker::runQuantization(const servelab::QuantizationParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("quantization"), [&] {
    ExperimentRelay relay(this);
    QuantRelay quant(this, engine_->tokenizer());
    servelab::QuantizationResult r = servelab::run_quantization(
        *engine_, params, servelab::ExperimentControl{&relay, cancel_, nullptr, &quant});
    for (servelab::QuantModeResult& m : r.modes) makePiecesReadable(m, engine_->tokenizer());
    Q_EMIT quantizationFinished(r);
  });
}

void EngineWorker::runMultiLora(const servelab::MultiLoraParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("multi-LoRA"), [&] {
    ExperimentRelay relay(this);
    servelab::MultiLoraResult r =
        servelab::run_multi_lora(*engine_, params, servelab::ExperimentControl{&relay, cancel_});
    // The texts' tokens as the other tabs show tokens (their own bytes, a leading space as an open
    // box), not the vocabulary's spellings. The toy workload's outputs have no GPT-2 tokens.
    if (r.workload != "toy")
      for (servelab::AdapterOutput& o : r.outputs) {
        o.pieces.clear();
        for (int32_t id : o.tokens) o.pieces.push_back(readableToken(engine_->tokenizer(), id).toStdString());
      }
    Q_EMIT multiLoraFinished(r);
  });
}

void EngineWorker::serveWithAdapters(const AdapterServeParams& params) {
  if (!engine_) {
    Q_EMIT failed(QStringLiteral("input"), QStringLiteral("no model is loaded"));
    return;
  }
  guarded(QStringLiteral("serving with adapters"), [&] {
    const std::vector<int32_t> ids = encode_prompt(engine_->tokenizer(), params.prompt.toStdString());
    if (ids.empty()) throw servelab::InputError("the prompt is empty: type at least one character");
    std::vector<servelab::BatchRequest> requests;
    for (const std::string& adapter : params.requestAdapters) {
      servelab::BatchRequest r;
      r.prompt_ids = ids;
      r.max_new_tokens = params.maxNewTokens;
      r.stop_at_eos = false;  // every request its full budget, as servelab-cli lora serve runs them
      r.adapter = adapter;
      requests.push_back(std::move(r));
    }
    servelab::BatchOptions o;
    o.max_batch = params.maxBatch;
    o.cancel = cancel_;
    o.adapters = params.adapters;
    o.adapter_cache_capacity = params.cacheCapacity;
    o.lora_strategy = params.strategy;
    BatchRelay batch(this);
    const servelab::BatchRunResult r =
        servelab::run_continuous_batching(engine_->model(), engine_->tokenizer(), requests, o, &batch);
    if (r.cancelled) throw servelab::CancelledError("serving with adapters was stopped");
    Q_EMIT adapterServingFinished(r);
  });
}

void EngineWorker::describeAdapter(quint64 ticket, const servelab::AdapterSource& source) {
  if (!engine_) {
    Q_EMIT adapterDescribed(ticket, {}, QStringLiteral("no model is loaded"));
    return;
  }
  try {
    Q_EMIT adapterDescribed(ticket, servelab::describe_adapter(*engine_, source), QString());
  } catch (const std::bad_alloc&) {
    Q_EMIT adapterDescribed(ticket, {}, QStringLiteral("out of memory"));
  } catch (const std::exception& e) {
    Q_EMIT adapterDescribed(ticket, {}, firstLine(e.what()));
  }
}

void EngineWorker::padPrompts(quint64 ticket, const QStringList& prompts) {
  if (!engine_) {
    Q_EMIT promptsPadded(ticket, {}, QStringLiteral("no model is loaded"));
    return;
  }
  std::vector<std::string> texts;
  for (const QString& p : prompts) texts.push_back(p.toStdString());
  try {
    servelab::PaddedPrompts padded = servelab::pad_prompts(engine_->model(), engine_->tokenizer(), texts);
    // Each real token as readable text (its own bytes, a leading space as an open box), the way the
    // Generate tab shows tokens.
    for (size_t r = 0; r < padded.input_ids.size(); ++r)
      for (size_t c = 0; c < padded.input_ids[r].size(); ++c)
        if (padded.attention_mask[r][c] != 0 && r < padded.pieces.size() && c < padded.pieces[r].size())
          padded.pieces[r][c] =
              readableToken(engine_->tokenizer(), static_cast<int32_t>(padded.input_ids[r][c])).toStdString();
    Q_EMIT promptsPadded(ticket, padded, QString());
  } catch (const std::exception& e) {
    Q_EMIT promptsPadded(ticket, {}, firstLine(e.what()));
  }
}

// --- EngineController -----------------------------------------------------------------------

EngineController::EngineController(QObject* parent) : QObject(parent), worker_(new EngineWorker(&cancel_)) {
  qRegisterMetaType<ModelRequest>();
  qRegisterMetaType<ModelSummary>();
  qRegisterMetaType<GenerateRequest>();
  qRegisterMetaType<TokenInfo>();
  qRegisterMetaType<GenerateSummary>();
  qRegisterMetaType<servelab::KvCacheTimingParams>();
  qRegisterMetaType<servelab::KvCacheTimingResult>();
  qRegisterMetaType<servelab::PaddedPrompts>();
  qRegisterMetaType<servelab::BatchSweepParams>();
  qRegisterMetaType<servelab::BatchSweepResult>();
  qRegisterMetaType<servelab::SyncVsContinuousParams>();
  qRegisterMetaType<servelab::SyncVsContinuousResult>();
  qRegisterMetaType<servelab::SeedBenchmarkParams>();
  qRegisterMetaType<servelab::SeedBenchmarkResult>();
  qRegisterMetaType<servelab::RequestResult>();
  qRegisterMetaType<servelab::BatchStep>();
  qRegisterMetaType<servelab::QuantizationParams>();
  qRegisterMetaType<servelab::QuantizationResult>();
  qRegisterMetaType<servelab::QuantModeResult>();
  qRegisterMetaType<servelab::MultiLoraParams>();
  qRegisterMetaType<servelab::MultiLoraResult>();
  qRegisterMetaType<servelab::AdapterSource>();
  qRegisterMetaType<servelab::AdapterInfo>();
  qRegisterMetaType<servelab::BatchRunResult>();
  qRegisterMetaType<AdapterServeParams>();
  thread_.setObjectName(QStringLiteral("servelab-engine"));
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);

  connect(worker_, &EngineWorker::token, this, &EngineController::token);
  connect(worker_, &EngineWorker::point, this, &EngineController::point);
  connect(worker_, &EngineWorker::seriesReset, this, &EngineController::seriesReset);
  connect(worker_, &EngineWorker::progress, this, &EngineController::progress);
  connect(worker_, &EngineWorker::log, this, &EngineController::log);
  connect(worker_, &EngineWorker::batchRunStarted, this, &EngineController::batchRunStarted);
  connect(worker_, &EngineWorker::batchAdmitted, this, &EngineController::batchAdmitted);
  connect(worker_, &EngineWorker::batchToken, this, &EngineController::batchToken);
  connect(worker_, &EngineWorker::batchRetired, this, &EngineController::batchRetired);
  connect(worker_, &EngineWorker::batchStep, this, &EngineController::batchStep);
  connect(worker_, &EngineWorker::promptsPadded, this, &EngineController::promptsPadded);
  connect(worker_, &EngineWorker::quantizationMode, this, &EngineController::quantizationMode);
  connect(worker_, &EngineWorker::adapterDescribed, this, &EngineController::adapterDescribed);
  connect(worker_, &EngineWorker::modelLoaded, this, [this](const ModelSummary& s) {
    model_ = s;
    hadModel_ = true;
    setState(State::Idle);
    Q_EMIT modelLoaded(s);
  });
  connect(worker_, &EngineWorker::modelLoadFailed, this, [this](const QString& m) {
    setState(hadModel_ ? State::Idle : State::NoModel);
    Q_EMIT modelLoadFailed(m);
  });
  connect(worker_, &EngineWorker::generateFinished, this, [this](const GenerateSummary& s) {
    setState(State::Idle);
    Q_EMIT generateFinished(s);
  });
  connect(worker_, &EngineWorker::kvCacheTimingFinished, this,
          [this](const servelab::KvCacheTimingResult& r) {
            setState(State::Idle);
            Q_EMIT kvCacheTimingFinished(r);
          });
  connect(worker_, &EngineWorker::batchSweepFinished, this, [this](const servelab::BatchSweepResult& r) {
    setState(State::Idle);
    Q_EMIT batchSweepFinished(r);
  });
  connect(worker_, &EngineWorker::syncVsContinuousFinished, this,
          [this](const servelab::SyncVsContinuousResult& r) {
            setState(State::Idle);
            Q_EMIT syncVsContinuousFinished(r);
          });
  connect(worker_, &EngineWorker::seedBenchmarkFinished, this,
          [this](const servelab::SeedBenchmarkResult& r) {
            setState(State::Idle);
            Q_EMIT seedBenchmarkFinished(r);
          });
  connect(worker_, &EngineWorker::quantizationFinished, this, [this](const servelab::QuantizationResult& r) {
    setState(State::Idle);
    Q_EMIT quantizationFinished(r);
  });
  connect(worker_, &EngineWorker::multiLoraFinished, this, [this](const servelab::MultiLoraResult& r) {
    setState(State::Idle);
    Q_EMIT multiLoraFinished(r);
  });
  connect(worker_, &EngineWorker::adapterServingFinished, this, [this](const servelab::BatchRunResult& r) {
    setState(State::Idle);
    Q_EMIT adapterServingFinished(r);
  });
  connect(worker_, &EngineWorker::failed, this, [this](const QString& kind, const QString& m) {
    setState(hadModel_ ? State::Idle : State::NoModel);
    Q_EMIT failed(kind, m);
  });
  thread_.start();
}

EngineController::~EngineController() {
  cancel_ = true;
  thread_.quit();
  thread_.wait();
}

QString EngineController::stateText() const {
  switch (state_) {
    case State::NoModel:
      return tr("no model");
    case State::Loading:
      return tr("loading model…");
    case State::Idle:
      return tr("ready");
    case State::Running:
      return tr("running %1 (Esc stops)").arg(running_);
  }
  return {};
}

void EngineController::setState(State s) {
  state_ = s;
  Q_EMIT stateChanged(s);
}

bool EngineController::begin(State next, const QString& what) {
  if (isBusy()) {
    Q_EMIT rejected(tr("The engine is busy with %1; stop it or wait before starting %2.")
                        .arg(state_ == State::Loading ? tr("loading a model") : running_, what));
    return false;
  }
  if (next == State::Running && !hadModel_) {
    Q_EMIT rejected(tr("No model is loaded yet."));
    return false;
  }
  // Only here, with nothing running, is it safe to clear a previous Stop.
  cancel_ = false;
  running_ = what;
  setState(next);
  return true;
}

bool EngineController::loadModel(const ModelRequest& request) {
  if (!begin(State::Loading, tr("loading a model"))) return false;
  QMetaObject::invokeMethod(worker_, "loadModel", Qt::QueuedConnection,
                            Q_ARG(servelab::ui::ModelRequest, request));
  return true;
}

bool EngineController::generate(const GenerateRequest& request) {
  if (!begin(State::Running, tr("generation"))) return false;
  QMetaObject::invokeMethod(worker_, "generate", Qt::QueuedConnection,
                            Q_ARG(servelab::ui::GenerateRequest, request));
  return true;
}

bool EngineController::runKvCacheTiming(const servelab::KvCacheTimingParams& params) {
  if (!begin(State::Running, tr("KV-cache timing"))) return false;
  QMetaObject::invokeMethod(worker_, "runKvCacheTiming", Qt::QueuedConnection,
                            Q_ARG(servelab::KvCacheTimingParams, params));
  return true;
}

bool EngineController::runBatchSweep(const servelab::BatchSweepParams& params) {
  if (!begin(State::Running, tr("the batch sweep"))) return false;
  QMetaObject::invokeMethod(worker_, "runBatchSweep", Qt::QueuedConnection,
                            Q_ARG(servelab::BatchSweepParams, params));
  return true;
}

bool EngineController::runSyncVsContinuous(const servelab::SyncVsContinuousParams& params) {
  if (!begin(State::Running, tr("synchronous vs continuous batching"))) return false;
  QMetaObject::invokeMethod(worker_, "runSyncVsContinuous", Qt::QueuedConnection,
                            Q_ARG(servelab::SyncVsContinuousParams, params));
  return true;
}

bool EngineController::runSeedBenchmark(const servelab::SeedBenchmarkParams& params) {
  if (!begin(State::Running, tr("the seed benchmark"))) return false;
  QMetaObject::invokeMethod(worker_, "runSeedBenchmark", Qt::QueuedConnection,
                            Q_ARG(servelab::SeedBenchmarkParams, params));
  return true;
}

bool EngineController::runQuantization(const servelab::QuantizationParams& params) {
  if (!begin(State::Running, tr("quantization"))) return false;
  QMetaObject::invokeMethod(worker_, "runQuantization", Qt::QueuedConnection,
                            Q_ARG(servelab::QuantizationParams, params));
  return true;
}

bool EngineController::runMultiLora(const servelab::MultiLoraParams& params) {
  if (!begin(State::Running, tr("multi-LoRA"))) return false;
  QMetaObject::invokeMethod(worker_, "runMultiLora", Qt::QueuedConnection,
                            Q_ARG(servelab::MultiLoraParams, params));
  return true;
}

bool EngineController::serveWithAdapters(const AdapterServeParams& params) {
  if (!begin(State::Running, tr("serving with adapters"))) return false;
  QMetaObject::invokeMethod(worker_, "serveWithAdapters", Qt::QueuedConnection,
                            Q_ARG(servelab::ui::AdapterServeParams, params));
  return true;
}

quint64 EngineController::describeAdapter(const servelab::AdapterSource& source) {
  if (state_ == State::NoModel) return 0;
  const quint64 ticket = ++lastTicket_;
  QMetaObject::invokeMethod(worker_, "describeAdapter", Qt::QueuedConnection, Q_ARG(quint64, ticket),
                            Q_ARG(servelab::AdapterSource, source));
  return ticket;
}

quint64 EngineController::padPrompts(const QStringList& prompts) {
  if (state_ == State::NoModel) return 0;
  const quint64 ticket = ++lastTicket_;
  QMetaObject::invokeMethod(worker_, "padPrompts", Qt::QueuedConnection, Q_ARG(quint64, ticket),
                            Q_ARG(QStringList, prompts));
  return ticket;
}

void EngineController::stop() {
  if (state_ == State::Running) {
    cancel_ = true;
    Q_EMIT log(tr("stop requested: the engine stops before its next step"));
  }
}

}  // namespace servelab::ui
