#include "cli_loadgen.h"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_usage.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/errors.h"

namespace servelab {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

void write_text_file(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << text) || !f.flush()) throw InputError(std::string(flag) + ": cannot write '" + path + "'");
}

// A writable path, checked before the run (a long run must not end in "cannot write").
void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty() && !fs::is_directory(parent))
    throw InputError(std::string(flag) + ": no folder '" + parent.string() + "'");
  if (fs::is_directory(path)) throw InputError(std::string(flag) + ": '" + path + "' is a folder");
}

void print_level(const LoadLevel& l) {
  const LoadMetrics& m = l.metrics;
  auto row = [](const char* name, double v) { std::printf("    %-34s %10.2f\n", name, v); };
  std::printf("  %s %g (%s): %lld/%lld ok in %.2f s%s\n", l.arrival == "closed" ? "concurrency" : "rate",
              l.level, l.arrival == "closed" ? "closed loop" : (l.arrival + " arrivals, requests/s").c_str(),
              static_cast<long long>(l.ok), static_cast<long long>(l.requests), l.seconds,
              l.time_bound ? " (--duration reached)" : "");
  std::printf("    %-34s %10lld\n", "Total input tokens:", static_cast<long long>(m.total_input_tokens));
  std::printf("    %-34s %10lld\n", "Total generated tokens:", static_cast<long long>(m.total_output_tokens));
  row("Request throughput (req/s):", m.request_throughput);
  if (m.request_goodput >= 0) row("Request goodput (req/s):", m.request_goodput);
  row("Output token throughput (tok/s):", m.output_throughput);
  row("Total token throughput (tok/s):", m.total_token_throughput);
  auto dist = [](const char* name, const Distribution& d) {
    if (d.count == 0) {
      std::printf("    %-6s n/a (no request had one)\n", name);
      return;
    }
    std::printf("    %-6s mean %9.2f  median %9.2f  std %9.2f ", name, d.mean, d.median, d.std);
    for (const auto& [p, v] : d.percentiles) std::printf(" %s %9.2f", percentile_key(p).c_str(), v);
    std::printf("  (ms)\n");
  };
  dist("TTFT", m.ttft);
  dist("TPOT", m.tpot);
  dist("ITL", m.itl);
  dist("E2EL", m.e2el);
  if (l.warmup_requests)
    std::printf("    %lld warm-up requests left out\n", static_cast<long long>(l.warmup_requests));
  for (const auto& [kind, n] : m.errors_by_kind)
    std::printf("    errors: %lld %s\n", static_cast<long long>(n), kind.c_str());
  if (!l.errors.empty()) std::cout << "    first error: " << one_line(l.errors.front()) << "\n";
}

// Flags that only one scenario, arrival or dataset reads: given elsewhere they are refused by name.
void check_loadgen_flags(const CLI::App& cmd, const LoadgenArgs& a) {
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  const bool sweep = a.options.scenario == "sweep";
  for (const char* flag : {"--clients", "--arrival", "--burstiness", "--requests", "--duration", "--warmup",
                           "--seed", "--dataset", "--dataset-path", "--input-len", "--range-ratio",
                           "--prefix-len", "--num-prefixes", "--suffix-len", "--percentiles", "--goodput"})
    if (given(flag) && !sweep)
      throw UsageError(std::string(flag) + " applies to --scenario sweep, not " + a.options.scenario);
  if (given("--burstiness") && a.options.arrival != "gamma")
    throw UsageError("--burstiness applies to --arrival gamma");
  if (given("--adapter") && a.options.scenario != "adapters" && !sweep)
    throw UsageError("--adapter applies to --scenario adapters or sweep");
  const std::string& d = a.options.dataset.name;
  if (!sweep || !given("--dataset")) return;
  if (given("--prompt") && d != "fixed") throw UsageError("--prompt goes with --dataset fixed, not " + d);
  for (const char* flag : {"--input-len", "--range-ratio"})
    if (given(flag) && d != "random") throw UsageError(std::string(flag) + " applies to --dataset random");
  for (const char* flag : {"--num-prefixes", "--suffix-len"})
    if (given(flag) && d != "prefix-repetition")
      throw UsageError(std::string(flag) + " applies to --dataset prefix-repetition");
  if (given("--prefix-len") && d != "random" && d != "prefix-repetition")
    throw UsageError("--prefix-len applies to --dataset random or prefix-repetition");
}

int cmd_loadgen(LoadgenArgs a, const CLI::App& cmd) {
  std::signal(SIGPIPE, SIG_IGN);
  const bool prompt_given = cmd.count("--prompt") > 0, dataset_given = cmd.count("--dataset") > 0;
  check_loadgen_flags(cmd, a);
  a.target.api = parse_load_api(a.api);
  for (const std::string& h : a.headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos || colon == 0)
      throw UsageError("--header takes 'Key: value', got '" + h + "'");
    std::string value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    a.target.headers.emplace_back(h.substr(0, colon), value);
  }
  a.options.levels.clear();
  std::stringstream levels(a.clients);
  for (std::string item; std::getline(levels, item, ',');) {
    try {
      size_t used = 0;
      a.options.levels.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::logic_error&) {
      throw UsageError("--clients takes numbers separated by commas, got '" + a.clients + "'");
    }
  }
  a.options.percentiles = parse_percentiles(a.percentiles);
  a.options.goodput = parse_goodput(a.goodput);
  // The sweep's prompts: --dataset; without it, --prompt for every request when given, else random.
  DatasetOptions& d = a.options.dataset;
  if (!dataset_given) d.name = !d.path.empty() ? "file" : prompt_given ? "fixed" : "random";
  if (!d.path.empty() && d.name != "file") throw InputError("--dataset-path goes with --dataset file");
  d.prompt = a.options.request.prompt;
  if (!a.schema_file.empty()) {
    std::ifstream f(a.schema_file);
    if (!f) throw InputError("--schema: cannot read the schema file '" + a.schema_file + "'");
    a.options.request.json_schema.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (const auto& [path, flag] : {std::pair{a.save_requests, "--save-requests"}, std::pair{a.csv, "--csv"},
                                   std::pair{a.save_result, "--save-result"}})
    check_writable(path, flag);
  check_load_options(a.target, a.options);  // before the tokenizer's load: bad options first
  std::unique_ptr<Tokenizer> tokenizer;
  if (!a.tokenizer.empty()) {
    if (!fs::exists(a.tokenizer)) throw InputError("--tokenizer: no file or folder '" + a.tokenizer + "'");
    if (fs::is_regular_file(a.tokenizer) && fs::path(a.tokenizer).extension() == ".gguf")
      tokenizer = load_gguf_tokenizer(GgufFile::open(a.tokenizer));
    else
      tokenizer = load_tokenizer(a.tokenizer);
    a.options.tokenizer = tokenizer.get();
    a.options.tokenizer_name = a.tokenizer;
  }
  const LoadReport r = run_load(a.target, a.options);
  const std::string report_json = load_report_json(r);
  const json j = json::parse(report_json);
  if (!a.save_requests.empty()) write_text_file(a.save_requests, load_requests_jsonl(r), "--save-requests");
  if (!a.csv.empty()) write_text_file(a.csv, load_requests_csv(r), "--csv");
  if (!a.save_result.empty()) write_text_file(a.save_result, j.dump(2) + "\n", "--save-result");
  if (a.json_out) {
    std::cout << report_json << "\n";
  } else {
    std::cout << "loadgen " << r.scenario << " against " << r.url << " (" << r.api
              << (r.model.empty() ? "" : ", model " + r.model) << ")\n";
    if (r.scenario == "sweep")
      std::cout << "  dataset " << j["dataset"]["name"].get<std::string>()
                << (a.options.tokenizer ? ", tokens counted with " + a.tokenizer : "") << "\n";
    for (const StreamTiming& s : r.streams) {
      std::cout << "  stream " << s.index << (s.adapter.empty() ? "" : " [" + s.adapter + "]") << ": ";
      if (!s.ok) {
        std::cout << "failed (" << load_error_kind_name(s.error_kind) << "): " << s.error << "\n";
        continue;
      }
      std::printf("%s tokens (%s) in %zu chunks, TTFT %.1f ms, TPOT %.2f ms, %.1f tokens/s, %s\n",
                  s.output_tokens >= 0 ? std::to_string(s.output_tokens).c_str() : "?",
                  token_count_source_name(s.output_tokens_source), s.chunk_ms.size(), s.ttft_ms, s.tpot_ms,
                  s.tokens_per_s(), s.finish_reason.c_str());
      std::cout << "    " << one_line(s.text) << "\n";
    }
    for (const LoadLevel& l : r.levels) print_level(l);
    std::cout << std::flush;
  }
  if (r.timed_out)
    std::cerr << "servelab-cli loadgen: stopped at --max-seconds " << a.options.max_seconds << "\n";
  int64_t unknown = 0;
  for (const StreamTiming& s : r.streams) unknown += s.ok && s.output_tokens < 0;
  for (const LoadLevel& l : r.levels) unknown += l.metrics.without_output_count;
  if (unknown > 0)
    std::cerr << "servelab-cli loadgen: " << unknown
              << " requests: the server reported no token counts; their tokens are left out of the figures "
                 "(give --tokenizer MODEL_PATH to count them)\n";
  // Every request failed: the target is not serving (the JSON still says why, per stream).
  const int64_t failed = j["failed"].get<int64_t>();
  int64_t total = static_cast<int64_t>(r.streams.size());
  for (const LoadLevel& l : r.levels) total += l.requests;
  if (total > 0 && failed == total) {
    const StreamTiming* first = !r.streams.empty() ? &r.streams.front()
                                : !r.levels.empty() && !r.levels.front().streams.empty()
                                    ? &r.levels.front().streams.front()
                                    : nullptr;
    const std::string why =
        first ? first->error + " (" + load_error_kind_name(first->error_kind) + ")" : "no request was sent";
    std::cerr << "servelab-cli loadgen: every request failed: " << one_line(why) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

void LoadgenCommand::add_to(CLI::App* app) {
  cmd = app->add_subcommand(
      "loadgen",
      "Replay the course's serving scenarios, or benchmark (sweep), a LoRAX/TGI- or OpenAI-compatible URL");
  cmd->add_option("--url", args.target.url, "the server, http(s)://host:port[/prefix]")->required();
  cmd->add_option("--api", args.api, "lorax (default), tgi, openai (/v1/completions) or openai-chat");
  cmd->add_option("--header", args.headers,
                  "'Key: value' sent with every request, e.g. an API key (repeatable)");
  cmd->add_option(
      "--ca-file", args.target.ca_file,
      "https: trust the certificate authorities in this PEM file (a self-signed server's certificate)");
  cmd->add_flag("--insecure", args.target.insecure, "https: do not verify the server's certificate");
  cmd->add_option("--model", args.target.model, "openai: the base model's name (default: the first listed)");
  cmd->add_option("--scenario", args.options.scenario,
                  "single, three_streams, adapters, structured or sweep (the benchmark)");
  cmd->add_option("--prompt", args.options.request.prompt,
                  "the prompt of the scenarios' requests (sweep: of every request, unless --dataset)");
  cmd->add_option("--max-new-tokens", args.options.request.max_new_tokens,
                  "tokens per request (sweep: the random datasets' output length)");
  cmd->add_flag("--ignore-eos", args.options.request.ignore_eos, "ask for every token of the budget");
  cmd->add_option("--adapter", args.options.adapters,
                  "adapters scenario: an adapter name (repeatable; default: those /v1/models lists); sweep: "
                  "requests name them in turn");
  cmd->add_option(
      "--schema", args.schema_file,
      "a JSON Schema file: structured output for every request (structured scenario: default Person)");
  cmd->add_option("--clients", args.clients,
                  "sweep levels, comma-separated: clients (closed) or requests per second (poisson, gamma)");
  cmd->add_option("--arrival", args.options.arrival,
                  "sweep: closed (default: clients in a loop), poisson or gamma (arrivals at a rate)");
  cmd->add_option("--burstiness", args.options.burstiness,
                  "gamma: the gaps' shape (< 1 burstier, 1 Poisson, > 1 more regular)");
  cmd->add_option("--requests", args.options.requests, "sweep: requests per level (at most)");
  cmd->add_option("--duration", args.options.level_seconds,
                  "sweep: seconds per level after which no request is sent (0: --requests bounds it)");
  cmd->add_option("--warmup", args.options.warmup,
                  "sweep: requests per level sent first with the same load and left out of the figures");
  cmd->add_option("--seed", args.options.seed, "sweep: seed of the arrivals and the dataset")
      ->check(kSeedValidator);
  cmd->add_option(
      "--dataset", args.options.dataset.name,
      "sweep: random (default), prefix-repetition, shipped (our prompt set), file or fixed (--prompt)");
  cmd->add_option("--dataset-path", args.options.dataset.path,
                  "--dataset file: JSONL ({\"prompt\": ..., \"output_tokens\": N} a line) or ShareGPT JSON");
  cmd->add_option("--input-len", args.options.dataset.input_len,
                  "random: prompt length (tokens with --tokenizer, else words)");
  cmd->add_option("--range-ratio", args.options.dataset.range_ratio,
                  "random: lengths uniform in [len*(1-r), len*(1+r)]");
  cmd->add_option("--prefix-len", args.options.dataset.prefix_len,
                  "random: a prefix every prompt shares; prefix-repetition: each prefix's length");
  cmd->add_option("--num-prefixes", args.options.dataset.num_prefixes, "prefix-repetition: shared prefixes");
  cmd->add_option("--suffix-len", args.options.dataset.suffix_len,
                  "prefix-repetition: each request's own part");
  cmd->add_option("--tokenizer", args.tokenizer,
                  "the served model's folder or .gguf: counts tokens a server does not report, and "
                  "makes random prompts of its tokens");
  cmd->add_option("--percentiles", args.percentiles, "sweep: percentiles reported (default 50,90,95,99)");
  cmd->add_option("--goodput", args.goodput,
                  "sweep: SLOs in ms, e.g. --goodput ttft:500 tpot:50 e2el:2000 (goodput: requests/s "
                  "meeting every one)");
  cmd->add_option("--max-seconds", args.options.max_seconds,
                  "the whole run at most; open streams are cut off");
  cmd->add_option("--timeout", args.target.read_timeout_s, "seconds of silence a stream may take");
  cmd->add_option("--save-requests", args.save_requests, "write every request, one JSON line each");
  cmd->add_option("--csv", args.csv, "write every request, one CSV row each");
  cmd->add_option("--save-result", args.save_result, "write the report (the --json text, indented)");
  cmd->add_flag("--json", args.json_out, "compact JSON");
}

int LoadgenCommand::run() const { return cmd_loadgen(args, *cmd); }

}  // namespace servelab
