#include "serving/key_store.h"

#include <qt6keychain/keychain.h>

#include <QTimer>
#include <memory>

namespace servelab::ui {

namespace {

QString entryName(const QString& target) { return QStringLiteral("load-target/") + target; }

}  // namespace

KeyStore::KeyStore(const QString& service, QObject* parent) : QObject(parent), service_(service) {}

QString KeyStore::key(const QString& target) const { return keys_.value(target); }

QString KeyStore::whereText() const {
  switch (where_) {
    case Where::NotYetAsked:
      return tr("Saving the target puts the key in the system keychain, never in the settings file.");
    case Where::Keychain:
      return tr("Kept in the system keychain, not in the settings file.");
    case Where::SessionOnly:
      return tr("No keychain answered (%1): the key is kept for this session only and is not saved.")
          .arg(why_);
  }
  return QString();
}

void KeyStore::answered(bool ok, const QString& why) {
  if (ok) {
    where_ = Where::Keychain;
    why_.clear();
  } else {
    where_ = Where::SessionOnly;
    why_ = why;
  }
  Q_EMIT changed();
}

void KeyStore::run(QKeychain::Job* job, std::function<void(QKeychain::Job*)> onFound) {
  job->setAutoDelete(true);
  job->setInsecureFallback(false);  // qtkeychain would otherwise write the key to a plain-text file
  auto done = std::make_shared<bool>(false);
  connect(job, &QKeychain::Job::finished, this, [this, done, onFound](QKeychain::Job* j) {
    *done = true;
    const QKeychain::Error e = j->error();
    if (e == QKeychain::NoError || e == QKeychain::EntryNotFound) {
      if (onFound && e == QKeychain::NoError) onFound(j);
      answered(true, QString());
    } else {
      answered(false,
               j->errorString().isEmpty() ? tr("error %1").arg(static_cast<int>(e)) : j->errorString());
    }
  });
  QTimer::singleShot(kAnswerMs, this, [this, done] {
    if (!*done) answered(false, tr("no answer in %1 s").arg(kAnswerMs / 1000));
  });
  job->start();
}

void KeyStore::store(const QString& target, const QString& key) {
  if (key.isEmpty()) {
    forget(target);
    return;
  }
  keys_[target] = key;
  auto* job = new QKeychain::WritePasswordJob(service_, this);
  job->setKey(entryName(target));
  job->setTextData(key);
  run(job);
}

void KeyStore::fetch(const QString& target) {
  auto* job = new QKeychain::ReadPasswordJob(service_, this);
  job->setKey(entryName(target));
  run(job, [this, target](QKeychain::Job* j) {
    keys_[target] = static_cast<QKeychain::ReadPasswordJob*>(j)->textData();
  });
}

void KeyStore::forget(const QString& target) {
  keys_.remove(target);
  auto* job = new QKeychain::DeletePasswordJob(service_, this);
  job->setKey(entryName(target));
  run(job);
}

}  // namespace servelab::ui
