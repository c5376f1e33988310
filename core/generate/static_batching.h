#pragma once
// The course's synchronous baseline for continuous batching (lesson 3): fixed batches, each run to
// its longest request.
#include "generate/continuous_batching.h"

namespace servelab {

// The baseline: requests in arrival order in batches of options.max_batch, each batch one
// left-padded generate() run until its longest request is done (EOS does not end a batch early;
// each request keeps its tokens up to its own max, EOS or stop string). A batch starts when its
// last request has arrived. Sampling of a batch follows its first request's parameters.
BatchRunResult run_static_batching(const Model& model, const Tokenizer& tokenizer,
                                   const std::vector<BatchRequest>& requests, const BatchOptions& options,
                                   BatchSink* sink = nullptr);

}  // namespace servelab
