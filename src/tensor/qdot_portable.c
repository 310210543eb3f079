/* The integer kernels (qdot_kernels.h) for plain C (SSE2 at most, by the compiler). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("arch=x86-64")
#endif
#define QD_TABLE kvp_qk_portable
#include "qdot_kernels.h"
