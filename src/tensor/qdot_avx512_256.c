/* The integer kernels (qdot_kernels.h) for AVX-512 VNNI at 256 bits: no 512-bit tiles, for
 * CPUs that execute 512-bit operations as two halves. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("arch=x86-64-v4,avx512vnni")
#endif
#define QD_NO_512 1
#define QD_TABLE kvp_qk_avx512_256
#include "qdot_kernels.h"
