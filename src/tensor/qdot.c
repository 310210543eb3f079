/* The integer kernels' variants (one per instruction set, qdot_<isa>.c) and the choice among
 * them at run time: the CPU's features (cpuid), or a name (kvp_ctx_params.kernels, or the
 * environment variable KVPROBE_KERNELS for the default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/tensor.h"
#include "qdot_types.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <cpuid.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

extern const kvp_qkernels kvp_qk_amx, kvp_qk_avx512, kvp_qk_avx512_256, kvp_qk_avxvnni, kvp_qk_avx2, kvp_qk_portable;

/* Preference order: the first this CPU runs is the default. */
static const kvp_qkernels *const VARIANTS[] = {&kvp_qk_amx,     &kvp_qk_avx512, &kvp_qk_avx512_256, &kvp_qk_avxvnni,
                                               &kvp_qk_avx2,    &kvp_qk_portable};
#define N_VARIANTS (int)(sizeof VARIANTS / sizeof VARIANTS[0])

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* AMX-INT8 in cpuid, and the kernel's permission to use the tile state (Linux asks each
 * process to request it: arch_prctl ARCH_REQ_XCOMP_PERM; granting it again is harmless). */
static int amx_usable(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return 0;
#ifdef __linux__
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}
#endif

/* Can this CPU run the kernels compiled as `name`? (A compiler without target pragmas builds
 * every file as portable C, so a table's name is what it was compiled as, not its file's.) */
static int cpu_runs(const char *name) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) /* (clang builds only portable C here) */
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
               __builtin_cpu_supports("bmi2");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512vnni");
    if (!strcmp(name, "avx512-vnni") || !strcmp(name, "avx512-vnni-256")) return avx512;
    if (!strcmp(name, "amx-int8")) return avx512 && amx_usable();
    if (!strcmp(name, "avx-vnni")) return avx2 && __builtin_cpu_supports("avxvnni");
    if (!strcmp(name, "avx2")) return avx2;
#endif
    return !strcmp(name, "portable");
}

int kvp_qkernels_available(const kvp_qkernels **out, int max) {
    int n = 0;
    for (int i = 0; i < N_VARIANTS; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= !strcmp(VARIANTS[j]->name, VARIANTS[i]->name);
        if (!dup && cpu_runs(VARIANTS[i]->name) && n < max) out[n++] = VARIANTS[i];
    }
    return n;
}

const kvp_qkernels *kvp_qkernels_select(const char *name, kvp_error *err) {
    const char *env = getenv("KVPROBE_KERNELS");
    if ((!name || !strcmp(name, "auto")) && env && *env && strcmp(env, "auto")) name = env;
    const kvp_qkernels *avail[N_VARIANTS];
    int n = kvp_qkernels_available(avail, N_VARIANTS);
    if (!name || !strcmp(name, "auto")) return avail[0]; /* portable always runs */
    for (int i = 0; i < n; i++)
        if (!strcmp(avail[i]->name, name)) return avail[i];
    int known = 0;
    for (int i = 0; i < N_VARIANTS; i++) known |= !strcmp(VARIANTS[i]->name, name);
    if (err) {
        char list[128] = "";
        for (int i = 0; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", avail[i]->name);
        kvp_fail(err, KVP_E_INVALID, "kernels '%s': %s (this CPU runs: %s)", name,
                 known ? "not runnable on this CPU or not built" : "unknown variant", list);
    }
    return NULL;
}

/* The default variant (an unknown KVPROBE_KERNELS falls back to the CPU's best). */
static const kvp_qkernels *def(void) {
    const kvp_qkernels *k = kvp_qkernels_select(NULL, NULL);
    return k ? k : kvp_qkernels_select("portable", NULL);
}

int kvp_qdot_supported(enum kvp_type t) {
#define QDOT_SUPPORTED(T, S) case T:
    switch (t) {
        QDOT_TYPES(QDOT_SUPPORTED)
        return 1;
    default:
        return 0;
    }
#undef QDOT_SUPPORTED
}

const char *kvp_qdot_isa(void) { return def()->name; }
int kvp_qdot_row_multiple(void) { return def()->row_multiple(); }
size_t kvp_qact_pack_bytes(const kvp_qact *a) { return def()->pack_bytes(a); }
void kvp_qact_pack(kvp_qact *a, void *buf) { def()->pack(a, buf); }
void kvp_quantize_act_row(const float *x, int64_t n, int8_t *q, float *d) { def()->quantize_row(x, n, q, d); }
void kvp_quantize_act_row2(const float *x, int64_t n, int8_t *q, float *d, int8_t *lo) {
    def()->quantize_row2(x, n, q, d, lo);
}
void kvp_qdot_rows(enum kvp_type type, const void *weights, size_t row_bytes, int64_t r0, int64_t r1, const kvp_qact *a,
                   float *const *out) {
    def()->rows(type, weights, row_bytes, r0, r1, a, out);
}
