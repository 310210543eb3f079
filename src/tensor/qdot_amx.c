/* The integer kernels (qdot_kernels.h) for AMX-INT8 (Intel Sapphire Rapids and later): wide
 * batches on 16 x 16 tiles, the rest as avx512-vnni. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("arch=x86-64-v4,avx512vnni,amx-tile,amx-int8")
#endif
#define QD_TABLE kvp_qk_amx
#include "qdot_kernels.h"
