/* The integer kernels (qdot_kernels.h) for AVX-VNNI (VEX-coded, 256 bits). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("arch=x86-64-v3,avxvnni")
#endif
#define QD_TABLE kvp_qk_avxvnni
#include "qdot_kernels.h"
