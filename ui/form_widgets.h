#pragma once
// Small widget factories the tabs share.
#include <QSpinBox>
#include <QString>
#include <QStringList>
#include <QTableWidget>

namespace servelab::ui {

// A spin box with an object name (tests and settings find it by name), range, value and suffix.
QSpinBox* makeSpin(QWidget* parent, const QString& name, int lo, int hi, int value,
                   const QString& suffix = QString());

// A read-only table of whole rows: no row numbers, no wrapping, columns sized to their contents
// with the last one stretched.
QTableWidget* makeTable(QWidget* parent, const QString& name, const QStringList& headers);

}  // namespace servelab::ui
