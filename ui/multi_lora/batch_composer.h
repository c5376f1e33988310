#pragma once
// The batch composer of the Multi-LoRA tab: the workload (GPT-2 or the course's toy model), which
// adapter each row of a batch uses, the batch sizes and strategies to time, and the text run after
// the timing. Its params() are the sweep's parameters; serving reads its prompt and fallback.
#include <QSettings>
#include <QWidget>

#include "engine_types.h"

class QCheckBox;
class QComboBox;
class QLineEdit;
class QSpinBox;
class QTableWidget;

namespace servelab::ui {

class AdapterList;

class BatchComposer : public QWidget {
  Q_OBJECT
 public:
  // adapters: the list whose adapters the rows can name.
  BatchComposer(const AdapterList* adapters, QWidget* parent = nullptr);

  void setWorkload(const QString& workload);      // gpt2, toy
  void setAssignment(const QString& assignment);  // distinct, shared, mixed, rows
  void setSharedAdapters(int n);
  void setRowAdapters(const QStringList& names);  // for "rows": an adapter name or "" per row
  QStringList rowAdapters() const;
  void setBatchSizes(const QString& sizes);  // "1,2,4"
  QVector<qint64> batchSizes(QString* error = nullptr) const;
  void setStrategies(const QStringList& strategies);
  QStringList strategies() const;
  void setRandomAdapters(int count, int rank);  // what the experiment makes when the list is empty
  int randomCount() const;
  int randomRank() const;
  void setContext(int tokens);
  void setDecodeSteps(int steps);
  void setRepeats(int repeats);
  void setToySamples(int samples);
  void setPrompt(const QString& prompt);
  QString prompt() const;
  void setNewTokens(int n);
  servelab::MultiLoraParams params() const;

  void setModel(const ModelSummary& model);
  // The row pickers follow the adapter list.
  void rebuildRowCombos();
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 Q_SIGNALS:
  // The count or rank of the adapters made when the list is empty changed.
  void fallbackChanged(int count, int rank);

 private:
  void updateVisibility();  // which controls the workload and assignment use
  void addRow(const QString& adapter);

  const AdapterList* adapters_;
  QComboBox* workload_;
  QComboBox* assignment_;
  QSpinBox* shared_;
  QWidget* sharedRow_;
  QWidget* rowsPanel_;
  QTableWidget* rowsTable_;
  QWidget* randomRow_;
  QSpinBox* randomCount_;
  QSpinBox* randomRank_;
  QLineEdit* sizes_;
  QCheckBox* loop_;
  QCheckBox* gathered_;
  QCheckBox* segmented_;
  QSpinBox* context_;
  QSpinBox* decodeSteps_;
  QSpinBox* repeats_;
  QSpinBox* toySamples_;
  QWidget* toyRow_;
  QWidget* gpt2Rows_;
  QLineEdit* prompt_;
  QSpinBox* newTokens_;
};

}  // namespace servelab::ui
