#pragma once
// The adapter list of the Multi-LoRA tab: PEFT folders and seeded random adapters, each described
// by the engine for the loaded model (rank, α, modules, parameters). The sweep and serving use it.
#include <QGroupBox>
#include <QMap>
#include <QSettings>
#include <QVector>
#include <optional>

#include "engine_types.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace servelab::ui {

class EngineController;

class AdapterList : public QGroupBox {
  Q_OBJECT
 public:
  AdapterList(EngineController* engine, QWidget* parent = nullptr);

  // Adapters join once the engine has described them (a PEFT folder that cannot be read is refused
  // with the engine's message and the list stays as it was). Without a model they join at once
  // and are described once one is loaded.
  void loadPeftFolder(const QString& dir);
  void addRandomAdapters(int rank, double alpha, int count);
  void removeAdapter(int row);
  void clear();
  int count() const { return static_cast<int>(entries_.size()); }
  QVector<servelab::AdapterSource> sources() const;
  // The description of row's adapter (empty while it is being described or when it failed).
  std::optional<servelab::AdapterInfo> info(int row) const;
  int pending() const { return static_cast<int>(pending_.size()); }
  // Adapters asked for and not yet described (a run waits for them; described again for a new
  // model, listed ones do not hold a run up: the run needs their sources only).
  int joining() const;
  QStringList names() const;  // listed and joining, in order
  QString error() const;      // the error area (empty when hidden)

  // What the experiment makes when the list is empty, for the hint under the list.
  void setFallback(int count, int rank);
  // The list follows the model: every adapter is described again for a new one. On the built-in
  // model, while the user has not chosen adapters, the list holds the built-in adapters
  // (lora/builtin_adapters.h) under the course's ids; on another model it drops them again.
  void setModel(const ModelSummary& model);
  // Whether the user has chosen the list (loaded, made, removed or cleared adapters, or settings
  // that name some): the built-in defaults then stay out.
  bool chosen() const { return chosen_; }
  // While a run uses the list, it cannot be edited.
  void setEditable(bool editable);
  // The "adapters" array of the tab's settings group.
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 Q_SIGNALS:
  // The list changed, or an adapter was refused (error() says why).
  void changed();

 private:
  struct Entry {
    int id = 0;
    servelab::AdapterSource source;
    std::optional<servelab::AdapterInfo> info;
    QString error;           // it no longer fits the loaded model
    bool isDefault = false;  // a built-in adapter the list added itself
  };
  struct Pending {
    bool refresh = false;  // an entry described again for a new model (id), else a new adapter
    int id = 0;
    servelab::AdapterSource source;
  };

  void requestDescription(const servelab::AdapterSource& source, bool refresh, int id);
  void onDescribed(quint64 ticket, const servelab::AdapterInfo& info, const QString& error);
  void describeAll();
  void followDefaults();  // the built-in adapters in or out, per the model and chosen_
  void fill();
  void showError(const QString& message);
  QString uniqueName(const QString& base) const;
  quint64 nextSeed() const;

  EngineController* engine_;
  QTableWidget* table_;
  QLabel* hint_;
  QLabel* error_;
  QPushButton* loadPeft_;
  QPushButton* makeRandom_;
  QPushButton* remove_;

  ModelSummary model_;
  QVector<Entry> entries_;
  QMap<quint64, Pending> pending_;
  quint64 lastTicket_ = 0;
  int nextEntryId_ = 1;
  int fallbackCount_ = 32, fallbackRank_ = 8;
  bool editable_ = true;
  bool chosen_ = false;
};

}  // namespace servelab::ui
