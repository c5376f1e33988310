#include "session_log.h"

#include <QRegularExpression>
#include <QSettings>
#include <algorithm>

#include "engine_controller.h"

namespace servelab::ui {

namespace {

QString settingText(const QVariant& v) {
  if (v.metaType().id() == QMetaType::QStringList) return v.toStringList().join(QStringLiteral(", "));
  if (v.metaType().id() == QMetaType::QVariantList) {
    QStringList items;
    for (const QVariant& item : v.toList()) items << item.toString();
    return items.join(QStringLiteral(", "));
  }
  return v.toString();
}

}  // namespace

QString settingLabel(const QString& key) {
  static const QRegularExpression boundary(QStringLiteral("(?<=[a-z0-9])(?=[A-Z])|/"));
  static const QHash<QString, QString> acronyms = {
      {QStringLiteral("kv"), QStringLiteral("KV")},     {QStringLiteral("mb"), QStringLiteral("MB")},
      {QStringLiteral("api"), QStringLiteral("API")},   {QStringLiteral("url"), QStringLiteral("URL")},
      {QStringLiteral("eos"), QStringLiteral("EOS")},   {QStringLiteral("peft"), QStringLiteral("PEFT")},
      {QStringLiteral("lora"), QStringLiteral("LoRA")}, {QStringLiteral("ttft"), QStringLiteral("TTFT")}};
  QStringList words;
  for (const QString& part : key.split(boundary, Qt::SkipEmptyParts)) {
    const QString word = part.toLower();
    words << acronyms.value(word, word);
  }
  return words.join(QLatin1Char(' '));
}

SessionLog::SessionLog(EngineController* engine, QObject* parent)
    : QObject(parent), engine_(engine), started_(QDateTime::currentDateTime()) {}

SessionLog::~SessionLog() = default;

void SessionLog::watch(ExperimentTab* tab) {
  connect(tab, &ExperimentTab::runBegan, this, [this, tab] { begin(tab); });
  connect(tab, &ExperimentTab::runFinished, this,
          [this, tab](bool ok, const QString& message) { end(tab, ok, message); });
}

Facts SessionLog::settingsOf(const ExperimentTab& tab) const {
  // QSettings has no in-memory store: the tab saves to a scratch INI file of our own (never the
  // user's settings), read back before it is written again.
  if (!scratch_) scratch_ = std::make_unique<QTemporaryDir>();
  if (!scratch_->isValid()) return {};
  QSettings s(scratch_->filePath(QStringLiteral("settings.ini")), QSettings::IniFormat);
  s.clear();
  tab.saveSettings(s);
  Facts facts;
  for (const QString& key : s.allKeys()) {
    const qsizetype slash = key.indexOf(QLatin1Char('/'));
    const QString group = key.left(slash);
    facts << qMakePair(slash > 0 && group == tab.tabId() ? key.mid(slash + 1) : key,
                       settingText(s.value(key)));
  }
  s.clear();
  return facts;
}

void SessionLog::begin(ExperimentTab* tab) {
  if (open_.contains(tab)) return;  // the run's later stages (a chained sweep) are the same run
  RunRecord r;
  r.number = ++begun_;
  r.tabId = tab->tabId();
  r.title = tab->title();
  r.started = QDateTime::currentDateTime();
  r.model = engine_->model();
  r.settings = settingsOf(*tab);
  open_.insert(tab, r);
}

void SessionLog::end(ExperimentTab* tab, bool ok, const QString& message) {
  // A run that ended without beginning (a scripted Serving run whose server did not start) is
  // recorded with the settings it has now.
  if (!open_.contains(tab)) begin(tab);
  RunRecord r = open_.take(tab);
  r.finished = QDateTime::currentDateTime();
  r.ok = ok;
  r.message = message;
  const RunReport shown = tab->runReport();
  for (const QString& html : shown.html)
    if (!html.trimmed().isEmpty()) r.html << html;
  for (const ReportTable& table : shown.tables)
    if (!table.rows.isEmpty()) r.tables << table;
  for (ChartView* chart : shown.charts) r.charts << chart->snapshot();
  // In the order the runs began (a run of one tab can end after a later one of another began).
  const auto at = std::upper_bound(runs_.begin(), runs_.end(), r.number,
                                   [](int n, const RunRecord& other) { return n < other.number; });
  const auto index = static_cast<int>(at - runs_.begin());
  runs_.insert(index, r);
  Q_EMIT recorded(index);
}

}  // namespace servelab::ui
