#include "continuous/result_tables.h"

#include <QCoreApplication>
#include <QTableWidget>

#include "text_format.h"

namespace servelab::ui {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

QString tr(const char* text) { return QCoreApplication::translate("ContinuousTab", text); }

void setRow(QTableWidget* table, int row, const QStringList& cells) {
  for (int c = 0; c < cells.size(); ++c) {
    auto* item = new QTableWidgetItem(cells[c]);
    item->setTextAlignment(c == 0 ? (Qt::AlignLeft | Qt::AlignVCenter) : (Qt::AlignRight | Qt::AlignVCenter));
    table->setItem(row, c, item);
  }
}

}  // namespace

void fillComparison(QTableWidget* table, const servelab::SyncVsContinuousResult& r) {
  double syncMs = 0;
  for (const servelab::ServeSummary& m : r.methods)
    if (m.method == "synchronous") syncMs = m.total_ms;
  // Methods side by side: a column each, a row per figure.
  const QStringList figures = {tr("total time (ms)"),
                               tr("tokens/s"),
                               tr("speed-up vs synchronous"),
                               tr("TTFT p50 (ms)"),
                               tr("TTFT p90 (ms)"),
                               tr("TTFT p99 (ms)"),
                               tr("latency p50 (ms)"),
                               tr("latency p90 (ms)"),
                               tr("latency p99 (ms)"),
                               tr("inference calls"),
                               tr("average batch"),
                               tr("max batch"),
                               tr("KV cache (MiB)"),
                               tr("KV copied (MiB)"),
                               tr("most requests at once"),
                               tr("preemptions"),
                               tr("prefix-cache hits (tokens)")};
  table->clear();
  table->setRowCount(static_cast<int>(figures.size()));
  table->setColumnCount(static_cast<int>(r.methods.size()));
  table->setVerticalHeaderLabels(figures);
  QStringList methods;
  for (const servelab::ServeSummary& m : r.methods)
    methods << QString::fromStdString(m.method).replace(QStringLiteral(" ("), QStringLiteral("\n("));
  table->setHorizontalHeaderLabels(methods);
  for (int c = 0; c < static_cast<int>(r.methods.size()); ++c) {
    const servelab::ServeSummary& m = r.methods[static_cast<size_t>(c)];
    const servelab::BatchRunResult& run = r.runs[static_cast<size_t>(c)];
    const bool sync = run.method == "synchronous";
    const QStringList values = {
        formatMsCoarse(m.total_ms), QString::number(m.tokens_per_s, 'f', 0),
        m.total_ms > 0 && syncMs > 0 ? QStringLiteral("%1×").arg(syncMs / m.total_ms, 0, 'f', 2) : QString(),
        formatMsCoarse(m.ttft_p50), formatMsCoarse(m.ttft_p90), formatMsCoarse(m.ttft_p99),
        formatMsCoarse(m.latency_p50), formatMsCoarse(m.latency_p90), formatMsCoarse(m.latency_p99),
        QString::number(m.inference_calls), QString::number(m.average_batch, 'f', 2),
        QString::number(m.max_batch), QString::number(static_cast<double>(m.kv_cache_bytes) / kMiB, 'f', 2),
        QString::number(static_cast<double>(m.kv_copy_bytes) / kMiB, 'f', 2),
        // Synchronous batching keeps no count of these: its batch is max batch requests.
        sync ? QStringLiteral("—") : QString::number(run.max_running),
        sync ? QStringLiteral("—") : QString::number(run.preemptions),
        sync ? QStringLiteral("—")
             : QStringLiteral("%1 / %2").arg(run.prefix_hit_tokens).arg(run.prompt_tokens)};
    for (int row = 0; row < values.size(); ++row) {
      auto* item = new QTableWidgetItem(values[row]);
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table->setItem(row, c, item);
    }
  }
}

void fillCourseTable(QTableWidget* table, const servelab::CourseBenchmarkResult& r) {
  table->setRowCount(static_cast<int>(r.rows.size()));
  for (int i = 0; i < static_cast<int>(r.rows.size()); ++i) {
    const servelab::CourseBenchmarkRow& row = r.rows[static_cast<size_t>(i)];
    QString method = QString::fromStdString(row.method);
    method.replace(QStringLiteral(" ("), QStringLiteral("\n("));
    setRow(table, i,
           {method, QString::number(row.queries), QString::number(row.time_s, 'f', 2),
            QStringLiteral("%1×").arg(row.throughput_vs_baseline, 0, 'f', 2), QString::number(row.max_batch),
            QString::number(row.avg_batch, 'f', 2), QString::number(row.tokens),
            QString::number(row.inference_calls)});
    table->item(i, 0)->setToolTip(QString::fromStdString(row.method));
  }
  table->resizeRowsToContents();
}

}  // namespace servelab::ui
