#pragma once
// Bounds on what a user can ask for (queue lengths, batch sizes, adapters, ranks, repeats, threads,
// how long a run may wait), checked before anything is allocated: a huge count is refused with a
// message naming it and its limit instead of failing later with std::bad_alloc after gigabytes.
// Torch-free: the GUI's forms use the same limits as the engine and the CLI.
#include <cstdint>
#include <string>

namespace servelab::limits {

inline constexpr int64_t kMaxRequests = 100000;  // requests or queries in one queue (the course: 100)
// Rows of one batch, running requests of a scheduler: memory decides first (check_fits_in_memory);
// this bound only keeps that estimate's arithmetic far from overflow.
inline constexpr int64_t kMaxBatch = 1000000;
// Tokens of a prompt or a generation, before the check against the model's context.
inline constexpr int64_t kMaxTokens = 1000000;
inline constexpr int64_t kMaxAdapters = 4096;   // adapters of one run
inline constexpr int64_t kMaxRank = 1024;       // LoRA rank of a random adapter
inline constexpr int64_t kMaxRepeats = 1000;    // timing repeats
inline constexpr int64_t kMaxSteps = 100000;    // decode steps, forward samples of one measurement
inline constexpr int64_t kMaxPrompts = 4096;    // prompts of one command
inline constexpr double kMaxWaitSeconds = 600;  // the span of a queue's arrivals

// Threads libtorch may use: 4 per hardware thread (more only costs memory and start-up time).
int64_t max_threads();

// InputError "<what> must be at least <lo>, got <value>" (or "at most <hi>") unless lo <= value <= hi.
void check_range(const std::string& what, int64_t value, int64_t lo, int64_t hi);
// The same for a real number; NaN and infinities are refused too.
void check_range(const std::string& what, double value, double lo, double hi);

// Bytes of memory this process could still allocate: the OS's MemAvailable, lowered to what the
// address-space limit (ulimit -v) leaves; 0 when unknown.
int64_t host_memory_budget_bytes();
// InputError naming `what`, its estimated bytes and the budget when bytes exceed the budget.
void check_fits_in_memory(const std::string& what, int64_t bytes);

}  // namespace servelab::limits
