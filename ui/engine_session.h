#pragma once
// What the UI asks of servelab::Engine itself: loading, the model's summary, readable tokens,
// generation and padded prompts. This is the one UI file that calls Engine's members (engine
// interface changes land here); the tabs only pass the engine on to core experiment functions.
// Everything here runs on the engine thread.
#include <QString>
#include <QStringList>
#include <QtGlobal>
#include <atomic>
#include <memory>

#include "engine_types.h"

namespace servelab {
class Engine;
class GenerationSink;
}  // namespace servelab

namespace servelab::ui {

// Every call the UI makes into the engine notes its thread here: this file's functions, the engine
// host's load and answer, and JobContext::engine() for every job's body. None may run on the GUI
// thread (that would freeze the window for as long as the call takes, whatever the machine's load);
// test_main_window asserts it after runs.
struct EngineCallCount {
  qint64 total = 0;
  qint64 onGuiThread = 0;
};
void noteEngineCall();
EngineCallCount engineCallCount();

// "cpu", plus "cuda" when libtorch sees a CUDA device.
QStringList availableDevices();
// Throws servelab::Error (and std::bad_alloc) when the model cannot be loaded.
std::unique_ptr<servelab::Engine> loadEngine(const ModelRequest& request);
ModelSummary summarize(const servelab::Engine& engine, const QString& folder);
// The token's own bytes as readable text: a leading space as "␣", newlines and tabs as escapes,
// bytes that are not complete UTF-8 as <0xNN>.
QString readableToken(const servelab::Engine& engine, int id);
// Generates request.prompt's continuation, each token through sink.
GenerateSummary generateText(const servelab::Engine& engine, const GenerateRequest& request,
                             servelab::GenerationSink* sink, const std::atomic<bool>* cancel);
// Answers the conversation's last user turn (fitted to the context, request.options.max_new_tokens
// kept free for the answer), each token through sink.
ChatTurnSummary chatTurn(const servelab::Engine& engine, const ChatTurnRequest& request,
                         servelab::GenerationSink* sink, const std::atomic<bool>* cancel);
// The padded tensors of a static batch, each real token as readable text.
servelab::PaddedPrompts padPrompts(const servelab::Engine& engine, const QStringList& prompts);
// Results' token pieces as readable tokens (the Generate tab's way), not vocabulary spellings.
void makeReadable(const servelab::Engine& engine, servelab::QuantModeResult& mode);

}  // namespace servelab::ui
