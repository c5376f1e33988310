#pragma once
// Plain structs that travel between the GUI thread and the engine thread (captured in posted calls,
// carried by EngineJob's signals). They hold Qt value types or core's torch-free structs only.
#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>

#include "experiments/adapter_serving.h"
#include "experiments/batch_sweep.h"
#include "experiments/chunked_prefill.h"
#include "experiments/course_benchmark.h"
#include "experiments/kv_cache_timing.h"
#include "experiments/multi_lora.h"
#include "experiments/quantization.h"
#include "experiments/speculative.h"
#include "experiments/sync_vs_continuous.h"
#include "generate/continuous_batching.h"
#include "generate/conversation.h"
#include "generate/generation.h"

namespace servelab::ui {

// What to load: a Hugging Face folder or a .gguf file; with neither, the built-in SmolLM2, or the
// GPT-2 small shape with random weights when demo is set.
struct ModelRequest {
  QString folder;  // a folder or a .gguf file
  bool demo = false;
  QString device = QStringLiteral("cpu");
  QString dtype = QStringLiteral("fp32");
  int threads = 0;         // 0: libtorch's default
  bool cudaGraphs = true;  // decode steps as CUDA graphs on a GPU (ignored on the CPU)
};

// One matrix of every block, as Hugging Face and PEFT name it ("self_attn.q_proj", "attn.c_attn").
struct ProjectionShape {
  QString name;
  qint64 in = 0, out = 0;
};

struct ModelSummary {
  QString name;
  QString folder;                // the folder or .gguf file; empty for the built-in models
  bool demo = false;             // the GPT-2 small shape with random weights
  bool builtin = false;          // the built-in SmolLM2-135M-Instruct (its adapters fit it)
  QString architecture, format;  // "gpt2" / "llama"; "random", "safetensors" or "gguf"
  QString chatFamily;            // the chat template's family ("chatml", ...); empty: none or unrecognised
  QString caveat;                // shown beside any generated text ("random weights: ...")
  QString device, dtype, tokenizer;
  int threads = 0;
  qint64 parameters = 0, weightBytes = 0;
  int layers = 0, heads = 0, width = 0, positions = 0, vocab = 0;
  int inner = 0;                       // width of the MLP's hidden layer (4 x width for GPT-2)
  QList<ProjectionShape> projections;  // in the order the architecture computes them
  int dtypeBytes = 4;
  // The CPU and the ISA our kernels dispatch to (engine info's "cpu"), and what each path runs.
  QString cpuModel, cpuIsa;
  QStringList cpuKernels;  // "fp32_blocked: AVX-512 GEMV ...", one per path
  // Whether decode steps replay CUDA graphs, and why not (engine info's "cuda_graphs").
  bool cudaGraphs = false;
  QString cudaGraphsWhyNot;
  bool valid() const { return !name.isEmpty(); }
};

struct GenerateRequest {
  QString prompt;
  bool chat = false;                  // the prompt is one user turn, formatted with the model's chat template
  servelab::GenerateOptions options;  // options.cancel is set by the worker
};

struct TopCandidate {
  int id = 0;
  QString text;  // the token as a readable piece (spaces and control bytes made visible)
  double probability = 0, logit = 0;
};

struct TokenInfo {
  qint64 step = 0;
  int id = 0;
  QString piece;    // UTF-8 text this token completed (empty inside a multi-byte character)
  QString display;  // the token alone, readable
  double stepMs = 0;
  QVector<TopCandidate> top;
};

struct GenerateSummary {
  QVector<int> promptIds;
  QVector<int> generatedIds;
  QString promptText, text;
  QVector<double> stepMs;
  double totalMs = 0;
  double ttftMs = 0;                 // step 0: prefill plus the first token
  double decodeTokensPerSecond = 0;  // tokens after the first over their summed step time
  QString finishReason;
  bool cancelled = false;
};

// One chat turn: the conversation, ending with the user turn to answer, in the model's own chat
// template; the oldest exchanges are left out when it outgrows the context (fit_chat_prompt).
struct ChatTurnRequest {
  servelab::Conversation conversation;
  servelab::GenerateOptions options;  // options.cancel is set by the worker
};

struct ChatTurnSummary {
  GenerateSummary generation;  // promptText: the template's text of the turns the model read
  qint64 context = 0;          // the model's context, in tokens
  qint64 droppedExchanges = 0;
  QString droppedNote;  // what the context policy left out, in words; empty when nothing
};

// One step of a speculative run as the tab shows it: what the drafter proposed, how many of them
// the target accepted, and the tokens the step gave (the accepted proposals, then the target's
// own), every token as readable text.
struct SpecStepInfo {
  qint64 step = 0;
  double ms = 0;
  QStringList proposed;  // empty: nothing proposed (plain decode, or the prefill's first token)
  int accepted = 0;
  QStringList tokens;
};

// Named values shown as a two-column table (the machine in About and in the session report).
using Facts = QList<QPair<QString, QString>>;

// Tokens per second over the decode steps (every step after the first); 0 when there are none.
double decodeTokensPerSecond(const QVector<double>& stepMs);

}  // namespace servelab::ui
