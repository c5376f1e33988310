#pragma once
// Small widgets and factories the tabs share: spin boxes, result tables and their cells, the run's
// progress bar, and rows of labelled controls.
#include <QDoubleSpinBox>
#include <QProgressBar>
#include <QSettings>
#include <QSpinBox>
#include <QString>
#include <QStringList>
#include <QTableWidget>
#include <functional>
#include <initializer_list>
#include <optional>
#include <utility>

class QAbstractButton;
class QComboBox;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QScrollArea;

namespace servelab::ui {

class EngineJob;

// A spin box with an object name (tests and settings find it by name), range, value and suffix.
QSpinBox* makeSpin(QWidget* parent, const QString& name, int lo, int hi, int value,
                   const QString& suffix = QString());

// Settings values a tab could not take: "group/key = value is not a number" or "... is outside
// lo..hi". The control keeps its value (the default); the main window reports every one (a warning
// line, or the scripted mode's failure) instead of clamping or ignoring it silently.
QStringList& settingsIssues();
// box = settings[key] when the key is there, a number and within the box's range; else an issue.
void loadSpin(QSettings& settings, const QString& key, QSpinBox* box);
void loadSpin(QSettings& settings, const QString& key, QDoubleSpinBox* box);

// The typed readers below return nothing when the key is absent, and nothing plus an issue when
// its value is not what the key takes: the caller keeps its default either way.
// Text: anything QVariant turns into a string, or a list (INI splits an unquoted "a, b" at the
// comma: joined again with ", "). "@Invalid()" (an empty list) is "". What has no text (@Size,
// @Rect, @Point...) would read as "" and is an issue.
std::optional<QString> settingString(const QSettings& settings, const QString& key);
// true/false (what QSettings writes) or 1/0, in any case; QVariant::toBool would read "banana" as true.
std::optional<bool> settingBool(const QSettings& settings, const QString& key);
// One of choices, exactly.
std::optional<QString> settingChoice(const QSettings& settings, const QString& key,
                                     const QStringList& choices);
// A comma-separated list whose every item is one of choices (an empty list is allowed).
std::optional<QStringList> settingChoiceList(const QSettings& settings, const QString& key,
                                             const QStringList& choices);
// A whole number in lo..hi.
std::optional<qint64> settingInteger(const QSettings& settings, const QString& key, qint64 lo, qint64 hi);
// Records an issue for key: "group/key = "value" <problem>".
void reportSetting(const QSettings& settings, const QString& key, const QString& value,
                   const QString& problem);
// edit's text = settings[key] when it is text that parses (parses(&error) says, after the text is
// set); else the text before, and an issue naming the key, `what` it is not and the error.
void loadParsedText(QSettings& settings, const QString& key, QLineEdit* edit, const QString& what,
                    const std::function<bool(QString*)>& parses);
// box checked = settings[key] when it is a bool (settingBool).
void loadCheck(QSettings& settings, const QString& key, QAbstractButton* box);
// A combo box's item data as strings: the values its settings key may hold.
QStringList comboData(const QComboBox* box);

// A read-only table of whole rows: no row numbers, no wrapping, columns sized to their contents
// with the last one stretched.
QTableWidget* makeTable(QWidget* parent, const QString& name, const QStringList& headers);
// The same with rows one line of text high.
QTableWidget* makeCompactTable(QWidget* parent, const QString& name, const QStringList& headers);
// A table cell, numbers right-aligned.
QTableWidgetItem* tableCell(const QString& text, bool right = true);

// A tab's left-hand column: the widgets stacked top-down (a stretch below them) in a frameless
// scroll area that scrolls vertically only, between minWidth and maxWidth wide.
QScrollArea* makeSidePanel(QWidget* parent, std::initializer_list<QWidget*> widgets, int minWidth,
                           int maxWidth);

// Widgets in a grid, row by row, `columns` to a row, without margins (a tab's charts).
QWidget* makeGrid(QWidget* parent, std::initializer_list<QWidget*> widgets, int columns = 2);

// Label, control, label, control, ... in one row with a little space between the pairs.
QHBoxLayout* makeControlRow(QWidget* parent, std::initializer_list<std::pair<QString, QWidget*>> pairs);

// A run that ended early, on its progress bar and summary: "stopped" with stoppedText when it was
// cancelled, else "failed" with the kind and message.
void showRunFailure(QProgressBar* progress, QLabel* summary, const QString& kind, const QString& message,
                    const QString& stoppedText);

// The progress bar of a tab's run: "idle", "starting", the job's stage and percentage while it
// runs, "done", or "stopped"/"failed". Runs from 0 to 1000.
class RunProgressBar : public QProgressBar {
  Q_OBJECT
 public:
  explicit RunProgressBar(QWidget* parent, const QString& name = QString());
  // A run starts: 0, "starting".
  void start();
  // Shows job's progress as it reports it.
  void follow(EngineJob* job);
  // A fraction of the run with a caption ("%p%" is the percentage).
  void showFraction(double fraction, const QString& format);
  void finish();
};

}  // namespace servelab::ui
