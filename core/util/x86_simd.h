#pragma once
// Our hand-written kernels compile their x86 intrinsics per function (target attributes) in an
// x86-64 baseline build, so that one binary carries every ISA's path and cpu_features picks one at
// run time. SERVELAB_X86 says whether this compiler and target can (GCC or Clang on x86-64; then
// <immintrin.h> is included); elsewhere it is 0 and only the portable paths exist.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SERVELAB_X86 1
#else
#define SERVELAB_X86 0
#endif
