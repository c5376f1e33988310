#pragma once
// VERIFY_CONTAINS: the error-message check the file-format suites share.
#include <QString>
#include <QTest>
#include <string>

// Fails the test unless `message` contains `needle`, showing both.
#define VERIFY_CONTAINS(message, needle)                                        \
  QVERIFY2(std::string(message).find(std::string(needle)) != std::string::npos, \
           qPrintable(QStringLiteral("expected \"%1\" in the message: %2")      \
                          .arg(QString::fromStdString(std::string(needle)),     \
                               QString::fromStdString(std::string(message)))))
