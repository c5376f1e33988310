#include "spec_text_view.h"

#include <QTextCharFormat>
#include <QTextCursor>
#include <algorithm>

namespace servelab::ui {

namespace {

enum class Kind { Prompt, Plain, Accepted, Rejected, Own, Separator };

QTextCharFormat formatFor(Kind kind, bool dark) {
  QTextCharFormat f;
  switch (kind) {
    case Kind::Prompt:
      f.setForeground(dark ? QColor(150, 150, 150) : QColor(120, 120, 120));
      break;
    case Kind::Plain:
      break;
    case Kind::Accepted:
      f.setBackground(dark ? QColor(30, 90, 45) : QColor(200, 240, 205));
      f.setForeground(dark ? QColor(200, 255, 210) : QColor(0, 90, 30));
      break;
    case Kind::Rejected:
      f.setFontStrikeOut(true);
      f.setForeground(dark ? QColor(255, 140, 140) : QColor(190, 30, 30));
      f.setBackground(dark ? QColor(80, 30, 30) : QColor(255, 225, 225));
      break;
    case Kind::Own:
      f.setFontUnderline(true);
      f.setFontWeight(QFont::Bold);
      f.setForeground(dark ? QColor(150, 190, 255) : QColor(20, 70, 180));
      break;
    case Kind::Separator:
      f.setForeground(dark ? QColor(90, 90, 90) : QColor(190, 190, 190));
      break;
  }
  return f;
}

QString htmlSpan(Kind kind, bool dark, const QString& text) {
  const QTextCharFormat f = formatFor(kind, dark);
  QString style;
  if (f.hasProperty(QTextFormat::ForegroundBrush))
    style += QStringLiteral("color:%1;").arg(f.foreground().color().name());
  if (f.hasProperty(QTextFormat::BackgroundBrush))
    style += QStringLiteral("background-color:%1;").arg(f.background().color().name());
  if (f.fontStrikeOut()) style += QStringLiteral("text-decoration:line-through;");
  if (f.fontUnderline()) style += QStringLiteral("text-decoration:underline;font-weight:bold;");
  return QStringLiteral("<span style='%1'>%2</span>").arg(style, text.toHtmlEscaped());
}

}  // namespace

SpecTextView::SpecTextView(QWidget* parent) : QTextEdit(parent) {
  setReadOnly(true);
  setAcceptRichText(false);
  setObjectName(QStringLiteral("speculativeText"));
}

bool SpecTextView::dark() const { return palette().color(QPalette::Base).lightness() < 128; }

QString SpecTextView::legendHtml(bool dark) {
  return tr("%1 accepted proposal · %2 rejected proposal · %3 the target's own token · %4 no proposal "
            "(plain decode) · %5 step boundary")
      .arg(htmlSpan(Kind::Accepted, dark, tr("green")), htmlSpan(Kind::Rejected, dark, tr("struck")),
           htmlSpan(Kind::Own, dark, tr("blue")), htmlSpan(Kind::Plain, dark, tr("plain")),
           htmlSpan(Kind::Separator, dark, QStringLiteral("\u258f")));
}

void SpecTextView::reset(const QString& prompt) {
  clear();
  steps_ = stepsWithProposals_ = 0;
  proposed_ = accepted_ = 0;
  generated_.clear();
  if (prompt.isEmpty()) return;
  QTextCursor c(document());
  c.insertText(prompt, formatFor(Kind::Prompt, dark()));
  c.insertBlock();
}

void SpecTextView::addStep(const SpecStepInfo& s) {
  const bool d = dark();
  QTextCursor c(document());
  c.movePosition(QTextCursor::End);
  c.beginEditBlock();
  ++steps_;
  const int given = static_cast<int>(s.tokens.size());
  if (s.proposed.isEmpty()) {
    for (const QString& t : s.tokens) c.insertText(t, formatFor(Kind::Plain, d));
  } else {
    ++stepsWithProposals_;
    proposed_ += s.proposed.size();
    accepted_ += s.accepted;
    // A request decodes in the step that prefilled it: the prefill's token comes first, plain.
    const int lead = std::max(0, given - s.accepted - 1);
    for (int i = 0; i < lead; ++i) c.insertText(s.tokens[i], formatFor(Kind::Plain, d));
    c.insertText(QStringLiteral("\u258f"), formatFor(Kind::Separator, d));
    // The accepted proposals as the step gave them (the tokens' own text), then the rejected
    // proposals, then the token the target chose itself (none when a stop cut the run short).
    const int accepted = std::min(s.accepted, given - lead);
    for (int i = 0; i < accepted; ++i) c.insertText(s.tokens[lead + i], formatFor(Kind::Accepted, d));
    for (qsizetype i = s.accepted; i < s.proposed.size(); ++i)
      c.insertText(s.proposed[i], formatFor(Kind::Rejected, d));
    for (int i = lead + accepted; i < given; ++i) c.insertText(s.tokens[i], formatFor(Kind::Own, d));
  }
  for (const QString& t : s.tokens) generated_ += t;
  c.endEditBlock();
  ensureCursorVisible();
  moveCursor(QTextCursor::End);
}

}  // namespace servelab::ui
