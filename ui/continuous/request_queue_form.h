#pragma once
// The request queue of the Continuous batching tab: the prompt, how many requests, which are long,
// prompt lengths, arrivals and the seed, and whether the course's merge/filter and paged KV (with
// its block size, budget and prefix caching) run too. Its params()
// are the experiment's.
#include <QSettings>
#include <QWidget>

#include "engine_types.h"

class QCheckBox;
class QDoubleSpinBox;
class QLineEdit;
class QSpinBox;

namespace servelab::ui {

class RequestQueueForm : public QWidget {
  Q_OBJECT
 public:
  explicit RequestQueueForm(QWidget* parent = nullptr);

  void setPrompt(const QString& prompt);
  void setRequests(int n);
  void setMaxBatch(int n);
  // Chunked prefill's tokens per step (0: off).
  void setTokenBudget(int tokens);
  void setLongEvery(int n);
  void setLongTokens(int n);
  void setShortTokens(int n);
  void setPromptTokens(int min, int max);  // 0, 0: the prompt as typed
  void setArrivalRate(double perSecond);   // 0: all requests at the start
  void setSeed(int seed);
  void setNaive(bool on);
  // Also paged KV: blocks of blockSize positions, budgetMb megabytes of them (0: slot KV's memory).
  void setPaged(bool on, int blockSize = 16, double budgetMb = 0, bool prefixCaching = true);
  // With a budget: the other methods get only the slots it holds (one budget for both memories).
  void setSlotsInBudget(bool on);
  // With prefix caching: paged KV also runs without it, side by side.
  void setPagedUncachedToo(bool on);
  servelab::SyncVsContinuousParams params() const;

  // Token counts up to the model's context.
  void setModel(const ModelSummary& model);
  // Keys of the tab's settings group.
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 private:
  void updatePromptLengthEnabled();
  void updatePagedEnabled();

  QLineEdit* prompt_;
  QSpinBox* requests_;
  QSpinBox* maxBatch_;
  QSpinBox* budget_;
  QSpinBox* longEvery_;
  QSpinBox* longTokens_;
  QSpinBox* shortTokens_;
  QCheckBox* randomPrompt_;
  QSpinBox* promptMin_;
  QSpinBox* promptMax_;
  QDoubleSpinBox* arrivalRate_;
  QSpinBox* seed_;
  QCheckBox* naive_;
  QCheckBox* paged_;
  QSpinBox* blockSize_;
  QDoubleSpinBox* budgetMb_;
  QCheckBox* prefixCaching_;
  QCheckBox* slotsInBudget_;
  QCheckBox* uncachedToo_;
};

}  // namespace servelab::ui
