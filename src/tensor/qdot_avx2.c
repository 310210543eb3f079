/* The integer kernels (qdot_kernels.h) for AVX2 + FMA + F16C (maddubs). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("arch=x86-64-v3")
#endif
#define QD_TABLE kvp_qk_avx2
#include "qdot_kernels.h"
