#pragma once
// `servelab-cli bench ...` and `quantize`: the timing experiments, printed as a table or as JSON.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_common.h"
#include "experiments/batch_sweep.h"
#include "experiments/chunked_prefill.h"
#include "experiments/course_benchmark.h"
#include "experiments/kv_cache_timing.h"
#include "experiments/paged_kv.h"
#include "experiments/quantization.h"
#include "experiments/sync_vs_continuous.h"

namespace servelab {

// bench paged-kv: its options, registered on the bench command, and the run.
struct PagedKvCli {
  PagedKvParams p;
  bool json = false, no_solo = false;
  CLI::App* cmd = nullptr;
};

// Each experiment's run: bounds checked before the model loads, a table or JSON on stdout, the exit
// code.
int cmd_bench_kv(const ModelArgs& m, const KvCacheTimingParams& p, bool as_json);
int cmd_bench_sweep(const ModelArgs& m, BatchSweepParams p, const std::string& sizes, bool sizes_given,
                    bool as_json);
int cmd_bench_sync_vs_continuous(const ModelArgs& m, const SyncVsContinuousParams& p, bool as_json);
int cmd_bench_course(const ModelArgs& m, const CourseBenchmarkParams& p, bool as_json);
int cmd_bench_chunked_prefill(const ModelArgs& m, const ChunkedPrefillParams& p, bool as_json);
void add_bench_paged_kv(CLI::App* bench, ModelArgs& margs, PagedKvCli& a);
int cmd_bench_paged_kv(const ModelArgs& m, PagedKvCli& a);
int cmd_quantize(const ModelArgs& m, QuantizationParams p, const std::string& modes, bool modes_given,
                 bool as_json);

}  // namespace servelab
