#include "lessons/lesson.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QSettings>
#include <QTemporaryDir>
#include <cmath>

#include "experiment_tab.h"
#include "form_widgets.h"

namespace servelab::ui {

namespace {

const QStringList kLessonFields = {QStringLiteral("title"), QStringLiteral("narrative"),
                                   QStringLiteral("steps")};
const QStringList kStepFields = {QStringLiteral("title"),  QStringLiteral("text"),
                                 QStringLiteral("tab"),    QStringLiteral("settings"),
                                 QStringLiteral("preset"), QStringLiteral("notice")};

// A required or optional string field of o; false with *error when it is there but not a string,
// or required and missing or blank.
bool readText(const QJsonObject& o, const QString& field, bool required, QString* out, const QString& where,
              QString* error) {
  const QJsonValue v = o.value(field);
  if (v.isUndefined() && !required) return true;
  if (!v.isString() || (required && v.toString().trimmed().isEmpty())) {
    *error = v.isUndefined() ? QStringLiteral("%1: \"%2\" is missing").arg(where, field)
                             : QStringLiteral("%1: \"%2\" must be a non-empty string").arg(where, field);
    return false;
  }
  *out = v.toString();
  return true;
}

QString unknownField(const QJsonObject& o, const QStringList& known) {
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!known.contains(it.key())) return it.key();
  return {};
}

// A settings value as QSettings should write it: numbers as int where whole, lists as string lists.
QVariant settingVariant(const QJsonValue& v) {
  if (v.isBool()) return v.toBool();
  if (v.isDouble()) {
    const double d = v.toDouble();
    if (std::floor(d) == d && std::abs(d) < 9e15) return static_cast<qint64>(d);
    return d;
  }
  if (v.isArray()) {
    QStringList items;
    for (const QJsonValue& item : v.toArray())
      items << (item.isDouble() ? QString::number(item.toDouble()) : item.toString());
    return items;
  }
  return v.toString();
}

QString jsonValueText(const QJsonValue& v) {
  if (v.isBool()) return v.toBool() ? QStringLiteral("true") : QStringLiteral("false");
  if (v.isDouble()) return QString::number(v.toDouble());
  if (v.isArray()) return settingVariant(v).toStringList().join(QStringLiteral(", "));
  return QStringLiteral("\"%1\"").arg(v.toString());
}

struct Placeholder {
  QString name;
  int decimals = -1;
  qsizetype start = 0, length = 0;
};

std::optional<QList<Placeholder>> parseTemplate(const QString& text, QString* error) {
  static const QRegularExpression inner(QStringLiteral("^([a-z][a-z0-9_]*)(?::([0-6]))?$"));
  QList<Placeholder> out;
  for (qsizetype i = 0; i < text.size(); ++i) {
    if (text[i] == QLatin1Char('}')) {
      *error = QStringLiteral("a \"}\" without its \"{\" at character %1").arg(i + 1);
      return std::nullopt;
    }
    if (text[i] != QLatin1Char('{')) continue;
    const qsizetype end = text.indexOf(QLatin1Char('}'), i + 1);
    const qsizetype nextOpen = text.indexOf(QLatin1Char('{'), i + 1);
    if (end < 0 || (nextOpen >= 0 && nextOpen < end)) {
      *error = QStringLiteral("a \"{\" without its \"}\" at character %1").arg(i + 1);
      return std::nullopt;
    }
    const QString body = text.mid(i + 1, end - i - 1);
    const QRegularExpressionMatch m = inner.match(body);
    if (!m.hasMatch()) {
      *error = QStringLiteral("{%1} is not a placeholder (write {name} or {name:N}, N decimals from 0 to 6)")
                   .arg(body);
      return std::nullopt;
    }
    Placeholder p;
    p.name = m.captured(1);
    p.decimals = m.captured(2).isEmpty() ? -1 : m.captured(2).toInt();
    p.start = i;
    p.length = end - i + 1;
    out << p;
    i = end;
  }
  return out;
}

}  // namespace

QString lessonIdFromFileName(const QString& fileName) {
  static const QRegularExpression pattern(QStringLiteral("^[0-9]+-([a-z0-9]+(?:-[a-z0-9]+)*)\\.json$"));
  const QRegularExpressionMatch m = pattern.match(QFileInfo(fileName).fileName());
  return m.hasMatch() ? m.captured(1) : QString();
}

std::optional<Lesson> parseLesson(const QByteArray& json, const QString& fileName, QString* error) {
  const QString file = QFileInfo(fileName).fileName();
  Lesson lesson;
  lesson.file = fileName;
  lesson.id = lessonIdFromFileName(file);
  if (lesson.id.isEmpty()) {
    *error = QStringLiteral("%1: a lesson file is named NN-id.json (e.g. 01-kv-cache.json)").arg(file);
    return std::nullopt;
  }
  QJsonParseError parse;
  const QJsonDocument doc = QJsonDocument::fromJson(json, &parse);
  if (parse.error != QJsonParseError::NoError) {
    *error = QStringLiteral("%1: not JSON (%2 at byte %3)").arg(file, parse.errorString()).arg(parse.offset);
    return std::nullopt;
  }
  if (!doc.isObject()) {
    *error = QStringLiteral("%1: a lesson is a JSON object").arg(file);
    return std::nullopt;
  }
  const QJsonObject o = doc.object();
  if (const QString extra = unknownField(o, kLessonFields); !extra.isEmpty()) {
    *error = QStringLiteral("%1: unknown field \"%2\" (fields: %3)")
                 .arg(file, extra, kLessonFields.join(QStringLiteral(", ")));
    return std::nullopt;
  }
  if (!readText(o, QStringLiteral("title"), true, &lesson.title, file, error) ||
      !readText(o, QStringLiteral("narrative"), true, &lesson.narrative, file, error))
    return std::nullopt;
  const QJsonValue steps = o.value(QStringLiteral("steps"));
  if (!steps.isArray() || steps.toArray().isEmpty()) {
    *error = QStringLiteral("%1: \"steps\" must be a non-empty array").arg(file);
    return std::nullopt;
  }
  int n = 0;
  for (const QJsonValue& v : steps.toArray()) {
    const QString where = QStringLiteral("%1, step %2").arg(file).arg(++n);
    if (!v.isObject()) {
      *error = QStringLiteral("%1: a step is a JSON object").arg(where);
      return std::nullopt;
    }
    const QJsonObject so = v.toObject();
    if (const QString extra = unknownField(so, kStepFields); !extra.isEmpty()) {
      *error = QStringLiteral("%1: unknown field \"%2\" (fields: %3)")
                   .arg(where, extra, kStepFields.join(QStringLiteral(", ")));
      return std::nullopt;
    }
    LessonStep step;
    if (!readText(so, QStringLiteral("title"), true, &step.title, where, error) ||
        !readText(so, QStringLiteral("text"), true, &step.text, where, error) ||
        !readText(so, QStringLiteral("tab"), true, &step.tab, where, error) ||
        !readText(so, QStringLiteral("preset"), false, &step.preset, where, error) ||
        !readText(so, QStringLiteral("notice"), true, &step.notice, where, error))
      return std::nullopt;
    const QJsonValue settings = so.value(QStringLiteral("settings"));
    if (!settings.isUndefined()) {
      if (!settings.isObject()) {
        *error = QStringLiteral("%1: \"settings\" must be an object of settings keys and values").arg(where);
        return std::nullopt;
      }
      const QJsonObject values = settings.toObject();
      for (auto it = values.begin(); it != values.end(); ++it) {
        const QJsonValue value = it.value();
        bool scalar = value.isString() || value.isDouble() || value.isBool();
        if (value.isArray()) {
          scalar = true;
          for (const QJsonValue& item : value.toArray())
            scalar = scalar && (item.isString() || item.isDouble());
        }
        if (!scalar) {
          *error = QStringLiteral("%1: setting \"%2\" must be a string, number, true/false or a list of them")
                       .arg(where, it.key());
          return std::nullopt;
        }
        step.settings << qMakePair(it.key(), value);
      }
    }
    QString templateError;
    if (!noticePlaceholders(step.notice, &templateError)) {
      *error = QStringLiteral("%1: notice: %2").arg(where, templateError);
      return std::nullopt;
    }
    lesson.steps << step;
  }
  return lesson;
}

QList<Lesson> loadLessons(const QString& folder, QStringList* errors) {
  QList<Lesson> out;
  const QDir dir(folder);
  QStringList names = dir.entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name);
  for (const QString& name : names) {
    QFile f(dir.filePath(name));
    if (!f.open(QIODevice::ReadOnly)) {
      if (errors) *errors << QStringLiteral("%1: cannot be read").arg(name);
      continue;
    }
    QString error;
    if (auto lesson = parseLesson(f.read(1 << 20), dir.filePath(name), &error)) {
      bool duplicate = false;
      for (const Lesson& l : out) duplicate = duplicate || l.id == lesson->id;
      if (duplicate) {
        if (errors) *errors << QStringLiteral("%1: a second lesson with the id \"%2\"").arg(name, lesson->id);
        continue;
      }
      out << *lesson;
    } else if (errors) {
      *errors << error;
    }
  }
  return out;
}

QStringList checkLesson(const Lesson& lesson, const TabCatalog& tabs) {
  QStringList problems;
  int n = 0;
  for (const LessonStep& step : lesson.steps) {
    const QString where = QStringLiteral("lesson %1, step %2").arg(lesson.id).arg(++n);
    if (!tabs.contains(step.tab)) {
      problems << QStringLiteral("%1: no tab \"%2\" (tabs: %3)")
                      .arg(where, step.tab, tabs.keys().join(QStringLiteral(", ")));
      continue;
    }
    const TabFacts& facts = tabs[step.tab];
    for (const auto& [key, value] : step.settings)
      if (!facts.settingsKeys.contains(key))
        problems << QStringLiteral("%1: the %2 tab has no setting \"%3\" (its settings: %4)")
                        .arg(where, step.tab, key, facts.settingsKeys.join(QStringLiteral(", ")));
    if (!step.preset.isEmpty() && !facts.presets.contains(step.preset))
      problems << QStringLiteral("%1: the %2 tab has no preset \"%3\" (its presets: %4)")
                      .arg(where, step.tab, step.preset,
                           facts.presets.isEmpty() ? QStringLiteral("none")
                                                   : facts.presets.join(QStringLiteral(", ")));
    QString error;
    const auto names = noticePlaceholders(step.notice, &error);
    if (!names) {
      problems << QStringLiteral("%1: notice: %2").arg(where, error);
      continue;
    }
    for (const QString& name : *names)
      if (!facts.values.contains(name))
        problems << QStringLiteral(
                        "%1: the notice names {%2}, which is not a result value of the %3 tab (its "
                        "values: %4)")
                        .arg(where, name, step.tab,
                             facts.values.isEmpty() ? QStringLiteral("none")
                                                    : facts.values.join(QStringLiteral(", ")));
  }
  return problems;
}

QStringList tabSettingsKeys(const ExperimentTab& tab) {
  QTemporaryDir dir;
  QSettings s(dir.filePath(QStringLiteral("keys.ini")), QSettings::IniFormat);
  tab.saveSettings(s);
  s.beginGroup(tab.tabId());
  QStringList keys = s.allKeys();
  s.endGroup();
  return keys;
}

TabCatalog tabCatalog(const QList<ExperimentTab*>& tabs) {
  TabCatalog out;
  for (const ExperimentTab* t : tabs)
    out.insert(t->tabId(), TabFacts{tabSettingsKeys(*t), t->presetIds(), t->resultValueNames()});
  return out;
}

std::optional<QStringList> noticePlaceholders(const QString& notice, QString* error) {
  const auto parsed = parseTemplate(notice, error);
  if (!parsed) return std::nullopt;
  QStringList names;
  for (const Placeholder& p : *parsed) names << p.name;
  return names;
}

QString formatNoticeValue(double value, int decimals) {
  if (!std::isfinite(value)) return QStringLiteral("n/a");
  if (decimals < 0) {
    const double a = std::abs(value);
    decimals = a >= 100 ? 0 : a >= 10 ? 1 : 2;
  }
  return QString::number(value, 'f', decimals);
}

std::optional<QString> fillNotice(const QString& notice, const QMap<QString, double>& values,
                                  QString* error) {
  const auto parsed = parseTemplate(notice, error);
  if (!parsed) return std::nullopt;
  QString out;
  qsizetype at = 0;
  for (const Placeholder& p : *parsed) {
    if (!values.contains(p.name)) {
      *error = QStringLiteral("the run gave no value for {%1}").arg(p.name);
      return std::nullopt;
    }
    out += notice.mid(at, p.start - at);
    out += formatNoticeValue(values[p.name], p.decimals);
    at = p.start + p.length;
  }
  out += notice.mid(at);
  return out;
}

bool applyStepSettings(ExperimentTab& tab, const LessonStep& step, QString* error) {
  if (step.settings.isEmpty()) return true;
  const QStringList keys = tabSettingsKeys(tab);
  for (const auto& [key, value] : step.settings)
    if (!keys.contains(key)) {
      *error = QStringLiteral("the %1 tab has no setting \"%2\"").arg(tab.tabId(), key);
      return false;
    }
  QTemporaryDir dir;
  const QString path = dir.filePath(QStringLiteral("step.ini"));
  {
    QSettings out(path, QSettings::IniFormat);
    out.beginGroup(tab.tabId());
    for (const auto& [key, value] : step.settings) out.setValue(key, settingVariant(value));
    out.endGroup();
    out.sync();
  }
  // Read back as text, as a --settings file is: the tab checks each value as it would a user's.
  QSettings in(path, QSettings::IniFormat);
  QStringList& issues = settingsIssues();
  const qsizetype before = issues.size();
  tab.loadSettings(in);
  const QStringList mine = issues.mid(before);
  issues.resize(before);
  if (!mine.isEmpty()) {
    *error = QStringLiteral("the %1 tab cannot take the step's settings: %2")
                 .arg(tab.tabId(), mine.join(QStringLiteral("; ")));
    return false;
  }
  return true;
}

QString stepSettingsText(const LessonStep& step) {
  QStringList parts;
  for (const auto& [key, value] : step.settings)
    parts << QStringLiteral("%1 = %2").arg(key, jsonValueText(value));
  return parts.join(QStringLiteral(", "));
}

}  // namespace servelab::ui
