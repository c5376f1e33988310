#pragma once
// Help → About ServeLab: the version, the licence and the main dependencies' licences, and the
// machine the engine runs on (the CPU and the ISA our kernels dispatch to, as the engine reports
// them in its info; see docs/licenses.md for every dependency).
#include <QDialog>

#include "engine_types.h"

class QLabel;

namespace servelab::ui {

// The machine the engine runs on, as About and the session report name it: the CPU and the ISA
// our kernels use (as the engine reports them once a model is loaded), the logical cores, the
// device, dtype and threads of the model, the system and Qt.
Facts machineFacts(const ModelSummary& model);

class AboutDialog : public QDialog {
  Q_OBJECT
 public:
  // model: what the engine reported for the loaded model (empty before the first load).
  explicit AboutDialog(const ModelSummary& model, QWidget* parent = nullptr);

  // The texts shown, for tests.
  QString versionText() const;
  QString licenceText() const;
  QString machineText() const;

 private:
  QLabel* version_;
  QLabel* licence_;
  QLabel* machine_;
};

}  // namespace servelab::ui
