#pragma once
// The API keys of the load generator's saved targets: in the platform's keychain through qtkeychain
// (the Secret Service on Linux, KWallet, the macOS Keychain, the Windows Credential Store), never in
// the settings file. Where no keychain answers (no Secret Service under Xvfb or the offscreen
// platform), a key is kept in memory for this session only and the store says so: a person must
// know that the key will have to be typed again.
#include <QHash>
#include <QObject>
#include <QString>
#include <functional>

namespace QKeychain {
class Job;
}

namespace servelab::ui {

class KeyStore : public QObject {
  Q_OBJECT
 public:
  enum class Where {
    NotYetAsked,  // no keychain call has been answered yet
    Keychain,     // the last call to the keychain succeeded
    SessionOnly,  // no keychain answered: keys live in memory until the program ends
  };

  // `service` names the keychain entries ("ServeLab"); tests use a service of their own.
  explicit KeyStore(const QString& service, QObject* parent = nullptr);

  // The key of a target as known now: given this session, or read from the keychain.
  QString key(const QString& target) const;
  // Keeps the key at once for this session and writes it to the keychain (an empty key deletes
  // the entry); changed() follows the keychain's answer.
  void store(const QString& target, const QString& key);
  // Reads a target's key from the keychain; changed() follows.
  void fetch(const QString& target);
  // Drops a target's key from memory and from the keychain.
  void forget(const QString& target);

  Where where() const { return where_; }
  // One line for a person: where keys are kept, and why only for the session when it is so.
  QString whereText() const;
  // Seconds a keychain call may take before it counts as no answer.
  static constexpr int kAnswerMs = 10000;

 Q_SIGNALS:
  void changed();

 private:
  void answered(bool ok, const QString& why);
  // Starts a keychain job: its answer (or its silence for kAnswerMs) decides where keys are kept;
  // onFound runs when it succeeded.
  void run(QKeychain::Job* job, std::function<void(QKeychain::Job*)> onFound = {});

  QString service_;
  QHash<QString, QString> keys_;
  Where where_ = Where::NotYetAsked;
  QString why_;
};

}  // namespace servelab::ui
