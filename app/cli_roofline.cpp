#include "cli_roofline.h"

#include <cstdio>

namespace servelab {

void RooflineCommand::add_to(CLI::App* bench) {
  cmd =
      bench->add_subcommand("roofline",
                            "This machine's limits (read bandwidth, peak fp32 and int8 OP/s) and prefill and "
                            "decode steps as arithmetic intensity against achieved FLOP/s");
  cmd->add_option("--prefill-lengths", params.prefill_lengths,
                  "comma-separated prompt lengths (default 32,128,512)")
      ->delimiter(',');
  cmd->add_option("--decode-batches", params.decode_batches,
                  "comma-separated decode batch sizes (default 1,8,32)")
      ->delimiter(',');
  cmd->add_option("--decode-context", params.decode_context,
                  "positions cached per row before the decode steps");
  cmd->add_option("--decode-steps", params.decode_steps, "timed decode steps per batch size");
  cmd->add_option("--repeats", params.repeats, "timed prefills per length (medians reported)");
  cmd->add_option("--limits-cache", cache, "the machine-limits cache file (empty: measure, keep nothing)");
  cmd->add_flag("--remeasure", remeasure, "measure the machine's limits again");
  cmd->add_flag("--json", json, "compact JSON");
}

nlohmann::json RooflineCommand::run(const Engine& engine) {
  check_roofline_params(engine, params);
  const MachineLimits machine = machine_limits(engine, cache, remeasure);
  const RooflineResult r = run_roofline(engine, params, machine);
  if (!json) {
    std::printf(
        "%s, %s, %d threads: read %.1f GB/s, fp32 %.1f GFLOP/s, int8 %.1f GOP/s, ridge %.1f FLOP/byte\n",
        machine.cpu.c_str(), machine.isa.c_str(), machine.threads, machine.read_gb_s, machine.fp32_gflop_s,
        machine.int8_gop_s, machine.ridge());
    std::printf("%-22s %12s %12s %10s %12s %14s\n", "step", "GFLOP", "MB moved", "ms", "FLOP/byte",
                "GFLOP/s");
    for (const RooflinePoint& pt : r.points)
      std::printf("%-22s %12.3f %12.2f %10.2f %12.2f %14.2f\n", pt.label.c_str(), pt.flops / 1e9,
                  pt.bytes / 1e6, pt.ms, pt.intensity(), pt.flop_s() / 1e9);
  }
  return r.to_json();
}

}  // namespace servelab
