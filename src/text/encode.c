/* Plain-text encoders: SentencePiece-style merges by score, and BPE by merge rank with an
 * optional byte-level mapping and PCRE2 pre-tokenizer. Both merge with a binary heap of
 * candidate pairs, so a piece of n symbols costs O(n log n) — never quadratic, even for a
 * megabyte of whitespace. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_impl.h"

int tok_push(tok_out *o, int32_t id, size_t off) {
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        int32_t *ids = realloc(o->ids, (size_t)cap * sizeof *ids);
        if (!ids) return -1;
        o->ids = ids;
        uint32_t *offs = realloc(o->offs, (size_t)cap * sizeof *offs);
        if (!offs) return -1;
        o->offs = offs;
        o->cap = cap;
    }
    o->ids[o->n] = id;
    o->offs[o->n] = (uint32_t)off;
    o->n++;
    return 0;
}

/* ---- symbols and the pair heap ----------------------------------------------------------- */

typedef struct sym {
    int prev, next;
    uint32_t start, len; /* bytes in the working buffer; len 0 = merged away */
    uint32_t src;        /* source offset of the symbol's first byte */
} sym;

typedef struct pair {
    float prio;          /* lower pops first (BPE: rank; SPM: -score) */
    int left, right;
    uint32_t llen, rlen; /* lengths when queued: a mismatch means the entry is stale */
} pair;

typedef struct heap {
    pair *a;
    int n, cap;
} heap;

static int pair_before(const pair *x, const pair *y) {
    return x->prio < y->prio || (x->prio == y->prio && x->left < y->left);
}

static int heap_push(heap *h, pair p) {
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        pair *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a) return -1;
        h->a = a;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0 && pair_before(&p, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = p;
    return 0;
}

static pair heap_pop(heap *h) {
    pair top = h->a[0], last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && pair_before(&h->a[c + 1], &h->a[c])) c++;
        if (!pair_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

typedef struct merger {
    const kvp_tokenizer *t;
    const char *buf;     /* working text (escaped / byte-mapped) */
    sym *s;
    heap h;
    char *scratch;       /* "left right" keys for BPE rank lookups */
    tok_out *out;
} merger;

/* Queue the pair (l, r) if it can merge. */
static int try_pair(merger *m, int l, int r) {
    if (l < 0 || r < 0) return 0;
    const kvp_tokenizer *t = m->t;
    const sym *L = &m->s[l], *R = &m->s[r];
    float prio;
    m->out->ops++;
    if (t->algo == TOK_ALGO_SPM) {
        int32_t id = strmap_get(&t->by_text, m->buf + L->start, L->len + R->len);
        if (id < 0) return 0;
        prio = -t->score[id];
    } else {
        memcpy(m->scratch, m->buf + L->start, L->len);
        m->scratch[L->len] = ' ';
        memcpy(m->scratch + L->len + 1, m->buf + R->start, R->len);
        int32_t rank = strmap_get(&t->merge_rank, m->scratch, L->len + R->len + 1);
        if (rank < 0) return 0;
        prio = (float)rank;
    }
    return heap_push(&m->h, (pair){prio, l, r, L->len, R->len});
}

/* Emit one final symbol: its token, or its bytes as fallback tokens. */
static int emit_symbol(merger *m, const sym *S) {
    const kvp_tokenizer *t = m->t;
    int32_t id = strmap_get(&t->by_text, m->buf + S->start, S->len);
    if (id >= 0) return tok_push(m->out, id, S->src);
    if (t->byte_level) { /* one token per mapped byte (each a 1-2 byte code point here) */
        uint32_t j = 0, k = 0;
        while (j < S->len) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)m->buf + S->start + j, S->len - j, &cp);
            if (cl <= 0) cl = 1, cp = -1;
            if (cp >= 0 && cp < 324 && t->cp_to_byte[cp] >= 0) {
                int32_t b = t->byte_token[t->cp_to_byte[cp]];
                if (b >= 0 && tok_push(m->out, b, S->src + k)) return -1;
            }
            j += (uint32_t)cl;
            k++;
        }
        return 0;
    }
    /* Byte fallback (<0xXX> per byte of the working text, as SentencePiece and HF do), or
     * the unknown token when the vocabulary has no byte tokens. Merged symbols are always
     * vocabulary entries, so only single characters reach this point. */
    for (uint32_t j = 0; j < S->len; j++) {
        int32_t b = t->byte_fallback ? t->byte_token[(unsigned char)m->buf[S->start + j]] : -1;
        if (b < 0) b = t->unk;
        if (b >= 0 && tok_push(m->out, b, S->src)) return -1;
        if (b == t->unk) break; /* one unknown token per unknown character */
    }
    return 0;
}

/* Run merges over n initial symbols of m->s and emit the result. */
static int merge_and_emit(merger *m, int n) {
    for (int i = 0; i + 1 < n; i++)
        if (try_pair(m, i, i + 1)) return -1;
    while (m->h.n) {
        pair p = heap_pop(&m->h);
        sym *L = &m->s[p.left], *R = &m->s[p.right];
        m->out->ops++;
        if (L->len != p.llen || R->len != p.rlen || L->next != p.right) continue; /* stale */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) m->s[R->next].prev = p.left;
        if (try_pair(m, L->prev, p.left) || try_pair(m, p.left, L->next)) return -1;
    }
    for (int i = 0; n && i >= 0; i = m->s[i].next)
        if (emit_symbol(m, &m->s[i])) return -1;
    return 0;
}

/* Split buf[0..len) into initial symbols, one per UTF-8 character, with source offsets taken
 * from src_of[byte index]. */
static int init_symbols(merger *m, size_t len, const uint32_t *src_of) {
    int n = 0;
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)m->buf + i, (utf8proc_ssize_t)(len - i), &cp);
        if (cl <= 0) cl = 1;
        m->s[n] = (sym){n - 1, n + 1, (uint32_t)i, (uint32_t)cl, src_of[i]};
        n++;
        i += (size_t)cl;
    }
    if (n) m->s[n - 1].next = -1;
    return n;
}

static int encode_piece(const kvp_tokenizer *t, const char *buf, size_t len, const uint32_t *src_of, tok_out *out) {
    if (len == 0) return 0;
    merger m = {.t = t, .buf = buf, .out = out};
    m.s = malloc(len * sizeof *m.s);
    m.scratch = malloc(2 * len + 2);
    int rc = -1;
    if (!m.s || !m.scratch) goto done;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->by_text, buf, len);
        if (id >= 0) {
            rc = tok_push(out, id, src_of[0]);
            goto done;
        }
    }
    rc = merge_and_emit(&m, init_symbols(&m, len, src_of));
done:
    free(m.s);
    free(m.scratch);
    free(m.h.a);
    return rc;
}

/* Transform text for the merge stage: SentencePiece escaping (' ' -> U+2581) or the GPT-2
 * byte-to-code-point map. src_of[j] = source offset of working byte j. */
static int transform(const kvp_tokenizer *t, const char *text, size_t len, size_t base, char **buf, size_t *blen,
                     uint32_t **src_of) {
    size_t cap = len * 3 + 1, n = 0;
    char *b = malloc(cap);
    uint32_t *so = malloc(cap * sizeof *so);
    if (!b || !so) {
        free(b);
        free(so);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (t->byte_level) {
            int cl = (int)utf8proc_encode_char(t->byte_to_cp[c], (utf8proc_uint8_t *)b + n);
            for (int k = 0; k < cl; k++) so[n + (size_t)k] = (uint32_t)(base + i);
            n += (size_t)cl;
        } else if (t->space_to_meta && c == ' ') {
            memcpy(b + n, "\xE2\x96\x81", 3);
            so[n] = so[n + 1] = so[n + 2] = (uint32_t)(base + i);
            n += 3;
        } else {
            b[n] = (char)c;
            so[n++] = (uint32_t)(base + i);
        }
    }
    *buf = b;
    *blen = n;
    *src_of = so;
    return 0;
}

typedef struct splitter {
    const kvp_tokenizer *t;
    pcre2_match_data *md;
    tok_out *out;
} splitter;

/* Split text[0..len) with regex level lvl; matches and the gaps between them both go on to
 * the next level; the last level's fragments are encoded. */
static int split_level(splitter *sp, int lvl, const char *p, size_t len, size_t base) {
    if (len == 0) return 0;
    const kvp_tokenizer *t = sp->t;
    if (lvl == t->n_re) {
        char *buf;
        size_t blen;
        uint32_t *src_of;
        if (transform(t, p, len, base, &buf, &blen, &src_of)) return -1;
        int rc = encode_piece(t, buf, blen, src_of, sp->out);
        free(buf);
        free(src_of);
        return rc;
    }
    size_t pos = 0, last = 0;
    while (pos <= len) {
        int rc = pcre2_match(t->re[lvl], (PCRE2_SPTR)p, len, pos, PCRE2_NO_UTF_CHECK, sp->md, NULL);
        sp->out->ops++;
        if (rc < 0) break;
        /* Copy the bounds now: the recursion below reuses the match data. */
        size_t m0 = pcre2_get_ovector_pointer(sp->md)[0], m1 = pcre2_get_ovector_pointer(sp->md)[1];
        if (m0 > last && split_level(sp, lvl + 1, p + last, m0 - last, base + last)) return -1;
        if (m1 > m0 && split_level(sp, lvl + 1, p + m0, m1 - m0, base + m0)) return -1;
        last = m1 > m0 ? m1 : m0;
        size_t next = m1 > m0 ? m1 : m0 + 1;
        while (next < len && (p[next] & 0xC0) == 0x80) next++; /* empty match: step one character */
        pos = next;
    }
    return last < len ? split_level(sp, lvl + 1, p + last, len - last, base + last) : 0;
}

int tok_encode_plain(const kvp_tokenizer *t, const char *text, size_t len, size_t base, tok_out *out) {
    if (len == 0) return 0;
    splitter sp = {t, NULL, out};
    if (t->n_re && !(sp.md = pcre2_match_data_create(4, NULL))) return -1;
    int rc = split_level(&sp, 0, text, len, base);
    pcre2_match_data_free(sp.md);
    return rc;
}
