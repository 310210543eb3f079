/* The integer kernels (qdot_kernels.h) for AVX-512 F/BW/VL with VNNI: 512-bit packed tiles. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("arch=x86-64-v4,avx512vnni")
#endif
#define QD_TABLE kvp_qk_avx512
#include "qdot_kernels.h"
