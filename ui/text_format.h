#pragma once
// How every tab writes times, sizes, counts and tokens: one place, so that the same quantity reads
// the same on every tab.
#include <QSettings>
#include <QString>
#include <string>

namespace servelab::ui {

// Milliseconds for tables and summaries: two decimals under 10 ms, one above ("3.25", "41.7").
QString formatMs(double ms);
// Milliseconds where a request's latency sits beside many others: one decimal under 100 ms, none
// above ("41.7", "812").
QString formatMsCoarse(double ms);
// A small amount of memory: "512 B", "3.5 KiB", "42 KiB", "1.25 MiB".
QString formatBytes(qint64 bytes);
// A model-sized amount of memory: "4.75 MiB", "475 MiB", "1.52 GiB".
QString formatMemory(qint64 bytes);
// Decimal megabytes, as the quantization and LoRA lessons count them: "3.54", "124.4".
QString formatMegabytes(qint64 bytes);
// A count with the locale's digit grouping ("124,439,808"), and in millions when it is large.
QString formatCount(qint64 n);
QString formatMillions(qint64 n);
// A readable token (engine_session.h's readableToken) as running text: its leading open box back
// to a space.
QString tokenText(const std::string& piece);

}  // namespace servelab::ui
