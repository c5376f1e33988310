#pragma once
// Lessons: short guided walks through the tabs, read from data files (resources/lessons/*.json, one
// lesson a file, compiled into the app's resources). A lesson is a narrative and steps; a step names
// a tab, the settings keys it sets there (the keys of the tab's saveSettings group, loaded into the
// tab exactly as a --settings file's are), optionally one of the tab's presets, and a "what to
// notice" template whose {placeholders} name the tab's result values (ExperimentTab::
// resultValueNames). This file holds the model, the parser, the checks against the tabs that
// exist, and the template filler; LessonsPanel shows and runs them.
//
// The file format (every text is plain text; a blank line starts a new paragraph):
//   {
//     "title": "Text generation and the KV cache",
//     "narrative": "Why decoding is memory-bound ...",
//     "steps": [
//       { "title": "...", "text": "what the step does and what to look at",
//         "tab": "kv-cache",
//         "settings": { "newTokens": 24, "repeats": 3 },   (keys of the tab's settings group)
//         "preset": "fit-in-budget",                       (optional: the tab's --preset id)
//         "notice": "Decode was {decode_speedup:1}x faster with the cache here." }
//     ]
//   }
// The file's name is NN-id.json: NN orders the lessons, id is what --lesson takes.
// {name} prints a value with 2 decimals under 10, 1 under 100 and none above; {name:N}, N decimals.
#include <QJsonValue>
#include <QList>
#include <QMap>
#include <QPair>
#include <QString>
#include <QStringList>
#include <optional>

namespace servelab::ui {

class ExperimentTab;

struct LessonStep {
  QString title;
  QString text;
  QString tab;
  QList<QPair<QString, QJsonValue>> settings;  // key and value, by key
  QString preset;                              // empty: the tab's Run button
  QString notice;                              // the "what to notice" template
};

struct Lesson {
  QString id;    // from the file name: "kv-cache" for 01-kv-cache.json
  QString file;  // where it was read from
  QString title;
  QString narrative;
  QList<LessonStep> steps;
};

// What a lesson may name on one tab: its settings keys, presets and result values.
struct TabFacts {
  QStringList settingsKeys;
  QStringList presets;
  QStringList values;
};
using TabCatalog = QMap<QString, TabFacts>;  // by tab id

// The lesson id of a file name ("01-kv-cache.json" -> "kv-cache"), or empty when the name is not
// NN-id.json with id in lowercase letters, digits and dashes.
QString lessonIdFromFileName(const QString& fileName);

// Parses one lesson file's text; nullopt with *error (one line naming the file and the problem)
// when it is not a lesson: bad JSON, a missing or mistyped field, an unknown field, no steps.
std::optional<Lesson> parseLesson(const QByteArray& json, const QString& fileName, QString* error);

// Every *.json file of folder (a resource folder such as ":/servelab/lessons" or a disk folder),
// parsed, in file name order. Files that do not parse are left out, each with a line in *errors.
QList<Lesson> loadLessons(const QString& folder, QStringList* errors);

// The problems of a lesson against the tabs: a tab that does not exist, a settings key or preset
// the tab does not have, a notice placeholder that is not one of the tab's values or is malformed.
// Each problem is one line naming the lesson, the step and the culprit, and listing what exists.
QStringList checkLesson(const Lesson& lesson, const TabCatalog& tabs);

// The facts of each tab (settings keys from what its saveSettings writes).
TabCatalog tabCatalog(const QList<ExperimentTab*>& tabs);
// The keys a tab's saveSettings writes into its group ("newTokens", "adapters/1/name", ...).
QStringList tabSettingsKeys(const ExperimentTab& tab);

// The placeholders a notice template names, in order; nullopt with *error when a brace is unmatched
// or a placeholder is not name or name:N (N from 0 to 6).
std::optional<QStringList> noticePlaceholders(const QString& notice, QString* error);
// The template with every placeholder replaced by its value; nullopt with *error naming the first
// placeholder values lacks (or the template's syntax error).
std::optional<QString> fillNotice(const QString& notice, const QMap<QString, double>& values, QString* error);
// How {name} prints a value: 2 decimals under 10, 1 under 100, none from 100 (by magnitude).
QString formatNoticeValue(double value, int decimals = -1);

// Loads the step's settings into the tab as a --settings file's keys would be (through an INI file,
// with the tab's own checks). False with *error when the step names a key the tab does not have or
// a value the tab cannot take (settingsIssues(), which is left as it was found).
bool applyStepSettings(ExperimentTab& tab, const LessonStep& step, QString* error);

// A step's settings in words for the panel: "newTokens = 24, repeats = 3".
QString stepSettingsText(const LessonStep& step);

}  // namespace servelab::ui
