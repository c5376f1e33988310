#pragma once
// The Lessons panel (a dock of the main window): the lessons in order, the chosen one's narrative,
// and its steps one at a time. A step's Run switches to the step's tab, loads the step's settings
// into it (applyStepSettings), runs it (or the step's preset) and, when the run ends, fills the
// "what to notice" line from the run's own result values (ExperimentTab::resultValues), or says
// that the run was stopped or failed. Where the reader is and which steps ran to the end persist
// in QSettings (group "lessons").
#include <QMap>
#include <QSet>
#include <QSettings>
#include <QWidget>
#include <optional>

#include "lessons/lesson.h"

class QLabel;
class QListWidget;
class QPushButton;
class QTextBrowser;
class QGroupBox;

namespace servelab::ui {

class ExperimentTab;
class MainWindow;

class LessonsPanel : public QWidget {
  Q_OBJECT
 public:
  LessonsPanel(MainWindow* window, QList<Lesson> lessons, QWidget* parent = nullptr);

  const QList<Lesson>& lessons() const { return lessons_; }
  QStringList lessonIds() const;
  // The lesson shown (index into lessons(), -1 when there are none) and its step (1-based).
  int currentLesson() const { return lesson_; }
  QString currentLessonId() const;
  int currentStep() const { return step_ + 1; }
  // Shows a lesson at a step (1-based); false when there is no such lesson or step.
  bool showLesson(const QString& id, int step = 1);
  void showLessonAt(int index, int step = 1);
  // Previous / next step, crossing into the neighbouring lesson at either end.
  void previousStep();
  void nextStep();

  // Runs the current step; false (noticeText() says why) when it cannot start.
  bool runStep();
  bool isRunning() const { return running_.has_value(); }
  // The "what to notice" line of the current step (plain text; empty before it ran).
  QString noticeText() const;
  // The step's notice as last filled (lesson id, 1-based step), empty when it never ran.
  QString noticeFor(const QString& lessonId, int step) const;
  // Steps that ran to the end, as "lesson-id:step".
  QStringList doneSteps() const;
  bool isDone(const QString& lessonId, int step) const;
  QString progressText() const;

  // Settings group "lessons": lesson (an id), step (1-based), done ("id:step" items). A value that is
  // not one of the lessons' is reported through settingsIssues() and ignored.
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 Q_SIGNALS:
  // The step started by runStep() has ended; the notice is filled by then.
  void stepFinished(bool ok, const QString& message);

 private:
  static QString key(const QString& lessonId, int step) {
    return lessonId + QLatin1Char(':') + QString::number(step);
  }
  void refresh();
  void refreshList();
  void updateButtons();
  void onRunFinished(bool ok, const QString& message);
  void setNotice(const QString& lessonId, int step, const QString& text, bool failed);

  MainWindow* window_;
  QList<Lesson> lessons_;
  int lesson_ = -1;
  int step_ = 0;
  int shownNarrative_ = -1;  // the lesson whose narrative is shown

  QListWidget* list_;
  QTextBrowser* narrative_;
  QGroupBox* stepBox_;
  QLabel* stepText_;
  QLabel* stepSettings_;
  QPushButton* previous_;
  QPushButton* run_;
  QPushButton* next_;
  QLabel* notice_;
  QLabel* progress_;

  struct Running {
    QString lesson;
    int step = 0;
    ExperimentTab* tab = nullptr;
    QString failureKind;  // the engine job's, when one failed ("cancelled" for Stop)
  };
  std::optional<Running> running_;
  QString lastRejection_;
  QMap<QString, QPair<QString, bool>> notices_;  // "id:step" -> text, failed
  QSet<QString> done_;
};

}  // namespace servelab::ui
