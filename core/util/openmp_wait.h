#pragma once
// OpenMP's wait policy, as info reports it. libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once,
// when it is loaded (before main). A decode step runs about 130 parallel regions, so the policy
// decides how a 2-thread step fares on a CPU shared with other work (bench/omp_wait.py, README
// "CPU kernels per ISA"): spinning threads (the default) are twice as fast on a quiet machine,
// sleeping ones (passive) much faster when other processes oversubscribe the cores; no one setting
// wins everywhere, so the user's environment decides and every report says which ran.

namespace servelab {

// The variables' values, or "libgomp default" when neither is set.
const char* openmp_wait_policy();

}  // namespace servelab
