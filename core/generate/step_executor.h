#pragma once
// The executor of a scheduler plan (generate/scheduler_core.h): it runs the plan's decode rows and
// prompt chunks on a KV memory's model, whatever the layout, and returns the logits to pick from.
// The continuous-batching experiments and the server run every step through it.
#include <ATen/ATen.h>

#include <vector>

#include "generate/kv_memory_manager.h"
#include "generate/scheduler_core.h"

namespace servelab {

// One forward pass feeding every decode row of the plan its last token (and its proposed tokens,
// when it has any): logits in plan order, one row per plain decode and 1 + k rows per decode
// verifying k proposals (decode_rows()); undefined when the plan has none.
at::Tensor run_decodes(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan);

// One forward pass over the plan's prompt chunks: logits of the chunks that end their prompt
// ([those chunks, vocab], in plan order); undefined when none does. Whole prompts admitted by the
// plan run through the layout's prefill() (slot KV's single-request and left-padded paths, the
// course's merge/filter), anything else through extend().
at::Tensor run_prefills(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan);

// Where each decode row's logits start in run_decodes()' result, and one past the last.
std::vector<int64_t> decode_rows(const SchedulePlan& plan);

// The logits of a plan's decode rows (decode_rows() layout) and of its chunks that end their
// prompt (prefill_sampled_ids() order).
struct StepLogits {
  at::Tensor decode, prefill;
};
// Whether run_mixed() serves the plan: decode rows and prompt chunks in one step of a layout that
// runs both through extend() (chunked prefill's steps on slot and paged KV).
bool runs_mixed(const KvMemoryManager& kv, const SchedulePlan& plan);
// One forward pass for the plan's decode rows and prompt chunks together, as vLLM's V1 engine runs
// a step: the linear layers read their weights once for both.
StepLogits run_mixed(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan);

// The requests whose next token the plan's chunks give, in the rows of run_prefills().
std::vector<int64_t> prefill_sampled_ids(const SchedulePlan& plan);

}  // namespace servelab
