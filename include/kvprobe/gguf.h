/* kvprobe — GGUF v2/v3 reader.
 *
 * The file is mmap'd read-only; strings and tensor data point into the mapping (no copies).
 * Every count, offset, length and dimension is checked against the file size and for
 * overflow before it is used, so a truncated or hostile file yields KVP_E_FORMAT with the
 * byte offset of the offending field, never an out-of-bounds read. */
#ifndef KVPROBE_GGUF_H
#define KVPROBE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/error.h"
#include "kvprobe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum gguf_vtype {
    GGUF_VT_UINT8 = 0, GGUF_VT_INT8 = 1, GGUF_VT_UINT16 = 2, GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4, GGUF_VT_INT32 = 5, GGUF_VT_FLOAT32 = 6, GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8, GGUF_VT_ARRAY = 9, GGUF_VT_UINT64 = 10, GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
};

typedef struct gguf_str {
    const char *ptr; /* into the mapping; NOT NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    uint32_t type; /* enum gguf_vtype */
    union {
        uint64_t u;   /* UINT8..UINT64, BOOL */
        int64_t i;    /* INT8..INT64 */
        double f;     /* FLOAT32, FLOAT64 */
        gguf_str s;   /* STRING */
        struct {
            uint32_t elem_type;
            uint64_t n;
            const uint8_t *raw;  /* fixed-size elements: packed little-endian data in the mapping */
            gguf_value *elems;   /* STRING / ARRAY elements: parsed values (owned) */
        } arr;
    } v;
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value value;
    uint64_t offset; /* byte offset of the key in the file */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];          /* ne[0] is the contiguous (fastest) dimension; unused dims are 1 */
    enum kvp_type type;
    uint64_t offset;        /* relative to the data section */
    uint64_t nbytes;
    const void *data;       /* into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;   /* absolute offset of the tensor data section */
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    int owns_map;           /* 1 if map came from mmap (gguf_open) */
} gguf_file;

/* Open and fully validate a GGUF file. Returns NULL and fills err on failure. */
gguf_file *gguf_open(const char *path, kvp_error *err);
/* Parse an in-memory buffer (not copied; must outlive the result). For fuzzing and tests. */
gguf_file *gguf_parse_buffer(const void *buf, size_t size, const char *name, kvp_error *err);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Integers accept any integer type whose value fits; floats accept F32/F64.
 * Return 0 on success, KVP_E_FORMAT (with message naming the key) on type mismatch,
 * and leave *out untouched + return 1 if the key is absent (no error recorded). */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, kvp_error *err);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, kvp_error *err);
int gguf_get_f64(const gguf_file *f, const char *key, double *out, kvp_error *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, kvp_error *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, kvp_error *err);
/* Element i of a numeric array value as int64 / double (caller checks bounds and type class). */
int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i);
double gguf_arr_f64(const gguf_value *arr, uint64_t i);

int gguf_str_eq(gguf_str s, const char *c);
const char *gguf_vtype_name(uint32_t t);

#ifdef __cplusplus
}
#endif
#endif
