#include "multi_lora/adapter_list.h"

#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "engine_controller.h"
#include "form_widgets.h"
#include "lora/builtin_adapters.h"
#include "multi_lora/lora_math_panel.h"
#include "text_format.h"
#include "util/limits.h"

namespace servelab::ui {

AdapterList::AdapterList(EngineController* engine, QWidget* parent)
    : QGroupBox(tr("Adapters"), parent), engine_(engine) {
  table_ = makeCompactTable(this, QStringLiteral("loraAdapterTable"),
                            {tr("name"), tr("source"), tr("r"), tr("α"), tr("α/r"), tr("matrices"),
                             tr("parameters"), tr("% of W"), tr("prompt format")});
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->horizontalHeaderItem(2)->setToolTip(tr("Rank r: the largest over the adapter's matrices"));
  table_->horizontalHeaderItem(3)->setToolTip(tr("α, the LoRA alpha"));
  table_->horizontalHeaderItem(4)->setToolTip(tr("The scale of the update: α / r (α / √r with rsLoRA)"));
  table_->horizontalHeaderItem(5)->setToolTip(tr("Weight matrices the adapter wraps (modules × layers)"));
  table_->horizontalHeaderItem(6)->setToolTip(tr("|A| + |B| over every wrapped matrix"));
  table_->horizontalHeaderItem(7)->setToolTip(
      tr("The adapter's parameters as a share of the base matrices it wraps (|A| + |B|) / |W|"));
  table_->horizontalHeaderItem(8)->setToolTip(
      tr("The prompt an adapter was trained on, its input where {input} stands (the built-in adapters: the "
         "course's lesson-7 templates); adapters without one continue the composer's prompt"));
  table_->setMinimumHeight(70);

  loadPeft_ = new QPushButton(tr("Load PEFT folder…"), this);
  loadPeft_->setObjectName(QStringLiteral("loraLoadPeft"));
  loadPeft_->setToolTip(
      tr("A folder with adapter_config.json and adapter_model.safetensors (Hugging Face PEFT)"));
  connect(loadPeft_, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Open a PEFT LoRA adapter folder"), QDir::homePath());
    if (!dir.isEmpty()) loadPeftFolder(dir);
  });
  makeRandom_ = new QPushButton(tr("Make random…"), this);
  makeRandom_->setObjectName(QStringLiteral("loraMakeRandom"));
  makeRandom_->setToolTip(tr("Adapters with seeded random A and B on every module, for timing"));
  connect(makeRandom_, &QPushButton::clicked, this, [this] {
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Make random adapters"));
    auto* rank = makeSpin(&dialog, QStringLiteral("randomRank"), 1, 256, 8);
    auto* alpha = new QDoubleSpinBox(&dialog);
    alpha->setRange(0.01, 4096);
    alpha->setValue(16);
    auto* count = makeSpin(&dialog, QStringLiteral("randomCount"), 1, 256, 4);
    auto* form = new QFormLayout(&dialog);
    form->addRow(tr("Rank r"), rank);
    form->addRow(tr("Alpha α"), alpha);
    form->addRow(tr("How many"), count);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() == QDialog::Accepted) addRandomAdapters(rank->value(), alpha->value(), count->value());
  });
  remove_ = new QPushButton(tr("Remove"), this);
  remove_->setObjectName(QStringLiteral("loraRemove"));
  remove_->setToolTip(tr("Remove the selected adapters from the list"));
  connect(remove_, &QPushButton::clicked, this, [this] {
    QList<int> rows;
    for (const QModelIndex& i : table_->selectionModel()->selectedRows()) rows << i.row();
    std::sort(rows.begin(), rows.end(), std::greater<int>());
    for (int r : rows) removeAdapter(r);
  });
  hint_ = new QLabel(this);
  hint_->setObjectName(QStringLiteral("loraAdapterHint"));
  hint_->setWordWrap(true);
  error_ = new QLabel(this);
  error_->setObjectName(QStringLiteral("loraAdapterError"));
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->setStyleSheet(QStringLiteral(
      "QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #e0a0a0; padding: 3px; }"));
  error_->hide();

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(loadPeft_);
  buttons->addWidget(makeRandom_);
  buttons->addWidget(remove_);
  buttons->addWidget(hint_, 1);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(6, 4, 6, 4);
  v->setSpacing(4);
  v->addWidget(table_, 1);
  v->addLayout(buttons);
  v->addWidget(error_);
  fill();
}

int AdapterList::joining() const {
  return static_cast<int>(
      std::count_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.refresh; }));
}

QStringList AdapterList::names() const {
  QStringList names;
  for (const Entry& e : entries_) names << QString::fromStdString(e.source.name);
  for (const Pending& p : pending_)
    if (!p.refresh) names << QString::fromStdString(p.source.name);
  return names;
}

QString AdapterList::uniqueName(const QString& base) const {
  const QStringList taken = names();
  if (!taken.contains(base)) return base;
  for (int i = 2;; ++i) {
    const QString name = QStringLiteral("%1-%2").arg(base).arg(i);
    if (!taken.contains(name)) return name;
  }
}

quint64 AdapterList::nextSeed() const {
  quint64 seed = 0;
  for (const Entry& e : entries_) seed = std::max<quint64>(seed, e.source.seed);
  for (const Pending& p : pending_) seed = std::max<quint64>(seed, p.source.seed);
  return seed + 1;
}

void AdapterList::requestDescription(const servelab::AdapterSource& source, bool refresh, int id) {
  const quint64 ticket = ++lastTicket_;
  const bool asked = engine_->ask(
      this, [source](const servelab::Engine& engine) { return servelab::describe_adapter(engine, source); },
      [this, ticket](const servelab::AdapterInfo& info, const QString& error) {
        onDescribed(ticket, info, error);
      });
  if (!asked) {
    // No model yet: the adapter joins now and is described once a model is loaded.
    if (!refresh) {
      entries_.append(Entry{nextEntryId_++, source, std::nullopt, QString(), false});
      fill();
      Q_EMIT changed();
    }
    return;
  }
  pending_.insert(ticket, Pending{refresh, id, source});
  fill();
}

void AdapterList::loadPeftFolder(const QString& dir) {
  chosen_ = true;
  servelab::AdapterSource s;
  s.peft_dir = QDir::cleanPath(QFileInfo(dir).absoluteFilePath()).toStdString();
  s.name =
      uniqueName(QFileInfo(dir).fileName().isEmpty() ? QStringLiteral("peft") : QFileInfo(dir).fileName())
          .toStdString();
  s.rank = 0;
  s.alpha = 0;
  s.modules.clear();
  requestDescription(s, false, 0);
}

void AdapterList::addRandomAdapters(int rank, double alpha, int count) {
  chosen_ = true;
  for (int k = 0; k < count; ++k) {
    servelab::AdapterSource s;
    s.rank = rank;
    s.alpha = alpha;
    s.seed = nextSeed();
    const QString base = QStringLiteral("rand-r%1-").arg(rank);
    QStringList taken = names();
    int n = 1;
    while (taken.contains(base + QString::number(n))) ++n;
    s.name = (base + QString::number(n)).toStdString();
    requestDescription(s, false, 0);
  }
}

void AdapterList::removeAdapter(int row) {
  if (row < 0 || row >= entries_.size()) return;
  chosen_ = true;
  entries_.removeAt(row);
  fill();
  Q_EMIT changed();
}

void AdapterList::clear() {
  chosen_ = true;
  entries_.clear();
  pending_.clear();
  fill();
  Q_EMIT changed();
}

QVector<servelab::AdapterSource> AdapterList::sources() const {
  QVector<servelab::AdapterSource> out;
  for (const Entry& e : entries_) out << e.source;
  return out;
}

std::optional<servelab::AdapterInfo> AdapterList::info(int row) const {
  if (row < 0 || row >= entries_.size()) return std::nullopt;
  return entries_[row].info;
}

QString AdapterList::error() const { return error_->isVisible() ? error_->text() : QString(); }

void AdapterList::showError(const QString& message) {
  error_->setText(message);
  error_->setVisible(!message.isEmpty());
}

void AdapterList::setFallback(int count, int rank) {
  fallbackCount_ = count;
  fallbackRank_ = rank;
  fill();
}

void AdapterList::setEditable(bool editable) {
  editable_ = editable;
  loadPeft_->setEnabled(editable);
  makeRandom_->setEnabled(editable);
  remove_->setEnabled(editable && !entries_.isEmpty());
}

void AdapterList::setModel(const ModelSummary& model) {
  const bool changed = model.name != model_.name || model.width != model_.width ||
                       model.folder != model_.folder || model.dtype != model_.dtype ||
                       model.device != model_.device;
  model_ = model;
  followDefaults();
  if (changed || std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return !e.info; }))
    describeAll();
  fill();
}

void AdapterList::followDefaults() {
  if (chosen_) return;
  const bool hasDefaults =
      std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.isDefault; });
  if (!model_.builtin) {
    if (!hasDefaults) return;
    entries_.erase(
        std::remove_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.isDefault; }),
        entries_.end());
    Q_EMIT changed();
    return;
  }
  if (hasDefaults || !entries_.isEmpty() || joining() > 0) return;
  // Joined at once, described with the rest by the caller (describeAll).
  for (const servelab::AdapterSource& a : servelab::builtin_adapter_sources())
    entries_.append(Entry{nextEntryId_++, a, std::nullopt, QString(), true});
  if (!entries_.isEmpty()) Q_EMIT changed();
}

void AdapterList::describeAll() {
  // Answers about the previous model no longer matter (adapters still joining stay pending).
  for (auto it = pending_.begin(); it != pending_.end();)
    it = it->refresh ? pending_.erase(it) : std::next(it);
  for (const Entry& e : entries_) requestDescription(e.source, true, e.id);
}

void AdapterList::onDescribed(quint64 ticket, const servelab::AdapterInfo& info, const QString& error) {
  const auto it = pending_.find(ticket);
  if (it == pending_.end()) return;  // about a model no longer loaded, or the list was cleared
  const Pending p = *it;
  pending_.erase(it);
  const QString name = QString::fromStdString(p.source.name);
  if (p.refresh) {
    for (Entry& e : entries_) {
      if (e.id != p.id) continue;
      e.info = error.isEmpty() ? std::optional<servelab::AdapterInfo>(info) : std::nullopt;
      e.error = error;
    }
    if (!error.isEmpty()) showError(tr("Adapter %1 does not fit the loaded model: %2").arg(name, error));
  } else if (error.isEmpty()) {
    entries_.append(Entry{nextEntryId_++, p.source, info, QString(), false});
    showError(QString());
  } else {
    showError(p.source.peft_dir.empty()
                  ? tr("Cannot make adapter %1: %2").arg(name, error)
                  : tr("Cannot load %1: %2")
                        .arg(QDir::toNativeSeparators(QString::fromStdString(p.source.peft_dir)), error));
  }
  fill();
  Q_EMIT changed();
}

void AdapterList::fill() {
  const int rows = static_cast<int>(entries_.size());
  table_->setRowCount(rows);
  const QColor bad(0xb0, 0x00, 0x20);
  for (int r = 0; r < rows; ++r) {
    const Entry& e = entries_[r];
    const servelab::AdapterSource& s = e.source;
    // A PEFT folder by its name (the whole path in the tooltip), a random adapter by its seed.
    const QString path = QDir::toNativeSeparators(QString::fromStdString(s.peft_dir));
    const servelab::BuiltinAdapter* builtin = servelab::builtin_adapter_of(s);
    QString source = s.peft_dir.empty() ? tr("random (seed %1)").arg(s.seed)
                     : builtin          ? tr("built-in · %1").arg(QString::fromStdString(builtin->job))
                                        : tr("peft …/%1").arg(QFileInfo(path).fileName());
    const QString sourceTip = s.peft_dir.empty() ? source : tr("PEFT folder %1").arg(path);
    const QString format =
        builtin ? tr("%1: %2").arg(QString::fromStdString(builtin->job),
                                   QString::fromStdString(builtin->prompt_template).simplified().right(48))
                : tr("the composer's prompt");
    QStringList cells;
    if (e.info) {
      const servelab::AdapterInfo& i = *e.info;
      if (s.peft_dir.empty() && !i.source.empty()) source = QString::fromStdString(i.source);
      cells = {QString::fromStdString(s.name),
               source,
               QString::number(i.rank),
               QString::number(i.alpha, 'g', 4),
               QString::number(i.scale, 'g', 4),
               QString::number(static_cast<qint64>(i.modules.size())),
               formatCount(i.parameters),
               i.base_parameters > 0
                   ? loraPercent(static_cast<double>(i.parameters) / static_cast<double>(i.base_parameters))
                   : QStringLiteral("—"),
               format};
    } else {
      const QString unknown = e.error.isEmpty() ? QStringLiteral("…") : QStringLiteral("—");
      cells = {QString::fromStdString(s.name),
               source,
               s.peft_dir.empty() ? QString::number(s.rank) : unknown,
               s.peft_dir.empty() ? QString::number(s.alpha, 'g', 4) : unknown,
               unknown,
               unknown,
               unknown,
               unknown,
               format};
    }
    for (int c = 0; c < cells.size(); ++c) {
      QTableWidgetItem* item = tableCell(cells[c], c >= 2 && c < 8);
      if (c == 1) item->setToolTip(sourceTip);
      if (c == 8 && builtin)
        item->setToolTip(tr("%1, trained on this prompt (the course's template; {input} is the input):\n\n%2")
                             .arg(QString::fromStdString(builtin->id),
                                  QString::fromStdString(builtin->prompt_template).trimmed()));
      if (c == 5 && e.info) {
        QStringList modules;
        for (const std::string& m : e.info->modules) modules << QString::fromStdString(m);
        item->setToolTip(modules.join(QStringLiteral(", ")));
      }
      if (c == 7 && e.info && model_.parameters > 0)
        item->setToolTip(tr("%1 of the whole model's %2 parameters")
                             .arg(loraPercent(static_cast<double>(e.info->parameters) /
                                              static_cast<double>(model_.parameters)),
                                  formatCount(model_.parameters)));
      if (!e.error.isEmpty()) {
        item->setForeground(bad);
        item->setToolTip(e.error);
      }
      table_->setItem(r, c, item);
    }
  }
  const int waiting = joining();
  QString hint;
  const bool defaults =
      !chosen_ && rows > 0 &&
      std::all_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.isDefault; });
  if (defaults)
    hint = tr("Built-in adapters: one base model, three jobs.");
  else if (rows == 0 && waiting == 0)
    hint = tr("The list is empty: the experiment makes %1 random adapters of rank %2 itself, and serving "
              "uses as many.")
               .arg(fallbackCount_)
               .arg(fallbackRank_);
  else
    hint = tr("%n adapter(s)", nullptr, rows) +
           (waiting > 0 ? tr(", %1 being loaded…").arg(waiting) : QString()) +
           tr(". The experiment and serving use this list.");
  hint_->setText(hint);
  remove_->setEnabled(editable_ && rows > 0);
}

void AdapterList::loadSettings(QSettings& s) {
  // The sources (described again once a model is loaded).
  const int n = s.beginReadArray(QStringLiteral("adapters"));
  if (n > 0) entries_.clear();
  if (n > 0) chosen_ = true;
  for (int i = 0; i < n; ++i) {
    s.setArrayIndex(i);
    servelab::AdapterSource a;
    a.name = settingString(s, QStringLiteral("name")).value_or(QString()).toStdString();
    a.peft_dir = settingString(s, QStringLiteral("peftDir")).value_or(QString()).toStdString();
    // A PEFT folder's rank and alpha are its own (saved as 0): only a random adapter's are read.
    const bool random = a.peft_dir.empty();
    a.rank = 8;
    if (random) a.rank = settingInteger(s, QStringLiteral("rank"), 1, servelab::limits::kMaxRank).value_or(8);
    a.alpha = 16.0;
    if (const auto alpha = random ? settingString(s, QStringLiteral("alpha")) : std::nullopt) {
      bool ok = false;
      const double v = alpha->toDouble(&ok);
      // The range of the add dialog's spin box.
      if (ok && std::isfinite(v) && v >= 0.01 && v <= 4096)
        a.alpha = v;
      else
        reportSetting(s, QStringLiteral("alpha"), *alpha,
                      QStringLiteral("is not a number from 0.01 to 4096"));
    }
    a.seed = static_cast<uint64_t>(i + 1);
    if (const auto seed = settingString(s, QStringLiteral("seed"))) {
      bool ok = false;
      const qulonglong v = seed->trimmed().toULongLong(&ok);
      if (ok)
        a.seed = v;
      else
        reportSetting(s, QStringLiteral("seed"), *seed, QStringLiteral("is not a whole number from 0"));
    }
    if (const auto modules = settingString(s, QStringLiteral("modules")))
      for (const QString& m : modules->split(QLatin1Char(','), Qt::SkipEmptyParts))
        a.modules.push_back(m.trimmed().toStdString());
    if (!a.peft_dir.empty()) {
      a.rank = 0;
      a.alpha = 0;
    }
    if (a.name.empty()) a.name = QStringLiteral("adapter-%1").arg(i + 1).toStdString();
    entries_.append(Entry{nextEntryId_++, a, std::nullopt, QString(), false});
  }
  s.endArray();
  if (const auto chosen = settingBool(s, QStringLiteral("adaptersChosen"))) chosen_ = chosen_ || *chosen;
  followDefaults();
  fill();
  Q_EMIT changed();
}

void AdapterList::saveSettings(QSettings& s) const {
  s.remove(QStringLiteral("adapters"));
  s.setValue(QStringLiteral("adaptersChosen"), chosen_);
  // The built-in defaults are the list's own: not saved, added again for the built-in model.
  const int saved = chosen_ ? static_cast<int>(entries_.size()) : 0;
  s.beginWriteArray(QStringLiteral("adapters"), saved);
  for (int i = 0; i < saved; ++i) {
    s.setArrayIndex(i);
    const servelab::AdapterSource& a = entries_[i].source;
    s.setValue(QStringLiteral("name"), QString::fromStdString(a.name));
    if (!a.peft_dir.empty()) {
      s.setValue(QStringLiteral("peftDir"), QString::fromStdString(a.peft_dir));
      continue;
    }
    s.setValue(QStringLiteral("rank"), static_cast<qint64>(a.rank));
    s.setValue(QStringLiteral("alpha"), a.alpha);
    s.setValue(QStringLiteral("seed"), static_cast<quint64>(a.seed));
    QStringList modules;
    for (const std::string& m : a.modules) modules << QString::fromStdString(m);
    s.setValue(QStringLiteral("modules"), modules);
  }
  s.endArray();
}

}  // namespace servelab::ui
