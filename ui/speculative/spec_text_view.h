#pragma once
// The Speculative decoding tab's text: each verified step's proposals in place, the accepted ones
// highlighted, the rejected ones struck through, and the target's own token marked; tokens of steps
// without a proposal in plain text.
#include <QTextEdit>

#include "engine_types.h"

namespace servelab::ui {

class SpecTextView : public QTextEdit {
  Q_OBJECT
 public:
  explicit SpecTextView(QWidget* parent = nullptr);

  // Starts over with the prompt shown dimmed (empty: nothing).
  void reset(const QString& prompt);
  void addStep(const SpecStepInfo& step);
  // A legend of the four styles, as rich text for a label.
  static QString legendHtml(bool dark);

  // What has been shown since reset(), for tests and the summary.
  int stepsShown() const { return steps_; }
  int stepsWithProposals() const { return stepsWithProposals_; }
  qint64 proposedShown() const { return proposed_; }
  qint64 acceptedShown() const { return accepted_; }
  qint64 rejectedShown() const { return proposed_ - accepted_; }
  // The generated text as the steps gave it (rejected proposals left out).
  const QString& generatedText() const { return generated_; }

 private:
  bool dark() const;

  int steps_ = 0, stepsWithProposals_ = 0;
  qint64 proposed_ = 0, accepted_ = 0;
  QString generated_;
};

}  // namespace servelab::ui
