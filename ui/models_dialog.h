#pragma once
// File → Models on this computer: the models in the Hugging Face cache, LM Studio's and Ollama's
// folders and folders the user adds (remembered in the settings), found by core's catalog
// (model/model_catalog.h) on a thread of its own so that the window never waits on a disk, with
// whether each loads and why not. Double-click or Open loads a model as File → Open does.
#include <QDialog>
#include <QSettings>
#include <QStringList>
#include <memory>
#include <vector>

#include "model/model_catalog.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QTimer;
class QTableWidget;
class QThread;

namespace servelab::ui {

struct ScanResult;  // models_dialog.cpp

class ModelsDialog : public QDialog {
  Q_OBJECT
 public:
  // settings: where the added folders persist ("models/folders"). Starts a scan.
  explicit ModelsDialog(QSettings& settings, QWidget* parent = nullptr);
  ~ModelsDialog() override;

  // The models of the last scan, in the table's order.
  const std::vector<servelab::CatalogEntry>& entries() const { return entries_; }
  QStringList folders() const { return folders_; }
  bool scanning() const { return scan_ != nullptr; }
  // The busy bar shown while a scan runs.
  bool progressShown() const;
  QString statusText() const;
  // The selected model's path and, for one that does not load, the whole reason.
  QString detailsText() const;

 public Q_SLOTS:
  // Scans again (a scan under way is left to finish, and this one follows it).
  void refresh();
  // Remembers the folder and scans again.
  void addFolder(const QString& folder);
  // Forgets the folder and scans again.
  void removeFolder(const QString& folder);
  // Asks for the model of that table row to be opened (nothing for one that does not load).
  void openRow(int row);

 Q_SIGNALS:
  // A loadable model's path, for MainWindow::loadFolder.
  void openRequested(const QString& path);
  // A scan finished and the table shows it.
  void scanFinished();

 private:
  void startScan();
  void showEntries();
  void updateSelection();
  const servelab::CatalogEntry* selected() const;

  QSettings& settings_;
  QStringList folders_;
  std::vector<servelab::CatalogEntry> entries_;
  QThread* scan_ = nullptr;              // the scan under way, or nullptr
  std::shared_ptr<ScanResult> current_;  // what it shares with the dialog while it runs
  bool rescan_ = false;                  // refresh() during a scan: scan again once it ends
  QTableWidget* table_;
  QLabel* details_;
  QLabel* status_;
  QProgressBar* progress_;
  QTimer* ticker_;
  QPushButton* open_;
  QPushButton* refresh_;
  QPushButton* remove_;
};

}  // namespace servelab::ui
