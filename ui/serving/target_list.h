#pragma once
// The load generator's target in the Serving tab: the server started here, or a saved remote
// endpoint. A target has a name, a URL, an API kind (the load generator's: lorax, tgi, openai,
// openai-chat), a model picked from what its GET /v1/models lists (fetched on a thread of its own),
// any number of headers, an API key (sent as Authorization: Bearer), and for HTTPS a CA file to
// trust or "insecure" for a self-signed server. Targets are saved in the settings without their
// keys: keys go to the platform keychain (KeyStore), or stay for the session only where none answers.
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>
#include <atomic>
#include <optional>
#include <thread>

#include "serve/load_generator.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSettings;
class QTableWidget;

namespace servelab::ui {

class KeyStore;

class TargetEditor : public QWidget {
  Q_OBJECT
 public:
  // keychainService: the keychain's name for the keys ("ServeLab"; tests use their own).
  explicit TargetEditor(const QString& keychainService, QWidget* parent = nullptr);
  ~TargetEditor() override;

  // The target the form describes; its url is empty for the server started here (the caller fills
  // it in). Nothing, and *error saying why, when the form cannot make one.
  std::optional<servelab::LoadTarget> target(QString* error) const;
  QString url() const;
  // The URL an empty URL stands for (the server started here; empty while it is not serving).
  void setLocalUrl(const QString& url) { localUrl_ = url; }
  // Scripts' form: an unsaved target of a URL, an API kind and one "Key: value" header
  // ("Authorization: Bearer KEY" goes to the API key field).
  void setTarget(const QString& url, const QString& api, const QString& header = QString());
  void setName(const QString& name);
  void setModel(const QString& model);
  void setKey(const QString& key);
  void setCaFile(const QString& path);
  void setInsecure(bool on);
  void addHeader(const QString& name, const QString& value);

  // Saved targets: the form saved under its name (false, and the reason on the status line, when it
  // cannot be); the saved target of that name put in the form; the current one removed.
  bool saveTarget();
  bool selectTarget(const QString& name);
  void removeTarget();
  QStringList targetNames() const;

  // GET /v1/models of the form's target on a thread; modelsFetched follows (the list fills the
  // model box, or the status line says why not). False when it cannot start (the reason shown).
  bool fetchModels();
  QStringList models() const;
  QString status() const;   // the status line: a fetch's or a save's outcome
  QString keyNote() const;  // where the key is kept
  KeyStore* keyStore() const { return keys_; }

  // Within the caller's settings group: the targets without their keys, and the form's URL and API.
  void loadSettings(QSettings& settings);
  void saveSettings(QSettings& settings) const;

 Q_SIGNALS:
  void modelsFetched(bool ok, const QString& message);

 private:
  struct Saved {
    QString name, url, api, model, caFile;
    bool insecure = false;
    QVector<QPair<QString, QString>> headers;
  };
  Saved form() const;
  void showSaved(const Saved& t);
  void onModels(const QStringList& models, const QString& error);
  void setStatus(const QString& text, bool error);
  void updateTargetList(const QString& current);

  QComboBox* targets_;
  QLineEdit* name_;
  QLineEdit* url_;
  QComboBox* api_;
  QComboBox* model_;
  QPushButton* fetch_;
  QTableWidget* headers_;
  QLineEdit* key_;
  QLabel* keyNote_;
  QLineEdit* caFile_;
  QPushButton* caBrowse_;
  QCheckBox* insecure_;
  QLabel* status_;
  KeyStore* keys_;

  QVector<Saved> saved_;
  QString localUrl_;
  std::thread fetchThread_;
  std::atomic<bool> fetching_{false};
};

}  // namespace servelab::ui
