#include "models_dialog.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QInputDialog>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>
#include <atomic>
#include <exception>
#include <memory>

namespace servelab::ui {

namespace {

const QString kFoldersKey = QStringLiteral("models/folders");

enum Column { Name, Source, Architecture, Format, Quantization, Size, Loads, ColumnCount };

QString q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

// What a scan hands back to the GUI thread, and what the two share while it runs: how many models
// it has judged (the dialog reads it on a timer) and whether to stop (set when the dialog goes).
struct ScanResult {
  std::vector<servelab::CatalogEntry> entries;
  QString error;
  std::atomic<size_t> found{0};
  std::atomic<bool> cancel{false};
};

ModelsDialog::ModelsDialog(QSettings& settings, QWidget* parent) : QDialog(parent), settings_(settings) {
  setObjectName(QStringLiteral("modelsDialog"));
  setWindowTitle(tr("Models on this computer"));
  folders_ = settings_.value(kFoldersKey).toStringList();

  auto* intro = new QLabel(
      tr("Models in the Hugging Face cache, LM Studio, Ollama and the folders you add. Whether one "
         "loads is decided from its files' headers, without reading the weights."),
      this);
  intro->setWordWrap(true);

  table_ = new QTableWidget(0, ColumnCount, this);
  table_->setObjectName(QStringLiteral("modelsTable"));
  table_->setHorizontalHeaderLabels({tr("Name"), tr("Source"), tr("Architecture"), tr("Format"),
                                     tr("Quantization"), tr("Size"), tr("Loads")});
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->setWordWrap(false);
  table_->horizontalHeader()->setStretchLastSection(true);
  connect(table_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) { openRow(row); });
  connect(table_, &QTableWidget::itemSelectionChanged, this, &ModelsDialog::updateSelection);

  details_ = new QLabel(this);
  details_->setObjectName(QStringLiteral("modelDetails"));
  details_->setWordWrap(true);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("modelsStatus"));
  status_->setWordWrap(true);
  // Busy while a scan runs (its length is unknown: it walks the disk), with the count found so far
  // in the status line, refreshed a few times a second.
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("modelsProgress"));
  progress_->setRange(0, 0);
  progress_->setTextVisible(false);
  progress_->setMaximumHeight(8);
  progress_->hide();
  ticker_ = new QTimer(this);
  ticker_->setInterval(250);
  connect(ticker_, &QTimer::timeout, this, [this] {
    if (!current_) return;
    const size_t n = current_->found.load(std::memory_order_relaxed);
    status_->setText(n == 1 ? tr("Searching… 1 model so far") : tr("Searching… %1 models so far").arg(n));
  });

  auto* buttons = new QDialogButtonBox(this);
  auto* add = buttons->addButton(tr("Add folder…"), QDialogButtonBox::ActionRole);
  add->setObjectName(QStringLiteral("addFolderButton"));
  add->setToolTip(tr("Search a folder of yours for model folders and .gguf files (remembered)"));
  connect(add, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Add a folder of models"), QDir::homePath());
    if (!dir.isEmpty()) addFolder(dir);
  });
  remove_ = buttons->addButton(tr("Remove folder…"), QDialogButtonBox::ActionRole);
  remove_->setObjectName(QStringLiteral("removeFolderButton"));
  remove_->setToolTip(tr("Stop searching one of the folders you added"));
  connect(remove_, &QPushButton::clicked, this, [this] {
    bool ok = false;
    const QString dir =
        QInputDialog::getItem(this, tr("Remove a folder"), tr("Stop searching:"), folders_, 0, false, &ok);
    if (ok && !dir.isEmpty()) removeFolder(dir);
  });
  remove_->setEnabled(!folders_.isEmpty());
  refresh_ = buttons->addButton(tr("Refresh"), QDialogButtonBox::ActionRole);
  refresh_->setObjectName(QStringLiteral("refreshButton"));
  connect(refresh_, &QPushButton::clicked, this, &ModelsDialog::refresh);
  open_ = buttons->addButton(tr("Open"), QDialogButtonBox::AcceptRole);
  open_->setObjectName(QStringLiteral("openModelButton"));
  connect(open_, &QPushButton::clicked, this, [this] { openRow(table_->currentRow()); });
  buttons->addButton(QDialogButtonBox::Close);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(intro);
  layout->addWidget(table_, 1);
  layout->addWidget(details_);
  layout->addWidget(progress_);
  layout->addWidget(status_);
  layout->addWidget(buttons);
  resize(1200, 560);
  startScan();
}

ModelsDialog::~ModelsDialog() {
  // A scan under way is told to stop (at its next folder or model) and deletes itself when it
  // has; nothing of this dialog is left for it.
  if (current_) current_->cancel.store(true);
  if (scan_) disconnect(scan_, nullptr, this, nullptr);
}

QString ModelsDialog::statusText() const { return status_->text(); }

bool ModelsDialog::progressShown() const { return !progress_->isHidden(); }

QString ModelsDialog::detailsText() const { return details_->text(); }

void ModelsDialog::refresh() {
  if (scan_)
    rescan_ = true;
  else
    startScan();
}

void ModelsDialog::addFolder(const QString& folder) {
  const QString dir = QFileInfo(folder).absoluteFilePath();
  if (!folders_.contains(dir)) {
    folders_.append(dir);
    settings_.setValue(kFoldersKey, folders_);
    remove_->setEnabled(true);
  }
  refresh();
}

void ModelsDialog::removeFolder(const QString& folder) {
  if (folders_.removeAll(folder) == 0) return;
  settings_.setValue(kFoldersKey, folders_);
  remove_->setEnabled(!folders_.isEmpty());
  refresh();
}

void ModelsDialog::openRow(int row) {
  if (row < 0 || row >= table_->rowCount()) return;
  const auto index = table_->item(row, Name)->data(Qt::UserRole).toULongLong();
  const servelab::CatalogEntry& e = entries_.at(index);
  if (!e.loadable) {
    status_->setText(tr("%1 does not load: %2").arg(q(e.name), q(e.why_not)));
    return;
  }
  Q_EMIT openRequested(q(e.path));
  accept();
}

void ModelsDialog::startScan() {
  rescan_ = false;
  servelab::CatalogRoots roots = servelab::default_catalog_roots();
  // A remembered folder that is gone (an unplugged disk) is named, not an error for the rest.
  QStringList gone;
  for (const QString& f : folders_) {
    if (QFileInfo(f).isDir())
      roots.folders.push_back(f.toStdString());
    else
      gone << QDir::toNativeSeparators(f);
  }
  status_->setText(tr("Searching…"));
  refresh_->setEnabled(false);
  auto result = std::make_shared<ScanResult>();
  current_ = result;
  progress_->show();
  ticker_->start();
  scan_ = QThread::create([roots, result] {
    servelab::ScanControl control;
    control.progress = [&result](size_t found, const std::string&) { result->found.store(found); };
    control.cancel = &result->cancel;
    try {
      result->entries = servelab::scan_models(roots, control);
    } catch (const servelab::ScanCancelled&) {
      // The dialog is gone: nobody reads the result.
    } catch (const std::exception& e) {
      result->error = QString::fromUtf8(e.what());
    }
  });
  scan_->setObjectName(QStringLiteral("modelsScan"));
  connect(scan_, &QThread::finished, scan_, &QObject::deleteLater);
  connect(scan_, &QThread::finished, this, [this, result, gone] {
    scan_ = nullptr;
    current_.reset();
    ticker_->stop();
    progress_->hide();
    refresh_->setEnabled(true);
    entries_ = std::move(result->entries);
    showEntries();
    size_t loadable = 0;
    for (const servelab::CatalogEntry& e : entries_) loadable += e.loadable ? 1 : 0;
    const int found = static_cast<int>(entries_.size());
    QString text = !result->error.isEmpty() ? result->error
                   : found == 1             ? tr("1 model found")
                                            : tr("%1 models found").arg(found);
    if (result->error.isEmpty() && found > 0)
      text += loadable == 1 ? tr(", 1 loads in ServeLab.") : tr(", %1 load in ServeLab.").arg(loadable);
    else if (result->error.isEmpty())
      text += QLatin1Char('.');
    if (!gone.isEmpty()) text += QLatin1Char(' ') + tr("Not found: %1.").arg(gone.join(QStringLiteral(", ")));
    if (!folders_.isEmpty())
      text += QLatin1Char(' ') +
              tr("Your folders: %1").arg(QDir::toNativeSeparators(folders_.join(QStringLiteral(", "))));
    status_->setText(text);
    Q_EMIT scanFinished();
    if (rescan_) startScan();
  });
  scan_->start();
}

void ModelsDialog::showEntries() {
  table_->setRowCount(0);
  table_->setRowCount(static_cast<int>(entries_.size()));
  const QColor dim = palette().color(QPalette::Disabled, QPalette::Text);
  int first_loadable = -1;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const servelab::CatalogEntry& e = entries_[i];
    const int row = static_cast<int>(i);
    // The model's own path is in the tooltip and under the table: in the cell it would hide the reason.
    QString reason = q(e.why_not);
    if (!e.path.empty()) reason.replace(q(e.path), QStringLiteral("…"));
    const QString cells[ColumnCount] = {q(e.name),
                                        q(servelab::model_source_name(e.source)),
                                        q(e.architecture),
                                        q(e.format),
                                        q(e.quantization),
                                        q(servelab::human_size(e.size_bytes)),
                                        e.loadable ? tr("yes") : tr("no: %1").arg(reason)};
    const QString tip =
        QDir::toNativeSeparators(q(e.path)) + (e.loadable ? QString() : QStringLiteral("\n") + q(e.why_not));
    for (int c = 0; c < ColumnCount; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(tip);
      if (!e.loadable) item->setForeground(dim);
      if (c == Size) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table_->setItem(row, c, item);
    }
    table_->item(row, Name)->setData(Qt::UserRole, static_cast<qulonglong>(i));
    if (e.loadable && first_loadable < 0) first_loadable = row;
  }
  // The reasons can be long: the last column takes what is left, the tooltip has the rest.
  for (int c = 0; c < Loads; ++c) table_->resizeColumnToContents(c);
  // A long file name gives way too (its tooltip and the line under the table have it whole).
  const int name_cap = table_->viewport()->width() * 2 / 5;
  if (table_->columnWidth(Name) > name_cap) table_->setColumnWidth(Name, name_cap);
  if (!entries_.empty()) table_->selectRow(first_loadable >= 0 ? first_loadable : 0);
  updateSelection();
}

const servelab::CatalogEntry* ModelsDialog::selected() const {
  const int row = table_->currentRow();
  if (row < 0 || row >= table_->rowCount() || !table_->item(row, Name)) return nullptr;
  const auto index = table_->item(row, Name)->data(Qt::UserRole).toULongLong();
  return index < entries_.size() ? &entries_[index] : nullptr;
}

void ModelsDialog::updateSelection() {
  const servelab::CatalogEntry* e = selected();
  open_->setEnabled(e && e->loadable);
  if (!e)
    details_->clear();
  else if (e->loadable)
    details_->setText(QDir::toNativeSeparators(q(e->path)));
  else
    details_->setText(tr("%1\nDoes not load: %2").arg(QDir::toNativeSeparators(q(e->path)), q(e->why_not)));
}

}  // namespace servelab::ui
