#!/usr/bin/env python3
"""Generate the quantization golden files in tests/golden/quant/.

For each ggml type in TYPES this writes tests/golden/quant/<type>.gguf with
(GGUF shapes are ne order, numpy shapes are [rows, cols]):

  q     tensor of that type, numpy shape (3, C), GGUF ne = [C, 3]
  deq   F32 (3, C): gguf.quants.dequantize(q) -- independent reference
  y     F32 (3, C): random activations, N(0, 1)
  ref.dot      FLOAT64[3]: dot(deq[r], y[r]) in float64
  ref.abs_dot  FLOAT64[3]: sum |deq[r] * y[r]| in float64 (tolerance scale)
  ref.type     STRING: ggml type name, e.g. "Q4_K"
  ref.rows     UINT32: 3;  ref.cols UINT32: C;  ref.seed UINT32: RNG seed

C is 4 blocks of the type (128 for 32-element blocks, 1024 for K-quants,
256 for F32/F16/BF16).

Rows 0 and 1 come from gguf.quants.quantize() of N(0,1) data (row 1 has a few
large outliers) for the types gguf can quantize.  Row 2, and every row of the
types gguf cannot quantize (the K-quants), are random blocks built byte-wise:
random bytes everywhere, then each fp16 scale field (d / dmin / m) is
overwritten by a finite fp16 of moderate magnitude; row 2 also carries a
subnormal and a negative scale.  F16/BF16 row 2 carries special values (+-0,
subnormals, large finite values; never NaN/Inf).

Deterministic: fixed seeds, no wall-clock input.  Needs `gguf` and `numpy`.

Usage:  python tools/make_quant_goldens.py [--out DIR] [--check]
  --check   only verify the existing files (exit 1 on any mismatch)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES, GGUFValueType

ROWS = 3
N_BLOCKS = 4
FLOAT_COLS = 256
ARCH = "kvprobe-ref"

TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
         T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]

# Byte offsets of the fp16 scale fields inside one block, and the block size
# in bytes we expect (cross-checked against gguf's GGML_QUANT_SIZES).
#   Q4_0 {d, qs[16]}                          18
#   Q4_1 {d, m, qs[16]}                       20
#   Q5_0 {d, qh[4], qs[16]}                   22
#   Q5_1 {d, m, qh[4], qs[16]}                24
#   Q8_0 {d, qs[32] int8}                     34
#   Q2_K {scales[16], qs[64], d, dmin}        84
#   Q3_K {hmask[32], qs[64], scales[12], d}  110
#   Q4_K {d, dmin, scales[12], qs[128]}      144
#   Q5_K {d, dmin, scales[12], qh[32], qs[128]} 176
#   Q6_K {ql[128], qh[64], scales[16] int8, d} 210
FP16_FIELDS: dict[T, tuple[int, tuple[int, ...]]] = {
    T.Q4_0: (18, (0,)),
    T.Q4_1: (20, (0, 2)),
    T.Q5_0: (22, (0,)),
    T.Q5_1: (24, (0, 2)),
    T.Q8_0: (34, (0,)),
    T.Q2_K: (84, (80, 82)),
    T.Q3_K: (110, (108,)),
    T.Q4_K: (144, (0, 2)),
    T.Q5_K: (176, (0, 2)),
    T.Q6_K: (210, (208,)),
}

# fp16 bit patterns used as "special" scales in row 2.
F16_SUBNORMAL_POS = 0x0203   # ~3.07e-5
F16_SUBNORMAL_NEG = 0x8155   # ~-2.03e-5

# Special F16 values for row 2 of the F16 file (bit patterns).
F16_SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0200,
                0x0400, 0x7BFF, 0xFBFF, 0x7800, 0xF800, 0x3C00, 0xBC00]
# Special BF16 values for row 2 of the BF16 file (bit patterns):
# +-0, subnormals (exp=0), min normal, +-65280, ~+-3.0e9, +-1.
BF16_SPECIALS = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0040,
                 0x0080, 0x477F, 0xC77F, 0x4F33, 0xCF33, 0x3F80, 0xBF80]


def cols_for(qtype: T) -> int:
    if qtype in (T.F32, T.F16, T.BF16):
        return FLOAT_COLS
    block_elems, _ = GGML_QUANT_SIZES[qtype]
    return N_BLOCKS * block_elems


def can_quantize(qtype: T) -> bool:
    """True if gguf.quants.quantize implements this type (probe, not assume)."""
    if qtype in (T.F32, T.F16):
        return True
    be, _ = GGML_QUANT_SIZES[qtype]
    try:
        gguf.quants.quantize(np.zeros((1, be), dtype=np.float32), qtype)
        return True
    except NotImplementedError:
        return False


def seed_for(qtype: T) -> int:
    return 20240 + int(qtype)


def normal_rows(rng: np.random.Generator, cols: int) -> np.ndarray:
    """Rows 0 and 1 of the float input: N(0,1); row 1 gets large outliers."""
    x = rng.standard_normal((2, cols)).astype(np.float32)
    idx = rng.choice(cols, size=4, replace=False)
    x[1, idx] = (rng.choice([-1.0, 1.0], size=4) * rng.uniform(8.0, 20.0, size=4)).astype(np.float32)
    return x


def f16_bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float16).view(np.uint16)


def random_blocks(rng: np.random.Generator, qtype: T, special: bool) -> np.ndarray:
    """One row of N_BLOCKS random blocks (uint8, shape (N_BLOCKS*type_size,))."""
    type_size, fields = FP16_FIELDS[qtype]
    blocks = rng.integers(0, 256, size=(N_BLOCKS, type_size), dtype=np.uint8)
    scales = rng.standard_normal((N_BLOCKS, len(fields))) * 0.01
    if not special:
        scales = np.abs(scales)   # realistic: positive d / dmin
    bits = f16_bits(scales)       # (N_BLOCKS, n_fields) uint16
    if special:
        bits[0, 0] = F16_SUBNORMAL_POS
        bits[1, 0] = f16_bits(-abs(scales[1, 0]))
        if len(fields) == 2:
            bits[2, 1] = f16_bits(-abs(scales[2, 1]))
            bits[3, 1] = F16_SUBNORMAL_POS ^ 0x0001
        else:
            bits[2, 0] = F16_SUBNORMAL_NEG
    for b in range(N_BLOCKS):
        for j, off in enumerate(fields):
            blocks[b, off:off + 2] = np.array([bits[b, j]], dtype="<u2").view(np.uint8)
    return blocks.reshape(-1)


def make_q(qtype: T, rng: np.random.Generator, cols: int) -> np.ndarray:
    """Return q as raw little-endian bytes, shape (ROWS, bytes_per_row)."""
    if qtype == T.F32:
        x = rng.standard_normal((ROWS, cols)).astype(np.float32)
        return x.view(np.uint8).reshape(ROWS, -1)

    if qtype in (T.F16, T.BF16):
        x = normal_rows(rng, cols)
        row2 = rng.standard_normal(cols).astype(np.float32) * 2.0
        rows = gguf.quants.quantize(np.vstack([x, row2[None, :]]), qtype)
        u16 = rows.view(np.uint16).reshape(ROWS, cols).copy()
        specials = F16_SPECIALS if qtype == T.F16 else BF16_SPECIALS
        pos = rng.choice(cols, size=len(specials), replace=False)
        u16[2, pos] = np.array(specials, dtype=np.uint16)
        return u16.astype("<u2").view(np.uint8).reshape(ROWS, -1)

    if can_quantize(qtype):
        top = gguf.quants.quantize(normal_rows(rng, cols), qtype).reshape(2, -1)
        row2 = random_blocks(rng, qtype, special=True)
        return np.vstack([top, row2[None, :]]).astype(np.uint8)

    rows = [random_blocks(rng, qtype, special=False),
            random_blocks(rng, qtype, special=False),
            random_blocks(rng, qtype, special=True)]
    return np.vstack(rows).astype(np.uint8)


def build(qtype: T) -> dict:
    cols = cols_for(qtype)
    rng = np.random.default_rng(seed_for(qtype))
    q = make_q(qtype, rng, cols)
    be, ts = GGML_QUANT_SIZES[qtype]
    assert q.shape == (ROWS, cols // be * ts), (qtype.name, q.shape)
    deq = np.asarray(gguf.quants.dequantize(q, qtype), dtype=np.float32).reshape(ROWS, cols)
    if not np.all(np.isfinite(deq)):
        raise SystemExit(f"{qtype.name}: dequantized reference has NaN/Inf")
    y = rng.standard_normal((ROWS, cols)).astype(np.float32)
    prod = deq.astype(np.float64) * y.astype(np.float64)
    return dict(qtype=qtype, cols=cols, seed=seed_for(qtype), q=q, deq=deq, y=y,
                dot=[float(v) for v in prod.sum(axis=1)],
                abs_dot=[float(v) for v in np.abs(prod).sum(axis=1)])


def write(g: dict, path: Path) -> None:
    qtype = g["qtype"]
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    w.add_string("ref.type", qtype.name)
    w.add_uint32("ref.rows", ROWS)
    w.add_uint32("ref.cols", g["cols"])
    w.add_uint32("ref.seed", g["seed"])
    w.add_key_value("ref.dot", g["dot"], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
    w.add_key_value("ref.abs_dot", g["abs_dot"], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
    if qtype == T.F32:
        w.add_tensor("q", g["q"].view(np.float32).reshape(ROWS, g["cols"]))
    elif qtype == T.F16:
        w.add_tensor("q", g["q"].view(np.float16).reshape(ROWS, g["cols"]))
    else:
        w.add_tensor("q", g["q"], raw_dtype=qtype)
    w.add_tensor("deq", g["deq"])
    w.add_tensor("y", g["y"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


def _field_value(reader: gguf.GGUFReader, key: str):
    f = reader.fields[key]
    return f.contents()


def verify(g: dict, path: Path) -> list[str]:
    """Read the file back and compare with what build() produced."""
    errs: list[str] = []
    qtype, cols = g["qtype"], g["cols"]
    r = gguf.GGUFReader(str(path))
    t = {ti.name: ti for ti in r.tensors}
    if sorted(t) != ["deq", "q", "y"]:
        return [f"tensor names {sorted(t)}"]
    want = {"q": qtype, "deq": T.F32, "y": T.F32}
    for name, ti in t.items():
        if ti.tensor_type != want[name]:
            errs.append(f"{name}: type {ti.tensor_type.name} != {want[name].name}")
        if [int(v) for v in ti.shape] != [cols, ROWS]:
            errs.append(f"{name}: ne {list(ti.shape)} != {[cols, ROWS]}")
    q_raw = np.asarray(t["q"].data).view(np.uint8).reshape(ROWS, -1)
    if not np.array_equal(q_raw, g["q"]):
        errs.append("q bytes differ")
    deq = np.asarray(t["deq"].data, dtype=np.float32).reshape(ROWS, cols)
    y = np.asarray(t["y"].data, dtype=np.float32).reshape(ROWS, cols)
    if not np.array_equal(deq.view(np.uint32), g["deq"].view(np.uint32)):
        errs.append("deq differs")
    if not np.array_equal(y, g["y"]):
        errs.append("y differs")
    if not np.all(np.isfinite(deq)) or not np.all(np.isfinite(y)):
        errs.append("NaN/Inf in deq or y")
    redeq = np.asarray(gguf.quants.dequantize(q_raw, qtype), dtype=np.float32).reshape(ROWS, cols)
    if not np.array_equal(redeq.view(np.uint32), deq.view(np.uint32)):
        errs.append("dequantize(q from file) != deq")
    if _field_value(r, "general.architecture") != ARCH:
        errs.append("general.architecture")
    if _field_value(r, "ref.type") != qtype.name:
        errs.append("ref.type")
    for key in ("ref.dot", "ref.abs_dot"):
        f = r.fields[key]
        if f.types != [GGUFValueType.ARRAY, GGUFValueType.FLOAT64]:
            errs.append(f"{key}: types {f.types}")
        if [float(v) for v in f.contents()] != g[key[4:]]:
            errs.append(f"{key}: values differ")
    dot = (deq.astype(np.float64) * y.astype(np.float64)).sum(axis=1)
    if [float(v) for v in dot] != g["dot"]:
        errs.append("ref.dot != recomputed dot")
    for key, val in (("ref.rows", ROWS), ("ref.cols", cols), ("ref.seed", g["seed"])):
        if int(_field_value(r, key)) != val:
            errs.append(key)
    return errs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_out = Path(__file__).resolve().parent.parent / "tests" / "golden" / "quant"
    ap.add_argument("--out", type=Path, default=default_out)
    ap.add_argument("--check", action="store_true", help="verify existing files only")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    for qtype, (ts, _) in FP16_FIELDS.items():
        if GGML_QUANT_SIZES[qtype][1] != ts:
            raise SystemExit(f"{qtype.name}: block size {GGML_QUANT_SIZES[qtype]} != {ts}")

    total, bad = 0, 0
    for qtype in TYPES:
        g = build(qtype)
        path = args.out / f"{qtype.name.lower()}.gguf"
        if not args.check:
            write(g, path)
        errs = verify(g, path) if path.exists() else ["missing"]
        size = path.stat().st_size if path.exists() else 0
        total += size
        how = "quantize" if can_quantize(qtype) and qtype not in (T.F32,) else "random"
        status = "OK" if not errs else "FAIL: " + "; ".join(errs)
        print(f"{path.name:10s} C={g['cols']:5d} rows0-1={how:8s} {size:6d} B  "
              f"dot={['%.6g' % d for d in g['dot']]}  {status}")
        bad += bool(errs)
    from importlib.metadata import version
    print(f"total {total} bytes in {len(TYPES)} files (gguf {version('gguf')}, numpy {np.__version__})")
    if total > 200_000:
        print("ERROR: goldens exceed 200 KB", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
