#!/usr/bin/env python3
"""Independent float64 numpy forward pass over the tiny GGUF fixtures.

It reads ONLY the GGUF model file (gguf.GGUFReader) -- never transformers --
and checks its logits against the transformers reference stored in
tests/golden/<model>.ref.gguf.  Agreement to < 1e-4 proves that the GGUF
conventions written by tools/make_tiny_models.py are the ones spelled out
below, i.e. the math the C engine must implement.

Usage:  tools/.venv/bin/python tools/numpy_forward.py [tiny-llama-f32 ...]
        (no argument: all eight fixtures)

Conventions (llama.cpp semantics):
  Tensors: a GGUF tensor with ne = [in, out] is a row-major [out, in] matrix W;
    y = W @ x.  token_embd is [n_vocab, n_embd]; row t is token t's embedding.
    Q8_0: blocks of 32 consecutive elements along ne0 (a row), each block is
    34 bytes = fp16 scale d, then 32 int8 q; value = d * q.

  RMSNorm (all archs): y = x / sqrt(mean(x^2) + eps) * w  (w read from file;
    for gemma3 the file already holds 1 + w_hf).

  llama: x = embd[tok]; per layer:
      h = norm(x, attn_norm); q = Wq h; k = Wk h; v = Wv h   (q/k rows permuted)
      RoPE "normal" (adjacent pairs (2i, 2i+1) of each head):
        theta_i = pos * base^(-2i/d) / rope_freqs[i],  i = 0 .. d/2-1
        (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)
      attention: causal, scale 1/sqrt(head_dim), GQA: q head h uses kv head
        h // (n_head / n_head_kv); softmax; o = Wo concat(heads)
      x += o;  h = norm(x, ffn_norm);  x += Wdown (silu(Wgate h) * (Wup h))
    logits = Woutput norm(x, output_norm), Woutput = token_embd when tied.

  qwen3: as llama but no permutation and no rope_freqs; after the q/k
    projections each head vector (head_dim 32) is RMS-normed with
    attn_q_norm / attn_k_norm (eps = layer_norm_rms_epsilon), THEN RoPE in
    NEOX mode (pairs (i, i + d/2), theta_i = pos * base^(-2i/d)).
    q width = n_head*head_dim = 128 != n_embd 64; attn_output is [64, 128].
    Untied: output.weight present.

  qwen2: as llama but no permutation and no rope_freqs, q/k/v biases added
    after the projections (attn_{q,k,v}.bias), no q/k norms, NEOX RoPE.
    Tied here: no output.weight.

  gemma3: x = embd[tok] * sqrt(n_embd) (=8.0 exactly here);
    layer il is global ("full_attention") iff (il + 1) % 6 == 0, else local
    ("sliding_attention"): 7 layers -> L L L L L G L.
    per layer:
      h = norm(x, attn_norm); q,k,v; q = norm_head(q, attn_q_norm);
      k = norm_head(k, attn_k_norm); NEOX RoPE with base = rope.freq_base_swa
      (10000) on local layers and rope.freq_base (1e6) on global layers;
      scores scaled by query_pre_attn_scalar^-0.5 (= 32^-0.5 = 1/sqrt(head_dim)
      here; llama.cpp uses 1/sqrt(head_dim) for all non-27B gemma3);
      mask: global causal (k_pos <= q_pos); local additionally requires
      q_pos - k_pos < sliding_window (window 8 => the current token + 7 before);
      o = Wo attn;  x += norm(o, post_attention_norm)
      h = norm(x, ffn_norm); f = Wdown(gelu_tanh(Wgate h) * Wup h)
      x += norm(f, post_ffw_norm)
    logits = token_embd norm(x, output_norm)  (tied, no softcapping)
    gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType, GGUFReader

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN = ROOT / "tests" / "golden"
TOL = 1e-4


def field(r: GGUFReader, key: str, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def dequant_q8_0(raw: np.ndarray, n_per_row: int) -> np.ndarray:
    """Q8_0 by hand: per 32 values, fp16 d then 32 x int8."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, 34)
    d = raw[:, :2].copy().view(np.float16).astype(np.float64)       # [n_blocks, 1]
    q = raw[:, 2:].copy().view(np.int8).astype(np.float64)          # [n_blocks, 32]
    return (d * q).reshape(-1, n_per_row)


def load_model(path: Path):
    r = GGUFReader(str(path))
    arch = field(r, "general.architecture")
    hp = {
        "arch": arch,
        "n_embd": field(r, f"{arch}.embedding_length"),
        "n_layer": field(r, f"{arch}.block_count"),
        "n_head": field(r, f"{arch}.attention.head_count"),
        "n_head_kv": field(r, f"{arch}.attention.head_count_kv"),
        "head_dim": field(r, f"{arch}.attention.key_length"),
        "eps": float(field(r, f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_dim": field(r, f"{arch}.rope.dimension_count"),
        "base": float(field(r, f"{arch}.rope.freq_base")),
        "base_swa": float(field(r, f"{arch}.rope.freq_base_swa", 10000.0)),
        "window": field(r, f"{arch}.attention.sliding_window"),
        "n_vocab": field(r, f"{arch}.vocab_size"),
    }
    W = {}
    for t in r.tensors:
        ne = [int(x) for x in t.shape]                # ggml order: ne0 = row length
        if t.tensor_type == GGMLQuantizationType.F32:
            a = np.asarray(t.data, dtype=np.float64).reshape(ne[::-1])
        elif t.tensor_type == GGMLQuantizationType.Q8_0:
            a = dequant_q8_0(t.data, ne[0]).reshape(ne[::-1])
            ref = gguf.quants.dequantize(np.asarray(t.data), GGMLQuantizationType.Q8_0)
            assert np.array_equal(a, ref.astype(np.float64).reshape(a.shape)), t.name
        else:
            raise NotImplementedError(t.tensor_type)
        W[t.name] = a
    return hp, W


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, pos: np.ndarray, base: float, neox: bool, freq_factors=None) -> np.ndarray:
    """x: [n_tok, n_heads, d]."""
    d = x.shape[-1]
    i = np.arange(d // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / d)
    if freq_factors is not None:
        inv = inv / freq_factors
    th = pos[:, None, None].astype(np.float64) * inv[None, None, :]      # [n, 1, d/2]
    c, s = np.cos(th), np.sin(th)
    if neox:
        x0, x1 = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(hp, W, tokens: list[int]) -> np.ndarray:
    arch = hp["arch"]
    n = len(tokens)
    pos = np.arange(n)
    nh, nkv, hd, eps = hp["n_head"], hp["n_head_kv"], hp["head_dim"], hp["eps"]
    assert hp["rope_dim"] == hd
    x = W["token_embd.weight"][np.asarray(tokens)].copy()
    if arch == "gemma3":
        x *= math.sqrt(hp["n_embd"])
    qk, kk = np.meshgrid(pos, pos, indexing="ij")                 # [q, k]
    causal = kk <= qk
    for il in range(hp["n_layer"]):
        b = f"blk.{il}."
        h = rmsnorm(x, W[b + "attn_norm.weight"], eps)
        q = (h @ W[b + "attn_q.weight"].T).reshape(n, nh, hd)
        k = (h @ W[b + "attn_k.weight"].T).reshape(n, nkv, hd)
        v = (h @ W[b + "attn_v.weight"].T).reshape(n, nkv, hd)
        if arch == "qwen2":
            q = q + W[b + "attn_q.bias"].reshape(nh, hd)
            k = k + W[b + "attn_k.bias"].reshape(nkv, hd)
            v = v + W[b + "attn_v.bias"].reshape(nkv, hd)
        mask = causal
        if arch == "llama":
            q = rope(q, pos, hp["base"], neox=False, freq_factors=W.get("rope_freqs.weight"))
            k = rope(k, pos, hp["base"], neox=False, freq_factors=W.get("rope_freqs.weight"))
            scale = 1.0 / math.sqrt(hd)
        else:
            if arch != "qwen2":
                q = rmsnorm(q, W[b + "attn_q_norm.weight"], eps)
                k = rmsnorm(k, W[b + "attn_k_norm.weight"], eps)
            base = hp["base"]
            scale = 1.0 / math.sqrt(hd)
            if arch == "gemma3":
                is_global = (il + 1) % 6 == 0
                if not is_global:
                    base = hp["base_swa"]
                    mask = causal & (qk - kk < hp["window"])
                scale = 32 ** -0.5   # query_pre_attn_scalar (not stored in GGUF; == head_dim here)
            q = rope(q, pos, base, neox=True)
            k = rope(k, pos, base, neox=True)
        grp = nh // nkv
        o = np.empty((n, nh, hd))
        for hh in range(nh):
            kv = hh // grp
            s = (q[:, hh, :] @ k[:, kv, :].T) * scale
            s = np.where(mask, s, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            o[:, hh, :] = p @ v[:, kv, :]
        o = o.reshape(n, nh * hd) @ W[b + "attn_output.weight"].T
        if arch == "gemma3":
            o = rmsnorm(o, W[b + "post_attention_norm.weight"], eps)
        x = x + o
        h = rmsnorm(x, W[b + "ffn_norm.weight"], eps)
        g = h @ W[b + "ffn_gate.weight"].T
        u = h @ W[b + "ffn_up.weight"].T
        act = gelu_tanh(g) if arch == "gemma3" else silu(g)
        f = (act * u) @ W[b + "ffn_down.weight"].T
        if arch == "gemma3":
            f = rmsnorm(f, W[b + "post_ffw_norm.weight"], eps)
        x = x + f
    x = rmsnorm(x, W["output_norm.weight"], eps)
    out_w = W.get("output.weight", W["token_embd.weight"])
    return x @ out_w.T


def check(name: str) -> float:
    hp, W = load_model(FIXTURES / f"{name}.gguf")
    r = GGUFReader(str(GOLDEN / f"{name}.ref.gguf"))
    assert field(r, "ref.model_file") == f"{name}.gguf"
    prompt = [int(t) for t in field(r, "ref.prompt_tokens")]
    gen = [int(t) for t in field(r, "ref.generated_tokens")]
    ref = np.asarray(r.get_tensor(0).data, dtype=np.float64)
    n_vocab = int(field(r, "ref.n_vocab"))
    assert ref.shape == (len(prompt) + len(gen) - 1, n_vocab) and n_vocab == hp["n_vocab"]
    logits = forward(hp, W, prompt + gen[:-1])
    err = float(np.max(np.abs(logits - ref)))
    greedy = logits[len(prompt) - 1:].argmax(-1).tolist()
    ok = err < TOL and greedy == gen
    print(f"{name:18s} max|numpy - HF| = {err:.3e}  greedy match = {greedy == gen}  {'OK' if ok else 'FAIL'}")
    return err if ok else float("inf")


def main(argv: list[str]) -> int:
    names = argv or [f"tiny-{a}-{q}" for a in ("llama", "qwen2", "qwen3", "gemma3") for q in ("f32", "q8_0")]
    bad = [n for n in names if not check(n) < TOL]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
