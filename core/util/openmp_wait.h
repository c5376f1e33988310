#pragma once
// OpenMP's wait policy for our processes. libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once,
// when it is loaded (before main), and by default a thread that reaches a barrier or waits for
// the next parallel region spins for a while before it sleeps. A decode step runs about 130
// parallel regions; on a CPU shared with other busy processes (a build, a browser, the GUI), the
// spinning thread holds the core the thread it waits for needs, and 2-thread steps took 5-12x as
// long as with threads that sleep at once (bench/omp_wait.py; issue 21's "bimodal" JIT timing).

namespace servelab {

// Unless the user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT set), runs this program again
// (execv of /proc/self/exe with the same argv) with OMP_WAIT_POLICY=passive, the only way to give
// libgomp a policy after it has started. Call first thing in main; returns when nothing is to be
// done, or when the exec failed (the program then runs on under libgomp's default).
void use_passive_openmp_wait(char** argv);

// The policy this process runs under, as info reports it: the variables' values, or "libgomp
// default" when neither is set.
const char* openmp_wait_policy();

}  // namespace servelab
