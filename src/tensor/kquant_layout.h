/* Where each quant of a K-quant super-block (256 elements = 8 blocks of 32) lives, in the file
 * layout (ggml's) and in kvprobe's lane = block layout (KVP_TYPE_*_LB, made at load).
 *
 * Lane = block: the quants are regrouped so that the 32-byte vector i (i = 0..7) of unpacked
 * quants holds, in its 4-byte lane k, elements 4i .. 4i + 3 of block k. One dot instruction per
 * vector then sums every block in its own lane, and 8 of them give the 8 block sums with no
 * reduction across lanes. The 4-bit planes hold vector 2v in the low and 2v + 1 in the high
 * nibbles of their 32-byte row v; Q6_K's 2-bit plane holds vector 4h + m in bits 2m of row h;
 * Q6_K's 16 scales are stored half-major (half 0 of blocks 0..7, then half 1), so a Q6_K
 * super-block keeps its size. Q4_K's 6-bit scales and mins, packed into 12 bytes in the file,
 * are stored as 16 bytes (8 scales, then 8 mins): the decode kernel converts them with one
 * widening load each instead of a dozen scalar bit operations per super-block and row (a fifth
 * of its time), for 4 more bytes in 144.
 *
 * Used by quant.c (repack, dequantization) and the kernels (qdot_kernels.h), so that the
 * layout is defined once. */
#ifndef KVPROBE_KQUANT_LAYOUT_H
#define KVPROBE_KQUANT_LAYOUT_H

typedef struct kq_pos {
    int byte;  /* from the start of the super-block */
    int shift; /* of the field within that byte */
} kq_pos;

/* Element e's byte in a 4-bit plane that starts at byte `at`. */
static inline kq_pos kq_nibble(int e, int lb, int at) {
    int blk = e >> 5, l = e & 31, i = l >> 2;
    if (lb) return (kq_pos){at + 32 * (i >> 1) + 4 * blk + (l & 3), 4 * (i & 1)};
    return (kq_pos){at + 32 * (blk >> 1) + l, 4 * (blk & 1)};
}

/* Q4_K: d, dmin, scales[12], qs[128]; lane = block: d, dmin, sc[8], mn[8], qs[128]. */
#define KQ4_LB_BYTES 148
static inline int q4k_lb_scale(int blk) { return 4 + blk; }
static inline int q4k_lb_min(int blk) { return 12 + blk; }
/* The quant (4 bits) of element e. */
static inline kq_pos q4k_quant(int e, int lb) { return kq_nibble(e, lb, lb ? q4k_lb_min(8) : 16); }

/* Q6_K: ql[128], qh[64], scales[16], d; the low 4 and the high 2 bits of element e's quant. */
static inline kq_pos q6k_low(int e, int lb) {
    if (lb) return kq_nibble(e, 1, 0);
    int blk = e >> 5, half = blk >> 2, quarter = blk & 3;
    return (kq_pos){64 * half + 32 * (quarter & 1) + (e & 31), 4 * (quarter >> 1)};
}
static inline kq_pos q6k_high(int e, int lb) {
    int blk = e >> 5, l = e & 31, i = l >> 2;
    if (lb) return (kq_pos){128 + 32 * (i >> 2) + 4 * blk + (l & 3), 2 * (i & 3)};
    return (kq_pos){128 + 32 * (blk >> 2) + l, 2 * (blk & 3)};
}
/* The byte of Q6_K's signed scale of half h (16 elements) of block blk. */
static inline int q6k_scale(int blk, int h, int lb) { return 192 + (lb ? 8 * h + blk : 2 * blk + h); }

#endif
