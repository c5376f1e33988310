#include "text_format.h"

#include <QLocale>
#include <QObject>
#include <QStringList>

namespace servelab::ui {

QString formatMs(double ms) { return QString::number(ms, 'f', ms < 10 ? 2 : 1); }

QString formatMsCoarse(double ms) { return QString::number(ms, 'f', ms < 100 ? 1 : 0); }

QString formatBytes(qint64 bytes) {
  if (bytes < 1024) return QStringLiteral("%1 B").arg(bytes);
  const double kib = static_cast<double>(bytes) / 1024.0;
  if (kib < 1024) return QStringLiteral("%1 KiB").arg(kib, 0, 'f', kib < 10 ? 1 : 0);
  return QStringLiteral("%1 MiB").arg(kib / 1024.0, 0, 'f', 2);
}

QString formatMemory(qint64 bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  return mib >= 1024 ? QStringLiteral("%1 GiB").arg(mib / 1024.0, 0, 'f', 2)
                     : QStringLiteral("%1 MiB").arg(mib, 0, 'f', mib < 10 ? 2 : 0);
}

QString formatMegabytes(qint64 bytes) {
  const double mb = static_cast<double>(bytes) / 1e6;
  return QString::number(mb, 'f', mb < 10 ? 2 : 1);
}

QString formatCount(qint64 n) { return QLocale().toString(n); }

QString formatMillions(qint64 n) {
  const double m = static_cast<double>(n) / 1e6;
  return m >= 1 ? QObject::tr("%1 M").arg(m, 0, 'f', 2) : formatCount(n);
}

QString tokenText(const std::string& piece) {
  QString s = QString::fromStdString(piece);
  if (s.startsWith(QChar(0x2423))) s[0] = QLatin1Char(' ');
  return s;
}

}  // namespace servelab::ui
