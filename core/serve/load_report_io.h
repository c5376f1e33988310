#pragma once
// A load run saved as JSON read back into a LoadReport: the text load_report_json writes (servelab-cli
// loadgen --save-result and --json, the Serving tab's Save run and its script --report, which adds
// fields of its own), so that the Serving tab can reopen a run and draw it beside another. A sweep's
// file holds each level's figures (percentiles, throughput, goodput) but not its requests; a
// scenario's holds every stream with its times. Torch- and Qt-free.
#include <string>
#include <string_view>

#include "serve/load_generator.h"

namespace servelab {

// Files larger than this are refused rather than read.
constexpr size_t kMaxSavedRunBytes = 256u << 20;

// The report in `text`. InputError saying why for anything else: text that is not JSON, JSON that is
// no saved load run (no scenario, or neither streams nor levels), or a field of the wrong type (named
// with its place, e.g. "levels[2].tokens_per_s is not a number").
LoadReport parse_load_report_json(std::string_view text);

// The report in the file at `path` (InputError naming the file: unreadable, too large, or as above).
LoadReport read_load_report_file(const std::string& path);

}  // namespace servelab
