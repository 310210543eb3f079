/* GGUF v2/v3 reader. See include/kvprobe/gguf.h for the contract.
 *
 * Parsing walks a bounds-checked cursor over the mapping. Every read names what it reads
 * and the cursor offset so errors say "file: truncated reading tensor 3 dims at offset N". */
#include "kvprobe/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_DIMS 4u
#define GGUF_MAX_ARRAY_DEPTH 8
#define GGUF_MAX_NAME 65535u

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    kvp_error *err;
} cursor;

static int truncated(cursor *c, const char *what, uint64_t need) {
    return kvp_fail(c->err, KVP_E_FORMAT,
                    "%s: truncated file: need %llu bytes for %s at offset %llu, file has %llu",
                    c->path, (unsigned long long)need, what, (unsigned long long)c->pos,
                    (unsigned long long)c->size);
}

static int take(cursor *c, uint64_t n, const char *what, const uint8_t **out) {
    if (n > c->size - c->pos) return truncated(c, what, n);
    *out = c->base + c->pos;
    c->pos += n;
    return 0;
}

static int read_u32(cursor *c, const char *what, uint32_t *v) {
    const uint8_t *p = NULL;
    if (take(c, 4, what, &p)) return c->err->code;
    memcpy(v, p, 4);
    return 0;
}

static int read_u64(cursor *c, const char *what, uint64_t *v) {
    const uint8_t *p = NULL;
    if (take(c, 8, what, &p)) return c->err->code;
    memcpy(v, p, 8);
    return 0;
}

static int read_str(cursor *c, const char *what, gguf_str *s) {
    uint64_t at = c->pos, len = 0;
    const uint8_t *p = NULL;
    if (read_u64(c, what, &len)) return c->err->code;
    if (len > c->size - c->pos)
        return kvp_fail(c->err, KVP_E_FORMAT,
                        "%s: %s at offset %llu has length %llu beyond end of file (%llu bytes left)",
                        c->path, what, (unsigned long long)at, (unsigned long long)len,
                        (unsigned long long)(c->size - c->pos));
    if (take(c, len, what, &p)) return c->err->code;
    s->ptr = (const char *)p;
    s->len = len;
    return 0;
}

static size_t scalar_size(uint32_t t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(uint32_t t) {
    static const char *names[GGUF_VT_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
    return t < GGUF_VT_COUNT ? names[t] : "invalid";
}

/* Decode a fixed-size little-endian scalar of type t at p into v. */
static void decode_scalar(uint32_t t, const uint8_t *p, gguf_value *v) {
    v->type = t;
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_BOOL: v->v.u = p[0]; break;
    case GGUF_VT_INT8: v->v.i = (int8_t)p[0]; break;
    case GGUF_VT_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u = x; break; }
    case GGUF_VT_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i = x; break; }
    case GGUF_VT_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u = x; break; }
    case GGUF_VT_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i = x; break; }
    case GGUF_VT_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f = x; break; }
    case GGUF_VT_UINT64: { uint64_t x; memcpy(&x, p, 8); v->v.u = x; break; }
    case GGUF_VT_INT64: { int64_t x; memcpy(&x, p, 8); v->v.i = x; break; }
    case GGUF_VT_FLOAT64: { double x; memcpy(&x, p, 8); v->v.f = x; break; }
    default: break;
    }
}

static void free_value(gguf_value *v) {
    if (v->type != GGUF_VT_ARRAY || !v->v.arr.elems) return;
    for (uint64_t i = 0; i < v->v.arr.n; i++) free_value(&v->v.arr.elems[i]);
    free(v->v.arr.elems);
    v->v.arr.elems = NULL;
}

static int read_value(cursor *c, uint32_t type, gguf_value *v, int depth, const char *key);

static int read_array(cursor *c, gguf_value *v, int depth, const char *key) {
    uint64_t at = c->pos;
    uint32_t et = 0;
    uint64_t n = 0;
    if (read_u32(c, "array element type", &et) || read_u64(c, "array length", &n))
        return c->err->code;
    v->type = GGUF_VT_ARRAY;
    v->v.arr.elem_type = et;
    v->v.arr.n = 0;
    v->v.arr.raw = NULL;
    v->v.arr.elems = NULL;
    if (et >= GGUF_VT_COUNT)
        return kvp_fail(c->err, KVP_E_FORMAT, "%s: key '%s': array at offset %llu has invalid element type %u",
                        c->path, key, (unsigned long long)at, et);
    size_t es = scalar_size(et);
    if (es) {
        if (n > (c->size - c->pos) / es)
            return kvp_fail(c->err, KVP_E_FORMAT,
                            "%s: key '%s': array at offset %llu claims %llu elements of %s, beyond end of file",
                            c->path, key, (unsigned long long)at, (unsigned long long)n, gguf_vtype_name(et));
        const uint8_t *p = NULL;
        if (take(c, n * es, "array data", &p)) return c->err->code;
        if (et == GGUF_VT_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (p[i] > 1)
                    return kvp_fail(c->err, KVP_E_FORMAT, "%s: key '%s': bool array element %llu at offset %llu is %u (must be 0 or 1)",
                                    c->path, key, (unsigned long long)i, (unsigned long long)(p - c->base + i), p[i]);
        v->v.arr.raw = p;
        v->v.arr.n = n;
        return 0;
    }
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return kvp_fail(c->err, KVP_E_FORMAT, "%s: key '%s': arrays nested deeper than %d at offset %llu",
                        c->path, key, GGUF_MAX_ARRAY_DEPTH, (unsigned long long)at);
    /* Each string/array element takes at least 8 bytes, which bounds n by the file size
     * before we allocate anything. */
    if (n > (c->size - c->pos) / 8)
        return kvp_fail(c->err, KVP_E_FORMAT,
                        "%s: key '%s': array at offset %llu claims %llu elements of %s, beyond end of file",
                        c->path, key, (unsigned long long)at, (unsigned long long)n, gguf_vtype_name(et));
    gguf_value *elems = calloc(n ? n : 1, sizeof *elems);
    if (!elems) return kvp_fail(c->err, KVP_E_NOMEM, "%s: out of memory for array of %llu", c->path, (unsigned long long)n);
    v->v.arr.elems = elems;
    for (uint64_t i = 0; i < n; i++) {
        v->v.arr.n = i + 1; /* so free_value releases what was parsed so far */
        if (read_value(c, et, &elems[i], depth + 1, key)) return c->err->code;
    }
    v->v.arr.n = n;
    return 0;
}

static int read_value(cursor *c, uint32_t type, gguf_value *v, int depth, const char *key) {
    memset(v, 0, sizeof *v);
    v->type = type;
    if (type == GGUF_VT_STRING) return read_str(c, "string value", &v->v.s);
    if (type == GGUF_VT_ARRAY) return read_array(c, v, depth, key);
    size_t sz = scalar_size(type);
    if (!sz)
        return kvp_fail(c->err, KVP_E_FORMAT, "%s: key '%s': invalid value type %u at offset %llu",
                        c->path, key, type, (unsigned long long)(c->pos - 4));
    const uint8_t *p = NULL;
    if (take(c, sz, "scalar value", &p)) return c->err->code;
    if (type == GGUF_VT_BOOL && p[0] > 1)
        return kvp_fail(c->err, KVP_E_FORMAT, "%s: key '%s': bool at offset %llu is %u (must be 0 or 1)",
                        c->path, key, (unsigned long long)(p - c->base), p[0]);
    decode_scalar(type, p, v);
    return 0;
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static int str_eq2(gguf_str a, gguf_str b) {
    return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* Printable copy of a possibly hostile name for error messages. */
static void safe_name(gguf_str s, char *out, size_t cap) {
    size_t n = 0;
    for (uint64_t i = 0; i < s.len && n + 5 < cap; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        out[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s.len > n && n + 4 < cap) { memcpy(out + n, "...", 3); n += 3; }
    out[n] = 0;
}

static int parse_kvs(gguf_file *f, cursor *c) {
    if (f->n_kv > (c->size - c->pos) / 12) /* key length (8) + type (4) at least */
        return kvp_fail(c->err, KVP_E_FORMAT, "%s: metadata count %llu at offset 16 exceeds what the file can hold",
                        c->path, (unsigned long long)f->n_kv);
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    if (!f->kv) return kvp_fail(c->err, KVP_E_NOMEM, "%s: out of memory", c->path);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        kv->offset = c->pos;
        uint32_t type = 0;
        if (read_str(c, "metadata key", &kv->key)) return c->err->code;
        char key[128];
        safe_name(kv->key, key, sizeof key);
        if (kv->key.len == 0 || kv->key.len > GGUF_MAX_NAME)
            return kvp_fail(c->err, KVP_E_FORMAT, "%s: metadata key %llu at offset %llu has invalid length %llu",
                            c->path, (unsigned long long)i, (unsigned long long)kv->offset, (unsigned long long)kv->key.len);
        for (uint64_t j = 0; j < i; j++)
            if (str_eq2(f->kv[j].key, kv->key))
                return kvp_fail(c->err, KVP_E_FORMAT, "%s: duplicate metadata key '%s' at offset %llu",
                                c->path, key, (unsigned long long)kv->offset);
        if (read_u32(c, "metadata value type", &type)) return c->err->code;
        if (type >= GGUF_VT_COUNT)
            return kvp_fail(c->err, KVP_E_FORMAT, "%s: key '%s': invalid value type %u at offset %llu",
                            c->path, key, type, (unsigned long long)(c->pos - 4));
        if (read_value(c, type, &kv->value, 0, key)) return c->err->code;
    }
    return 0;
}

static int parse_alignment(gguf_file *f, kvp_error *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv) return 0;
    if (kv->value.type != GGUF_VT_UINT32)
        return kvp_fail(err, KVP_E_FORMAT, "%s: general.alignment at offset %llu must be u32, is %s",
                        f->path, (unsigned long long)kv->offset, gguf_vtype_name(kv->value.type));
    uint64_t a = kv->value.v.u;
    if (a == 0 || (a & (a - 1)) != 0)
        return kvp_fail(err, KVP_E_FORMAT, "%s: general.alignment %llu at offset %llu is not a power of two",
                        f->path, (unsigned long long)a, (unsigned long long)kv->offset);
    f->alignment = (uint32_t)a;
    return 0;
}

static int parse_tensor_infos(gguf_file *f, cursor *c) {
    if (f->n_tensors > (c->size - c->pos) / 24) /* name len 8 + n_dims 4 + type 4 + offset 8 */
        return kvp_fail(c->err, KVP_E_FORMAT, "%s: tensor count %llu at offset 8 exceeds what the file can hold",
                        c->path, (unsigned long long)f->n_tensors);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors) return kvp_fail(c->err, KVP_E_NOMEM, "%s: out of memory", c->path);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t at = c->pos;
        char name[128];
        if (read_str(c, "tensor name", &t->name)) return c->err->code;
        safe_name(t->name, name, sizeof name);
        if (t->name.len == 0 || t->name.len > GGUF_MAX_NAME)
            return kvp_fail(c->err, KVP_E_FORMAT, "%s: tensor %llu at offset %llu has invalid name length %llu",
                            c->path, (unsigned long long)i, (unsigned long long)at, (unsigned long long)t->name.len);
        if (read_u32(c, "tensor n_dims", &t->n_dims)) return c->err->code;
        if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
            return kvp_fail(c->err, KVP_E_FORMAT, "%s: tensor '%s' at offset %llu has %u dimensions (1..%u allowed)",
                            c->path, name, (unsigned long long)at, t->n_dims, GGUF_MAX_DIMS);
        uint64_t nelem = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne = 0;
            if (read_u64(c, "tensor dimension", &ne)) return c->err->code;
            if (ne > (uint64_t)INT64_MAX || (ne != 0 && nelem > (uint64_t)INT64_MAX / ne))
                return kvp_fail(c->err, KVP_E_FORMAT, "%s: tensor '%s': dimension %u = %llu at offset %llu overflows",
                                c->path, name, d, (unsigned long long)ne, (unsigned long long)(c->pos - 8));
            t->ne[d] = (int64_t)ne;
            nelem *= ne;
        }
        uint32_t type = 0;
        if (read_u32(c, "tensor type", &type)) return c->err->code;
        const kvp_type_info *ti = type < KVP_TYPE_INTERNAL ? kvp_type_get(type) : NULL; /* ours, not a file's */
        if (!ti)
            return kvp_fail(c->err, KVP_E_UNSUPPORTED, "%s: tensor '%s': unknown or unsupported tensor type %u at offset %llu",
                            c->path, name, type, (unsigned long long)(c->pos - 4));
        t->type = (enum kvp_type)type;
        if (t->ne[0] % ti->block_elems != 0)
            return kvp_fail(c->err, KVP_E_FORMAT, "%s: tensor '%s': row length %lld is not a multiple of the %s block size %u",
                            c->path, name, (long long)t->ne[0], ti->name, ti->block_elems);
        uint64_t nblocks = nelem / ti->block_elems;
        if (nblocks > UINT64_MAX / ti->block_bytes)
            return kvp_fail(c->err, KVP_E_FORMAT, "%s: tensor '%s': byte size overflows", c->path, name);
        t->nbytes = nblocks * ti->block_bytes;
        if (read_u64(c, "tensor offset", &t->offset)) return c->err->code;
        for (uint64_t j = 0; j < i; j++)
            if (str_eq2(f->tensors[j].name, t->name))
                return kvp_fail(c->err, KVP_E_FORMAT, "%s: duplicate tensor name '%s' at offset %llu",
                                c->path, name, (unsigned long long)at);
    }
    return 0;
}

static int place_tensors(gguf_file *f, kvp_error *err) {
    uint64_t data_size = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char name[128];
        safe_name(t->name, name, sizeof name);
        if (t->offset % f->alignment != 0)
            return kvp_fail(err, KVP_E_FORMAT, "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
                            f->path, name, (unsigned long long)t->offset, f->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return kvp_fail(err, KVP_E_FORMAT,
                            "%s: tensor '%s': data [%llu, +%llu) lies beyond the end of the file (data section holds %llu bytes from offset %llu)",
                            f->path, name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                            (unsigned long long)data_size, (unsigned long long)f->data_offset);
        t->data = f->map + f->data_offset + t->offset;
    }
    return 0;
}

static gguf_file *parse(gguf_file *f, kvp_error *err) {
    cursor c = {.base = f->map, .size = f->size, .pos = 0, .path = f->path, .err = err};
    uint32_t magic = 0;
    if (read_u32(&c, "magic", &magic)) goto fail;
    if (magic != GGUF_MAGIC) {
        kvp_fail(err, KVP_E_FORMAT, "%s: not a GGUF file (bad magic at offset 0)", f->path);
        goto fail;
    }
    if (read_u32(&c, "version", &f->version)) goto fail;
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xFFFF) == 0)
            kvp_fail(err, KVP_E_UNSUPPORTED, "%s: GGUF version 0x%08x at offset 4 looks byte-swapped (big-endian files are not supported)",
                     f->path, f->version);
        else
            kvp_fail(err, KVP_E_UNSUPPORTED, "%s: unsupported GGUF version %u at offset 4 (2 and 3 are supported)",
                     f->path, f->version);
        goto fail;
    }
    if (read_u64(&c, "tensor count", &f->n_tensors) || read_u64(&c, "metadata count", &f->n_kv)) goto fail;
    if (parse_kvs(f, &c) || parse_alignment(f, err) || parse_tensor_infos(f, &c)) goto fail;
    uint64_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
    if (f->n_tensors > 0 && pad > c.size - c.pos) {
        truncated(&c, "padding before tensor data", pad);
        goto fail;
    }
    f->data_offset = c.pos + (pad <= c.size - c.pos ? pad : c.size - c.pos);
    if (place_tensors(f, err)) goto fail;
    return f;
fail:
    gguf_close(f);
    return NULL;
}

gguf_file *gguf_parse_buffer(const void *buf, size_t size, const char *name, kvp_error *err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "<buffer>"))) {
        free(f);
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        return NULL;
    }
    f->map = buf;
    f->size = size;
    return parse(f, err);
}

gguf_file *gguf_open(const char *path, kvp_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        kvp_fail(err, KVP_E_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        kvp_fail(err, KVP_E_IO, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        return NULL;
    }
    f->size = (uint64_t)st.st_size;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            kvp_fail(err, KVP_E_IO, "%s: mmap failed: %s", path, strerror(errno));
            free(f->path);
            free(f);
            close(fd);
            return NULL;
        }
        f->map = p;
        f->owns_map = 1;
    }
    close(fd);
    return parse(f, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    for (uint64_t i = 0; f->kv && i < f->n_kv; i++) free_value(&f->kv[i].value);
    free(f->kv);
    free(f->tensors);
    free(f->path);
    if (f->owns_map) munmap((void *)f->map, f->size);
    free(f);
}

/* ---- lookups ---------------------------------------------------------------------------- */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static int is_uint(uint32_t t) {
    return t == GGUF_VT_UINT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_UINT32 || t == GGUF_VT_UINT64;
}
static int is_sint(uint32_t t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}

static int type_error(const gguf_file *f, const gguf_kv *kv, const char *want, kvp_error *err) {
    char key[128];
    safe_name(kv->key, key, sizeof key);
    return kvp_fail(err, KVP_E_FORMAT, "%s: key '%s' at offset %llu has type %s, expected %s",
                    f->path, key, (unsigned long long)kv->offset, gguf_vtype_name(kv->value.type), want);
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (is_sint(kv->value.type)) { *out = kv->value.v.i; return 0; }
    if (is_uint(kv->value.type) && kv->value.v.u <= (uint64_t)INT64_MAX) { *out = (int64_t)kv->value.v.u; return 0; }
    return type_error(f, kv, "an integer", err);
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (is_uint(kv->value.type)) { *out = kv->value.v.u; return 0; }
    if (is_sint(kv->value.type) && kv->value.v.i >= 0) { *out = (uint64_t)kv->value.v.i; return 0; }
    return type_error(f, kv, "a non-negative integer", err);
}

int gguf_get_f64(const gguf_file *f, const char *key, double *out, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->value.type == GGUF_VT_FLOAT32 || kv->value.type == GGUF_VT_FLOAT64) { *out = kv->value.v.f; return 0; }
    return type_error(f, kv, "a float", err);
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->value.type == GGUF_VT_BOOL) { *out = (int)kv->value.v.u; return 0; }
    return type_error(f, kv, "bool", err);
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->value.type == GGUF_VT_STRING) { *out = kv->value.v.s; return 0; }
    return type_error(f, kv, "string", err);
}

int64_t gguf_arr_i64(const gguf_value *arr, uint64_t i) {
    gguf_value v = {0};
    uint32_t et = arr->v.arr.elem_type;
    decode_scalar(et, arr->v.arr.raw + i * scalar_size(et), &v);
    if (is_uint(et) || et == GGUF_VT_BOOL) return (int64_t)v.v.u;
    if (is_sint(et)) return v.v.i;
    return (int64_t)v.v.f;
}

double gguf_arr_f64(const gguf_value *arr, uint64_t i) {
    gguf_value v = {0};
    uint32_t et = arr->v.arr.elem_type;
    decode_scalar(et, arr->v.arr.raw + i * scalar_size(et), &v);
    if (is_uint(et) || et == GGUF_VT_BOOL) return (double)v.v.u;
    if (is_sint(et)) return (double)v.v.i;
    return v.v.f;
}
