#include "serving/target_list.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QTableWidget>

#include "form_widgets.h"
#include "serving/key_store.h"
#include "util/errors.h"

namespace servelab::ui {

namespace {

const QStringList kApis = {QStringLiteral("lorax"), QStringLiteral("tgi"), QStringLiteral("openai"),
                           QStringLiteral("openai-chat")};

QPushButton* makeButton(QWidget* parent, const QString& name, const QString& text, const QString& tip) {
  auto* b = new QPushButton(text, parent);
  b->setObjectName(name);
  b->setToolTip(tip);
  return b;
}

QLineEdit* makeEdit(QWidget* parent, const QString& name, const QString& placeholder, const QString& tip) {
  auto* e = new QLineEdit(parent);
  e->setObjectName(name);
  e->setPlaceholderText(placeholder);
  e->setToolTip(tip);
  return e;
}

}  // namespace

TargetEditor::TargetEditor(const QString& keychainService, QWidget* parent)
    : QWidget(parent), keys_(new KeyStore(keychainService, this)) {
  targets_ = new QComboBox(this);
  targets_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  targets_->setMinimumContentsLength(12);
  targets_->setObjectName(QStringLiteral("servingTargets"));
  targets_->setToolTip(
      tr("Saved targets; \"new target\" is the form as typed (an empty URL is this server)"));
  auto* save = makeButton(this, QStringLiteral("servingTargetSave"), tr("Save target"),
                          tr("Save the form as a target under its name (its key in the keychain)"));
  auto* remove = makeButton(this, QStringLiteral("servingTargetRemove"), tr("Remove target"),
                            tr("Remove this saved target and its key"));
  name_ =
      makeEdit(this, QStringLiteral("servingTargetName"), tr("e.g. staging vLLM"), tr("The target's name"));
  url_ = makeEdit(this, QStringLiteral("servingLoadUrl"), tr("this server"),
                  tr("Any LoRAX/TGI- or OpenAI-compatible server: empty targets the server started here"));
  api_ = new QComboBox(this);
  api_->setObjectName(QStringLiteral("servingLoadApi"));
  api_->addItems(kApis);
  api_->setToolTip(
      tr("lorax and tgi: POST /generate_stream; openai: /v1/completions; openai-chat: "
         "/v1/chat/completions"));
  model_ = new QComboBox(this);
  model_->setObjectName(QStringLiteral("servingTargetModel"));
  model_->setEditable(true);
  // A model id can be a long path: it must not widen the form (the side panel fits its controls).
  model_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  model_->setMinimumContentsLength(12);
  model_->lineEdit()->setPlaceholderText(tr("the first it lists"));
  model_->setToolTip(tr("OpenAI: the model to ask for; empty: the first of its GET /v1/models"));
  fetch_ = makeButton(this, QStringLiteral("servingTargetFetch"), tr("Fetch"),
                      tr("GET /v1/models of this target (with its headers, key and TLS settings)"));
  headers_ = new QTableWidget(0, 2, this);
  headers_->setObjectName(QStringLiteral("servingLoadHeaders"));
  headers_->setHorizontalHeaderLabels({tr("header"), tr("value")});
  headers_->verticalHeader()->hide();
  headers_->horizontalHeader()->setStretchLastSection(true);
  headers_->setMaximumHeight(80);
  headers_->setToolTip(
      tr("Headers sent with every request; saved with the target in plain text: put an "
         "API key in the key field"));
  auto* addRow = makeButton(this, QStringLiteral("servingHeaderAdd"), tr("+ header"), tr("Add a header row"));
  auto* removeHeader = makeButton(this, QStringLiteral("servingHeaderRemove"), tr("− header"),
                                  tr("Remove the selected header"));
  key_ =
      makeEdit(this, QStringLiteral("servingTargetKey"), tr("none"),
               tr("Sent as Authorization: Bearer KEY; kept in the system keychain, never in the settings"));
  key_->setEchoMode(QLineEdit::Password);
  keyNote_ = new QLabel(keys_->whereText(), this);
  keyNote_->setObjectName(QStringLiteral("servingTargetKeyNote"));
  keyNote_->setWordWrap(true);
  caFile_ = makeEdit(this, QStringLiteral("servingTargetCaFile"), tr("the system's"),
                     tr("HTTPS: a PEM file of the certificate authorities to trust (a self-signed "
                        "server's own certificate)"));
  caBrowse_ = makeButton(this, QStringLiteral("servingTargetCaBrowse"), tr("…"), tr("Choose a PEM file"));
  insecure_ = new QCheckBox(tr("insecure (self-signed)"), this);
  insecure_->setObjectName(QStringLiteral("servingTargetInsecure"));
  insecure_->setToolTip(tr("HTTPS without verifying the server's certificate at all (a self-signed server)"));
  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("servingTargetStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* form = new QFormLayout(this);
  form->setContentsMargins(0, 0, 0, 0);
  form->addRow(tr("Target"), targets_);
  auto* targetButtons = new QHBoxLayout;
  targetButtons->addWidget(save);
  targetButtons->addWidget(remove);
  form->addRow(QString(), targetButtons);
  form->addRow(tr("Name"), name_);
  form->addRow(tr("URL"), url_);
  form->addRow(tr("API"), api_);
  auto* modelRow = new QHBoxLayout;
  modelRow->addWidget(model_, 1);
  modelRow->addWidget(fetch_);
  form->addRow(tr("Model"), modelRow);
  form->addRow(tr("Headers"), headers_);
  auto* headerButtons = new QHBoxLayout;
  headerButtons->addWidget(addRow);
  headerButtons->addWidget(removeHeader);
  headerButtons->addStretch();
  form->addRow(QString(), headerButtons);
  form->addRow(tr("API key"), key_);
  form->addRow(keyNote_);
  auto* caRow = new QHBoxLayout;
  caRow->addWidget(caFile_, 1);
  caRow->addWidget(caBrowse_);
  form->addRow(tr("CA file"), caRow);
  form->addRow(insecure_);
  form->addRow(status_);
  caBrowse_->setMaximumWidth(32);

  connect(save, &QPushButton::clicked, this, [this] { saveTarget(); });
  connect(remove, &QPushButton::clicked, this, [this] { removeTarget(); });
  connect(fetch_, &QPushButton::clicked, this, [this] { fetchModels(); });
  connect(addRow, &QPushButton::clicked, this, [this] { addHeader(QString(), QString()); });
  connect(removeHeader, &QPushButton::clicked, this, [this] {
    if (headers_->currentRow() >= 0) headers_->removeRow(headers_->currentRow());
  });
  connect(caBrowse_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Certificate authorities to trust"), QString(),
                                                   tr("PEM files (*.pem *.crt);;All files (*)"));
    if (!f.isEmpty()) caFile_->setText(f);
  });
  connect(insecure_, &QCheckBox::toggled, this, [this](bool on) {
    caFile_->setEnabled(!on);
    caBrowse_->setEnabled(!on);
  });
  connect(targets_, &QComboBox::activated, this, [this](int index) {
    if (index <= 0) return;  // "new target": the form stays as it is, to be edited
    selectTarget(targets_->itemText(index));
  });
  connect(keys_, &KeyStore::changed, this, [this] {
    keyNote_->setText(keys_->whereText());
    // A key read from the keychain after the target was shown.
    if (key_->text().isEmpty() && targets_->currentIndex() > 0)
      key_->setText(keys_->key(targets_->currentText()));
  });
  updateTargetList(QString());
}

TargetEditor::~TargetEditor() {
  if (fetchThread_.joinable()) fetchThread_.join();
}

QString TargetEditor::url() const { return url_->text().trimmed(); }
void TargetEditor::setName(const QString& name) { name_->setText(name); }
void TargetEditor::setModel(const QString& model) { model_->setCurrentText(model); }
void TargetEditor::setKey(const QString& key) { key_->setText(key); }
void TargetEditor::setCaFile(const QString& path) { caFile_->setText(path); }
void TargetEditor::setInsecure(bool on) { insecure_->setChecked(on); }
QStringList TargetEditor::models() const {
  QStringList out;
  for (int i = 0; i < model_->count(); ++i) out << model_->itemText(i);
  return out;
}
QString TargetEditor::status() const { return status_->text(); }
QString TargetEditor::keyNote() const { return keyNote_->text(); }

void TargetEditor::addHeader(const QString& name, const QString& value) {
  const int row = headers_->rowCount();
  headers_->insertRow(row);
  headers_->setItem(row, 0, new QTableWidgetItem(name));
  headers_->setItem(row, 1, new QTableWidgetItem(value));
}

void TargetEditor::setTarget(const QString& url, const QString& api, const QString& header) {
  targets_->setCurrentIndex(0);
  name_->clear();
  url_->setText(url);
  api_->setCurrentText(api);
  model_->clear();
  key_->clear();
  caFile_->clear();
  insecure_->setChecked(false);
  headers_->setRowCount(0);
  const QString h = header.trimmed();
  static const QRegularExpression bearer(QStringLiteral("^authorization\\s*:\\s*bearer\\s+(\\S+)$"),
                                         QRegularExpression::CaseInsensitiveOption);
  if (const QRegularExpressionMatch m = bearer.match(h); m.hasMatch()) {
    key_->setText(m.captured(1));
  } else if (!h.isEmpty()) {
    const qsizetype colon = h.indexOf(QLatin1Char(':'));
    addHeader(colon < 0 ? h : h.left(colon).trimmed(), colon < 0 ? QString() : h.mid(colon + 1).trimmed());
  }
}

TargetEditor::Saved TargetEditor::form() const {
  Saved t;
  t.name = name_->text().trimmed();
  t.url = url();
  t.api = api_->currentText();
  t.model = model_->currentText().trimmed();
  t.caFile = caFile_->text().trimmed();
  t.insecure = insecure_->isChecked();
  for (int row = 0; row < headers_->rowCount(); ++row) {
    const QString k = headers_->item(row, 0) ? headers_->item(row, 0)->text().trimmed() : QString();
    const QString v = headers_->item(row, 1) ? headers_->item(row, 1)->text().trimmed() : QString();
    if (!k.isEmpty() || !v.isEmpty()) t.headers.append({k, v});
  }
  return t;
}

std::optional<servelab::LoadTarget> TargetEditor::target(QString* error) const {
  const Saved f = form();
  servelab::LoadTarget t;
  t.url = f.url.toStdString();
  t.model = f.model.toStdString();
  static const QRegularExpression token(QStringLiteral("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"));
  try {
    t.api = servelab::parse_load_api(f.api.toStdString());
    for (const auto& [k, v] : f.headers) {
      if (!token.match(k).hasMatch())
        throw servelab::InputError(
            tr("the header name '%1' is not a header's name (Key: value)").arg(k).toStdString());
      if (v.isEmpty()) throw servelab::InputError(tr("the header %1 has no value").arg(k).toStdString());
      t.headers.emplace_back(k.toStdString(), v.toStdString());
    }
    if (const QString key = key_->text().trimmed(); !key.isEmpty()) {
      for (const auto& [k, v] : f.headers)
        if (k.compare(QLatin1String("Authorization"), Qt::CaseInsensitive) == 0)
          throw servelab::InputError(
              tr("an API key and an Authorization header: give the key in one place").toStdString());
      t.headers.emplace_back("Authorization", "Bearer " + key.toStdString());
    }
    const bool https = f.url.startsWith(QLatin1String("https://"), Qt::CaseInsensitive);
    if (f.insecure || (!f.caFile.isEmpty())) {
      if (!https)
        throw servelab::InputError(tr("a CA file and insecure are for https:// URLs").toStdString());
      if (f.insecure)
        t.insecure = true;
      else
        t.ca_file = f.caFile.toStdString();
    }
  } catch (const servelab::InputError& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return std::nullopt;
  }
  return t;
}

void TargetEditor::setStatus(const QString& text, bool error) {
  status_->setText(error ? QStringLiteral("<span style='color:#c0392b'>%1</span>").arg(text.toHtmlEscaped())
                         : text.toHtmlEscaped());
}

bool TargetEditor::saveTarget() {
  const Saved f = form();
  QString error;
  if (f.name.isEmpty())
    error = tr("Name the target to save it.");
  else if (f.url.isEmpty())
    error = tr("A saved target needs a URL (an empty one is this server).");
  else if (!target(&error))
    error = tr("Cannot save %1: %2").arg(f.name, error);
  for (const auto& h : f.headers)
    if (error.isEmpty() && h.first.compare(QLatin1String("Authorization"), Qt::CaseInsensitive) == 0)
      error = tr("Cannot save %1 with an Authorization header: headers are saved in plain text; put the "
                 "key in the API key field")
                  .arg(f.name);
  if (!error.isEmpty()) {
    setStatus(error, true);
    return false;
  }
  auto it = std::find_if(saved_.begin(), saved_.end(), [&](const Saved& s) { return s.name == f.name; });
  if (it != saved_.end())
    *it = f;
  else
    saved_.append(f);
  keys_->store(f.name, key_->text().trimmed());
  updateTargetList(f.name);
  setStatus(tr("Saved %1 (its key apart from the settings).").arg(f.name), false);
  return true;
}

bool TargetEditor::selectTarget(const QString& name) {
  for (const Saved& s : saved_)
    if (s.name == name) {
      showSaved(s);
      targets_->setCurrentText(name);
      return true;
    }
  return false;
}

void TargetEditor::showSaved(const Saved& t) {
  name_->setText(t.name);
  url_->setText(t.url);
  api_->setCurrentText(t.api);
  model_->clear();
  if (!t.model.isEmpty()) model_->addItem(t.model);
  caFile_->setText(t.caFile);
  insecure_->setChecked(t.insecure);
  headers_->setRowCount(0);
  for (const auto& [k, v] : t.headers) addHeader(k, v);
  key_->setText(keys_->key(t.name));
  status_->clear();
}

void TargetEditor::removeTarget() {
  const int index = targets_->currentIndex();
  if (index <= 0) return;
  const QString name = targets_->itemText(index);
  saved_.erase(std::remove_if(saved_.begin(), saved_.end(), [&](const Saved& s) { return s.name == name; }),
               saved_.end());
  keys_->forget(name);
  updateTargetList(QString());
  setStatus(tr("Removed %1.").arg(name), false);
}

QStringList TargetEditor::targetNames() const {
  QStringList out;
  for (const Saved& s : saved_) out << s.name;
  return out;
}

void TargetEditor::updateTargetList(const QString& current) {
  targets_->clear();
  targets_->addItem(tr("new target"));
  for (const Saved& s : saved_) targets_->addItem(s.name);
  if (!current.isEmpty()) targets_->setCurrentText(current);
}

bool TargetEditor::fetchModels() {
  if (fetching_) return false;
  QString error;
  std::optional<servelab::LoadTarget> t = target(&error);
  if (t && t->url.empty()) t->url = localUrl_.toStdString();
  if (t && t->url.empty()) error = tr("give a URL, or start the server");
  if (!t || !error.isEmpty()) {
    setStatus(tr("Cannot list the models: %1").arg(error), true);
    Q_EMIT modelsFetched(false, status_->text());
    return false;
  }
  t->connect_timeout_s = 5;
  t->read_timeout_s = 20;
  if (fetchThread_.joinable()) fetchThread_.join();
  fetching_ = true;
  fetch_->setEnabled(false);
  setStatus(tr("GET %1/v1/models…").arg(QString::fromStdString(t->url)), false);
  fetchThread_ = std::thread([this, target = *t] {
    QStringList models;
    QString why;
    try {
      for (const std::string& m : servelab::list_models(target)) models << QString::fromStdString(m);
    } catch (const std::exception& e) {
      why = QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        this, [this, models, why] { onModels(models, why); }, Qt::QueuedConnection);
  });
  return true;
}

void TargetEditor::onModels(const QStringList& models, const QString& error) {
  if (fetchThread_.joinable()) fetchThread_.join();
  fetching_ = false;
  fetch_->setEnabled(true);
  if (!error.isEmpty()) {
    setStatus(tr("Cannot list the models: %1").arg(error), true);
    Q_EMIT modelsFetched(false, error);
    return;
  }
  const QString kept = model_->currentText().trimmed();
  model_->clear();
  model_->addItems(models);
  model_->setCurrentIndex(models.contains(kept) ? static_cast<int>(models.indexOf(kept)) : 0);
  setStatus(tr("%n model(s) listed on GET /v1/models.", nullptr, static_cast<int>(models.size())), false);
  Q_EMIT modelsFetched(true, QString());
}

void TargetEditor::loadSettings(QSettings& s) {
  // A URL or an API from the settings (a lesson's step) is the form's, not a saved target's.
  if (const auto target = settingString(s, QStringLiteral("target"))) {
    targets_->setCurrentIndex(0);
    url_->setText(*target);
  }
  if (const auto api = settingChoice(s, QStringLiteral("api"), kApis)) api_->setCurrentText(*api);
  if (!s.contains(QStringLiteral("targets/size"))) return;  // settings that name no targets keep ours
  saved_.clear();
  const int n = s.beginReadArray(QStringLiteral("targets"));
  for (int i = 0; i < n; ++i) {
    s.setArrayIndex(i);
    Saved t;
    t.name = s.value(QStringLiteral("name")).toString().trimmed();
    t.url = s.value(QStringLiteral("url")).toString().trimmed();
    t.api = s.value(QStringLiteral("api")).toString();
    t.model = s.value(QStringLiteral("model")).toString();
    t.caFile = s.value(QStringLiteral("caFile")).toString();
    t.insecure = settingBool(s, QStringLiteral("insecure")).value_or(false);
    const int h = s.beginReadArray(QStringLiteral("headers"));
    for (int j = 0; j < h; ++j) {
      s.setArrayIndex(j);
      t.headers.append(
          {s.value(QStringLiteral("name")).toString(), s.value(QStringLiteral("value")).toString()});
    }
    s.endArray();
    if (t.name.isEmpty() || t.url.isEmpty() || !kApis.contains(t.api)) {
      settingsIssues() << QStringLiteral("serving/targets/%1 = %2 needs a name, a URL and an API of %3")
                              .arg(i + 1)
                              .arg(t.name, kApis.join(QStringLiteral(", ")));
      continue;
    }
    saved_.append(t);
    keys_->fetch(t.name);
  }
  s.endArray();
  updateTargetList(QString());
  if (const auto current = settingString(s, QStringLiteral("currentTarget")); current && !current->isEmpty())
    selectTarget(*current);
}

void TargetEditor::saveSettings(QSettings& s) const {
  s.setValue(QStringLiteral("target"), url());
  s.setValue(QStringLiteral("api"), api_->currentText());
  s.setValue(QStringLiteral("currentTarget"),
             targets_->currentIndex() > 0 ? targets_->currentText() : QString());
  // The keys are not here: the keychain holds them (KeyStore).
  s.beginWriteArray(QStringLiteral("targets"), static_cast<int>(saved_.size()));
  for (int i = 0; i < saved_.size(); ++i) {
    const Saved& t = saved_[i];
    s.setArrayIndex(i);
    s.setValue(QStringLiteral("name"), t.name);
    s.setValue(QStringLiteral("url"), t.url);
    s.setValue(QStringLiteral("api"), t.api);
    s.setValue(QStringLiteral("model"), t.model);
    s.setValue(QStringLiteral("caFile"), t.caFile);
    s.setValue(QStringLiteral("insecure"), t.insecure);
    s.beginWriteArray(QStringLiteral("headers"), static_cast<int>(t.headers.size()));
    for (int j = 0; j < t.headers.size(); ++j) {
      s.setArrayIndex(j);
      s.setValue(QStringLiteral("name"), t.headers[j].first);
      s.setValue(QStringLiteral("value"), t.headers[j].second);
    }
    s.endArray();
  }
  s.endArray();
}

}  // namespace servelab::ui
