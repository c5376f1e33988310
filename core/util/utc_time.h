#pragma once
// The current time as reports stamp it. Torch-free.
#include <string>

namespace servelab {

// Now, in UTC, as ISO 8601 to the second: "2026-11-27T11:06:57Z".
std::string utc_now_iso8601();

}  // namespace servelab
