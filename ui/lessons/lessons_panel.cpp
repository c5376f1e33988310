#include "lessons/lessons_panel.h"

#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "engine_controller.h"
#include "engine_job.h"
#include "experiment_tab.h"
#include "form_widgets.h"
#include "main_window.h"

namespace servelab::ui {

namespace {

QString paragraphs(const QString& text) {
  QString html;
  for (const QString& p : text.split(QStringLiteral("\n\n"), Qt::SkipEmptyParts))
    html += QStringLiteral("<p>%1</p>").arg(p.trimmed().toHtmlEscaped());
  return html;
}

}  // namespace

LessonsPanel::LessonsPanel(MainWindow* window, QList<Lesson> lessons, QWidget* parent)
    : QWidget(parent), window_(window), lessons_(std::move(lessons)) {
  setObjectName(QStringLiteral("lessonsPanel"));
  list_ = new QListWidget(this);
  list_->setObjectName(QStringLiteral("lessonList"));
  list_->setToolTip(tr("The course's lessons in order, then what the app adds beyond them"));
  list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  list_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  list_->setTextElideMode(Qt::ElideRight);
  narrative_ = new QTextBrowser(this);
  narrative_->setObjectName(QStringLiteral("lessonNarrative"));
  narrative_->setOpenExternalLinks(false);

  stepBox_ = new QGroupBox(this);
  stepBox_->setObjectName(QStringLiteral("lessonStepBox"));
  stepText_ = new QLabel(this);
  stepText_->setObjectName(QStringLiteral("lessonStepText"));
  stepText_->setWordWrap(true);
  stepText_->setTextFormat(Qt::RichText);
  stepSettings_ = new QLabel(this);
  stepSettings_->setObjectName(QStringLiteral("lessonStepSettings"));
  stepSettings_->setWordWrap(true);
  stepSettings_->setTextFormat(Qt::RichText);
  stepSettings_->setForegroundRole(QPalette::PlaceholderText);
  previous_ = new QPushButton(tr("◀ Previous"), this);
  previous_->setObjectName(QStringLiteral("lessonPrevious"));
  previous_->setToolTip(tr("The previous step (Alt+Left)"));
  run_ = new QPushButton(tr("Run this step"), this);
  run_->setObjectName(QStringLiteral("lessonRun"));
  run_->setToolTip(tr("Switch to the step's tab, set its controls to the step's values and run it"));
  next_ = new QPushButton(tr("Next ▶"), this);
  next_->setObjectName(QStringLiteral("lessonNext"));
  next_->setToolTip(tr("The next step (Alt+Right)"));
  notice_ = new QLabel(this);
  notice_->setObjectName(QStringLiteral("lessonNotice"));
  notice_->setWordWrap(true);
  notice_->setTextFormat(Qt::RichText);
  notice_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  notice_->setStyleSheet(QStringLiteral(
      "QLabel#lessonNotice { border: 1px solid palette(mid); border-radius: 4px; padding: 6px; }"));
  progress_ = new QLabel(this);
  progress_->setObjectName(QStringLiteral("lessonProgress"));

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(previous_);
  buttons->addWidget(run_, 1);
  buttons->addWidget(next_);
  auto* sv = new QVBoxLayout(stepBox_);
  sv->addWidget(stepText_);
  sv->addWidget(stepSettings_);
  sv->addLayout(buttons);
  sv->addWidget(notice_);

  // The narrative above the step, the line between them movable; the step scrolls when the panel
  // is too short for its text and notice.
  auto* stepScroll = new QScrollArea(this);
  stepScroll->setObjectName(QStringLiteral("lessonStepScroll"));
  stepScroll->setWidget(stepBox_);
  stepScroll->setWidgetResizable(true);
  stepScroll->setFrameShape(QFrame::NoFrame);
  stepScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->setObjectName(QStringLiteral("lessonSplitter"));
  split->addWidget(narrative_);
  split->addWidget(stepScroll);
  split->setChildrenCollapsible(false);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 2);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(list_);
  layout->addWidget(split, 1);
  layout->addWidget(progress_);

  connect(list_, &QListWidget::currentRowChanged, this, [this](int row) {
    if (row >= 0 && row != lesson_) showLessonAt(row, 1);
  });
  connect(previous_, &QPushButton::clicked, this, &LessonsPanel::previousStep);
  connect(next_, &QPushButton::clicked, this, &LessonsPanel::nextStep);
  connect(run_, &QPushButton::clicked, this, [this] { runStep(); });
  EngineController* engine = window_->engine();
  connect(engine, &EngineController::stateChanged, this, &LessonsPanel::updateButtons);
  connect(engine, &EngineController::rejected, this, [this](const QString& why) { lastRejection_ = why; });
  connect(engine, &EngineController::jobStarted, this, [this](EngineJob* job) {
    if (!running_) return;
    connect(job, &EngineJob::failed, this, [this](const QString& kind, const QString&) {
      if (running_) running_->failureKind = kind;
    });
  });

  refreshList();
  if (!lessons_.isEmpty()) showLessonAt(0, 1);
  refresh();
}

QStringList LessonsPanel::lessonIds() const {
  QStringList ids;
  for (const Lesson& l : lessons_) ids << l.id;
  return ids;
}

QString LessonsPanel::currentLessonId() const { return lesson_ >= 0 ? lessons_[lesson_].id : QString(); }

bool LessonsPanel::showLesson(const QString& id, int step) {
  const int index = static_cast<int>(lessonIds().indexOf(id));
  if (index < 0 || step < 1 || step > lessons_[index].steps.size()) return false;
  showLessonAt(index, step);
  return true;
}

void LessonsPanel::showLessonAt(int index, int step) {
  if (index < 0 || index >= lessons_.size()) return;
  lesson_ = index;
  step_ = std::clamp(step, 1, static_cast<int>(lessons_[index].steps.size())) - 1;
  refresh();
}

void LessonsPanel::previousStep() {
  if (lesson_ < 0) return;
  if (step_ > 0)
    showLessonAt(lesson_, step_);
  else if (lesson_ > 0)
    showLessonAt(lesson_ - 1, static_cast<int>(lessons_[lesson_ - 1].steps.size()));
}

void LessonsPanel::nextStep() {
  if (lesson_ < 0) return;
  if (step_ + 1 < lessons_[lesson_].steps.size())
    showLessonAt(lesson_, step_ + 2);
  else if (lesson_ + 1 < lessons_.size())
    showLessonAt(lesson_ + 1, 1);
}

bool LessonsPanel::runStep() {
  if (lesson_ < 0) return false;
  const Lesson& lesson = lessons_[lesson_];
  const LessonStep& step = lesson.steps[step_];
  const int number = step_ + 1;
  // A step that cannot start says why in its notice line, and stepFinished(false) reports it.
  auto refuse = [&](const QString& why) {
    const QString text = tr("The step did not start: %1").arg(why);
    setNotice(lesson.id, number, text, true);
    updateButtons();
    Q_EMIT stepFinished(false, text);
    return false;
  };
  if (running_) return refuse(tr("the previous step is still running"));
  ExperimentTab* tab = window_->tab(step.tab);
  if (!tab) return refuse(tr("there is no %1 tab").arg(step.tab));
  if (tab->isRunning()) return refuse(tr("the %1 tab is already running").arg(tab->title()));
  QString error;
  if (!applyStepSettings(*tab, step, &error)) return refuse(error);
  window_->selectTab(step.tab);
  running_ = Running{lesson.id, number, tab, QString()};
  lastRejection_.clear();
  setNotice(lesson.id, number, tr("Running on the %1 tab…").arg(tab->title()), false);
  const QMetaObject::Connection c =
      connect(tab, &ExperimentTab::runFinished, this, &LessonsPanel::onRunFinished, Qt::SingleShotConnection);
  const bool started = step.preset.isEmpty() ? tab->run() : tab->runPresetId(step.preset);
  if (!started) {
    disconnect(c);
    running_.reset();
    // The engine's refusal of this very run (busy, no model), else the tab's own words.
    return refuse(!lastRejection_.isEmpty()   ? lastRejection_
                  : !tab->refusal().isEmpty() ? tab->refusal()
                                              : tr("the %1 experiment could not start").arg(step.tab));
  }
  updateButtons();
  return true;
}

void LessonsPanel::onRunFinished(bool ok, const QString& message) {
  if (!running_) return;
  const Running r = *running_;
  running_.reset();
  const int index = static_cast<int>(lessonIds().indexOf(r.lesson));
  const LessonStep& step = lessons_[index].steps[r.step - 1];
  QString text;
  bool failed = true;
  if (!ok) {
    const bool stopped = r.failureKind == QLatin1String("cancelled") ||
                         message.compare(QLatin1String("stopped"), Qt::CaseInsensitive) == 0;
    text =
        stopped
            ? tr("The run was stopped before it finished, so there is nothing to compare yet: run the step "
                 "again and let it end.")
            : tr("The run failed, so there is nothing to notice: %1")
                  .arg(message.isEmpty() ? tr("no reason given") : message);
  } else {
    QString error;
    if (const auto filled = fillNotice(step.notice, r.tab->resultValues(), &error)) {
      text = *filled;
      failed = false;
      done_.insert(key(r.lesson, r.step));
    } else {
      ok = false;
      text = tr("The run ended, but %1, so the line cannot be filled.").arg(error);
    }
  }
  setNotice(r.lesson, r.step, text, failed);
  refreshList();
  updateButtons();
  Q_EMIT stepFinished(ok, ok ? QString() : text);
}

void LessonsPanel::setNotice(const QString& lessonId, int step, const QString& text, bool failed) {
  notices_[key(lessonId, step)] = {text, failed};
  if (lessonId == currentLessonId() && step == currentStep()) refresh();
}

QString LessonsPanel::noticeText() const { return noticeFor(currentLessonId(), currentStep()); }

QString LessonsPanel::noticeFor(const QString& lessonId, int step) const {
  return notices_.value(key(lessonId, step)).first;
}

QStringList LessonsPanel::doneSteps() const {
  QStringList out;
  for (const Lesson& l : lessons_)
    for (int i = 1; i <= l.steps.size(); ++i)
      if (done_.contains(key(l.id, i))) out << key(l.id, i);
  return out;
}

bool LessonsPanel::isDone(const QString& lessonId, int step) const {
  return done_.contains(key(lessonId, step));
}

QString LessonsPanel::progressText() const {
  qsizetype total = 0;
  for (const Lesson& l : lessons_) total += l.steps.size();
  return tr("%1 of %2 steps run to the end").arg(doneSteps().size()).arg(total);
}

void LessonsPanel::refreshList() {
  const QSignalBlocker block(list_);
  list_->clear();
  for (int i = 0; i < lessons_.size(); ++i) {
    const Lesson& l = lessons_[i];
    int done = 0;
    for (int s = 1; s <= l.steps.size(); ++s) done += done_.contains(key(l.id, s)) ? 1 : 0;
    const QString mark = done == l.steps.size() ? QStringLiteral("  ✓")
                         : done > 0             ? QStringLiteral("  (%1/%2)").arg(done).arg(l.steps.size())
                                                : QString();
    auto* item = new QListWidgetItem(QStringLiteral("%1. %2%3").arg(i + 1).arg(l.title, mark), list_);
    item->setData(Qt::UserRole, l.id);
  }
  list_->setCurrentRow(lesson_);
  // Every lesson in view without scrolling (the narrative takes the rest).
  const int rows = static_cast<int>(lessons_.size());
  list_->setFixedHeight(rows > 0 ? list_->sizeHintForRow(0) * rows + 2 * list_->frameWidth() + 4 : 40);
  progress_->setText(progressText());
}

void LessonsPanel::refresh() {
  if (lesson_ < 0) {
    narrative_->setHtml(tr("<p>No lessons were found.</p>"));
    stepBox_->setTitle(QString());
    stepText_->clear();
    stepSettings_->clear();
    notice_->clear();
    updateButtons();
    return;
  }
  const Lesson& l = lessons_[lesson_];
  const LessonStep& s = l.steps[step_];
  if (list_->currentRow() != lesson_) {
    const QSignalBlocker block(list_);
    list_->setCurrentRow(lesson_);
  }
  if (shownNarrative_ != lesson_) {  // kept (and its scroll position) while the steps change
    shownNarrative_ = lesson_;
    narrative_->setHtml(
        QStringLiteral("<h3>%1</h3>%2").arg(l.title.toHtmlEscaped(), paragraphs(l.narrative)));
  }
  stepBox_->setTitle(tr("Step %1 of %2: %3").arg(step_ + 1).arg(l.steps.size()).arg(s.title));
  stepText_->setText(paragraphs(s.text));
  const ExperimentTab* tab = window_->tab(s.tab);
  const QString tabName = tab ? tab->title() : s.tab;
  QString where = s.preset.isEmpty() ? tr("On the <b>%1</b> tab").arg(tabName.toHtmlEscaped())
                                     : tr("On the <b>%1</b> tab, preset <i>%2</i>")
                                           .arg(tabName.toHtmlEscaped(), s.preset.toHtmlEscaped());
  if (!s.settings.isEmpty()) where += QStringLiteral(": ") + stepSettingsText(s).toHtmlEscaped();
  stepSettings_->setText(QStringLiteral("<small>%1</small>").arg(where));
  const auto notice = notices_.value(key(l.id, step_ + 1));
  if (notice.first.isEmpty()) {
    notice_->setText(tr("<b>What to notice</b> appears here once the step has run."));
  } else {
    notice_->setText(tr("<b>What to notice:</b> %1")
                         .arg(notice.second ? QStringLiteral("<span style='color:#c0392b'>%1</span>")
                                                  .arg(notice.first.toHtmlEscaped())
                                            : notice.first.toHtmlEscaped()));
  }
  updateButtons();
}

void LessonsPanel::updateButtons() {
  const bool any = lesson_ >= 0;
  previous_->setEnabled(any && (step_ > 0 || lesson_ > 0));
  next_->setEnabled(any && (step_ + 1 < lessons_[lesson_].steps.size() || lesson_ + 1 < lessons_.size()));
  const auto state = window_->engine()->state();
  run_->setEnabled(any && !running_ && !window_->engine()->isBusy() &&
                   state != EngineController::State::NoModel);
  run_->setText(running_ ? tr("Running…") : tr("Run this step"));
}

void LessonsPanel::loadSettings(QSettings& s) {
  s.beginGroup(QStringLiteral("lessons"));
  const QStringList ids = lessonIds();
  QStringList allSteps;
  for (const Lesson& l : lessons_)
    for (int i = 1; i <= l.steps.size(); ++i) allSteps << key(l.id, i);
  if (const auto done = settingChoiceList(s, QStringLiteral("done"), allSteps))
    done_ = QSet<QString>(done->begin(), done->end());
  if (const auto id = settingChoice(s, QStringLiteral("lesson"), ids)) {
    const int index = static_cast<int>(ids.indexOf(*id));
    int step = 1;
    if (const auto n = settingInteger(s, QStringLiteral("step"), 1, lessons_[index].steps.size()))
      step = static_cast<int>(*n);
    showLessonAt(index, step);
  } else if (s.contains(QStringLiteral("step"))) {
    // A step without its lesson is checked against the first lesson.
    settingInteger(s, QStringLiteral("step"), 1, lessons_.isEmpty() ? 1 : lessons_.front().steps.size());
  }
  s.endGroup();
  refreshList();
  refresh();
}

void LessonsPanel::saveSettings(QSettings& s) const {
  s.beginGroup(QStringLiteral("lessons"));
  if (lesson_ >= 0) {
    s.setValue(QStringLiteral("lesson"), currentLessonId());
    s.setValue(QStringLiteral("step"), currentStep());
  }
  s.setValue(QStringLiteral("done"), doneSteps());
  s.endGroup();
}

}  // namespace servelab::ui
