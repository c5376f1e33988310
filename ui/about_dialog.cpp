#include "about_dialog.h"

#include <QCoreApplication>
#include <QDialogButtonBox>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSysInfo>
#include <QThread>
#include <QVBoxLayout>
#include <QtGlobal>

namespace servelab::ui {

namespace {

struct Dependency {
  const char* name;
  const char* licence;
  const char* role;
};

// The main dependencies the app links or ships (docs/licenses.md has every one, with versions).
constexpr Dependency kDependencies[] = {
    {"Qt 6", "LGPL-3.0", "the window and its widgets"},
    {"QCustomPlot", "GPL-3.0-or-later", "the charts"},
    {"PyTorch (libtorch)", "BSD-3-Clause", "the tensor engine"},
    {"SentencePiece", "Apache-2.0", "SentencePiece tokenizers"},
    {"PCRE2", "BSD-3-Clause", "the pre-tokenizers' regular expressions"},
    {"nlohmann-json", "MIT", "JSON"},
    {"cpp-httplib", "MIT", "the Serving tab's server and load generator"},
    {"xgrammar", "Apache-2.0", "structured output"},
    {"SmolLM2-135M-Instruct", "Apache-2.0", "the built-in model"},
    {"GPT-2 tokenizer files", "MIT", "the GPT-2 shape's tokenizer"},
};

QLabel* makeLabel(const QString& name, QWidget* parent) {
  auto* l = new QLabel(parent);
  l->setObjectName(name);
  l->setTextFormat(Qt::RichText);
  l->setTextInteractionFlags(Qt::TextBrowserInteraction);
  l->setOpenExternalLinks(true);
  l->setWordWrap(true);
  return l;
}

}  // namespace

Facts machineFacts(const ModelSummary& model) {
  Facts facts;
  if (model.valid() && !model.cpuModel.isEmpty()) {
    facts << qMakePair(QObject::tr("CPU"), model.cpuModel)
          << qMakePair(QObject::tr("ISA our kernels use"), model.cpuIsa);
  }
  facts << qMakePair(QObject::tr("Logical cores"), QString::number(QThread::idealThreadCount()));
  if (model.valid()) {
    facts << qMakePair(QObject::tr("Device"),
                       QObject::tr("%1, %2, %3 threads").arg(model.device, model.dtype).arg(model.threads));
  }
  facts << qMakePair(QObject::tr("System"), QSysInfo::prettyProductName())
        << qMakePair(QObject::tr("Qt"), QString::fromUtf8(qVersion()));
  return facts;
}

AboutDialog::AboutDialog(const ModelSummary& model, QWidget* parent) : QDialog(parent) {
  setObjectName(QStringLiteral("aboutDialog"));
  setWindowTitle(tr("About ServeLab"));
  auto* layout = new QVBoxLayout(this);

  version_ = makeLabel(QStringLiteral("aboutVersion"), this);
  const QString version = QCoreApplication::applicationVersion();
  version_->setText(tr("<h2>ServeLab %1</h2><p>A desktop lab for efficiently serving LLMs: KV caching, "
                       "batching, continuous "
                       "batching with paged KV, quantization, multi-LoRA and an HTTP server, measured on a "
                       "real engine.</p>")
                        .arg(version.isEmpty() ? tr("(development build)") : version.toHtmlEscaped()));
  layout->addWidget(version_);

  licence_ = makeLabel(QStringLiteral("aboutLicence"), this);
  QString rows;
  for (const Dependency& d : kDependencies)
    rows += QStringLiteral(
                "<tr><td style=\"padding-right:12px\">%1</td><td style=\"padding-right:12px\">%2</td>"
                "<td>%3</td></tr>")
                .arg(QString::fromUtf8(d.name), QString::fromUtf8(d.licence), QString::fromUtf8(d.role));
  licence_->setText(
      tr("<p><b>Licence:</b> GPL-3.0-or-later (GNU General Public License, version 3 or later): you may "
         "run, study, share and change it; the LICENSE file has the terms. ServeLab links QCustomPlot, "
         "which is GPL-3.0-or-later.</p>"
         "<p><b>Main dependencies</b> (docs/licenses.md lists every one):</p>"
         "<table cellspacing=\"0\" cellpadding=\"2\"><tr><th align=\"left\">component</th>"
         "<th align=\"left\">licence</th><th align=\"left\">used for</th></tr>%1</table>")
          .arg(rows));
  layout->addWidget(licence_);

  machine_ = makeLabel(QStringLiteral("aboutMachine"), this);
  QStringList lines;
  if (!model.valid() || model.cpuModel.isEmpty())
    lines << tr("The engine reports the CPU and the ISA its kernels use once a model is loaded.");
  for (const auto& [name, value] : machineFacts(model))
    lines << QStringLiteral("%1: %2").arg(name.toHtmlEscaped(), value.toHtmlEscaped());
  machine_->setText(tr("<p><b>This machine</b><br>%1</p>").arg(lines.join(QStringLiteral("<br>"))));
  layout->addWidget(machine_);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  QPushButton* aboutQt = buttons->addButton(tr("About Qt"), QDialogButtonBox::ActionRole);
  connect(aboutQt, &QPushButton::clicked, this, [this] { QMessageBox::aboutQt(this); });
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);
}

QString AboutDialog::versionText() const { return version_->text(); }
QString AboutDialog::licenceText() const { return licence_->text(); }
QString AboutDialog::machineText() const { return machine_->text(); }

}  // namespace servelab::ui
