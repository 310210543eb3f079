"""kvprobe: an LLM inference engine whose KV cache is an editable object, from Python.

The engine is kvprobe's C library (built into this package at install time), called through
ctypes; nothing runs in a subprocess. Typical use::

    import kvprobe
    m = kvprobe.Model("models/qwen2.5-coder-0.5b-instruct.gguf", threads=2)
    p = m.tokenize("Write a function that reverses a string.", chat=True)
    kv = m.prefill(p.ids[:-1])                 # the prompt minus its last token
    kv.splice("zero", layer_from=12, n_prompt=len(p.ids), segments=p.segments)
    logits = m.decode(kv, p.ids[-1:])          # [1, n_vocab]
    keys = kv.k(20)                            # numpy [positions, kv_heads, head_dim], post-RoPE

Errors raise KvprobeError carrying the engine's message (file, field, offset).
"""
from __future__ import annotations

import ctypes
import glob
import json
import os
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import numpy as np

__all__ = ["Model", "KVCache", "Tokens", "KvprobeError", "sweep", "sweep_prompts", "load_records", "CONDITIONS",
           "SEGMENTS"]

CONDITIONS = ("clean", "blank", "zero", "mean", "noise", "other", "drop", "drop-content")
SEGMENTS = ("scaffold", "system", "user", "assistant")  # kvp_segment order


class KvprobeError(RuntimeError):
    """An error reported by the engine: `code` is its kvp_status (1 I/O, 2 format, 3
    unsupported, 4 memory, 5 invalid argument), the message names file, field and offset."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# ---- the library ------------------------------------------------------------------------------

def _find_library() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("KVPROBE_LIBRARY")
    if env:
        return env
    for pat in ("_native*.so", "_native*.pyd", "_native*.dylib"):
        hits = sorted(glob.glob(os.path.join(here, pat)))
        if hits:
            return hits[0]
    raise ImportError(f"kvprobe: the compiled engine (_native*.so) is missing from {here}; install with pip install .")


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class _Row(ctypes.Structure):
    _fields_ = [("token", ctypes.c_int32), ("pos", ctypes.c_int32), ("kv", ctypes.c_void_p),
                ("logits", ctypes.POINTER(ctypes.c_float))]


_lib = ctypes.CDLL(_find_library())
_P, _I, _E = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Error)
_F32P, _I32P, _U8P = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_uint8)


def _sig(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_sig("kvp_py_version", ctypes.c_char_p)
_sig("kvp_model_load", _P, ctypes.c_char_p, _E)
_sig("kvp_model_free", None, _P)
_sig("kvp_model_gguf", _P, _P)
_sig("kvp_py_hparams", ctypes.c_char_p, _P, ctypes.POINTER(ctypes.c_int * 9))
_sig("kvp_py_template_name", ctypes.c_char_p, _P)
_sig("kvp_py_ctx_new", _P, _P, _I, _I, ctypes.c_char_p, _E)
_sig("kvp_ctx_free", None, _P)
_sig("kvp_ctx_max_batch", _I, _P)
_sig("kvp_tokenizer_load", _P, _P, _E)
_sig("kvp_tokenizer_free", None, _P)
_sig("kvp_tokenizer_add_bos", _I, _P)
_sig("kvp_token_is_eog", _I, _P, ctypes.c_int32)
_sig("kvp_py_tokenize", _I, _P, _P, ctypes.c_char_p, _I, ctypes.c_char_p, ctypes.c_char_p, _I, _I, _I,
     ctypes.POINTER(_I32P), ctypes.POINTER(_U8P), ctypes.POINTER(_I), _E)
_sig("kvp_py_free", None, _P)
_sig("kvp_detokenize", _I, _P, _I32P, _I, _I, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t), _E)
_sig("kvp_kv_new", _P, _P, _I, _I, _E)
_sig("kvp_kv_free", None, _P)
_sig("kvp_kv_clone", _P, _P, _E)
_sig("kvp_kv_len", _I, _P)
_sig("kvp_kv_capacity", _I, _P)
_sig("kvp_kv_bytes", ctypes.c_size_t, _P)
_sig("kvp_kv_truncate", _I, _P, _I, _E)
_sig("kvp_kv_read", _I, _P, _I, _I, _I, _I, _I, _F32P, _E)
_sig("kvp_kv_write", _I, _P, _I, _I, _I, _I, _I, _F32P, _E)
_sig("kvp_kv_evict", _I, _P, _I, _I, _I, _I, _E)
_sig("kvp_kv_holds", _I, _P, _I, _I)
_sig("kvp_forward", _I, _P, ctypes.POINTER(_Row), _I, _E)
_sig("kvp_py_splice", _I, _P, ctypes.c_char_p, _I, ctypes.c_char_p, _I, _U8P, _P, ctypes.c_uint64, _E)
_sig("kvp_py_sweep", _I, ctypes.c_char_p, ctypes.c_char_p, _E)

__version__ = _lib.kvp_py_version().decode()


def _check(rc: int, err: _Error):
    if rc:
        raise KvprobeError(err.code or rc, err.msg.decode("utf-8", "replace"))


def _raise(err: _Error):
    raise KvprobeError(err.code or 5, err.msg.decode("utf-8", "replace"))


def _ids_array(ids) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(ids), dtype=np.int32)
    if a.ndim != 1:
        raise ValueError(f"token ids must be a 1-D sequence, got shape {a.shape}")
    return a


# ---- tokens -------------------------------------------------------------------------------

@dataclass
class Tokens:
    """Token ids and, per token, where it came from: "scaffold" (template markers), "system",
    "user" (content) or "assistant" (segment_ids holds the same as 0..3)."""
    ids: np.ndarray
    segment_ids: np.ndarray

    @property
    def segments(self) -> list:
        return [SEGMENTS[s] for s in self.segment_ids]

    def __len__(self):
        return len(self.ids)


# ---- the model ----------------------------------------------------------------------------

class Model:
    """A GGUF model (llama, qwen2, qwen3, gemma3), its tokenizer and chat template, and an
    execution context.

    threads: CPU threads (None: all cores). precision: matmul activations, "q8x2" (default:
    two 8-bit planes, within ~1e-3 of transformers), "q8" (fastest) or "f32" (the parity path).
    max_batch: rows per forward call."""

    def __init__(self, path: str, threads: Optional[int] = None, precision: str = "q8x2", max_batch: int = 64):
        self._m = self._ctx = self._tok = None
        err = _Error()
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError("path must be a string")
        self.path = os.fspath(path)
        self._m = _lib.kvp_model_load(self.path.encode(), ctypes.byref(err))
        if not self._m:
            _raise(err)
        hp = (ctypes.c_int * 9)()
        self.architecture = _lib.kvp_py_hparams(self._m, ctypes.byref(hp)).decode()
        (self.n_layers, self.n_embd, self.n_heads, self.n_kv_heads, self.head_dim, self.head_dim_v, self.n_vocab,
         self.n_ctx_train, self.n_ff) = list(hp)
        self._tok = _lib.kvp_tokenizer_load(_lib.kvp_model_gguf(self._m), ctypes.byref(err))
        if not self._tok:
            _raise(err)
        self.chat_template = _lib.kvp_py_template_name(self._m).decode()
        self.precision = precision
        self._ctx = _lib.kvp_py_ctx_new(self._m, int(threads or 0), int(max_batch), precision.encode(), ctypes.byref(err))
        if not self._ctx:
            _raise(err)
        self.max_batch = _lib.kvp_ctx_max_batch(self._ctx)

    def close(self):
        """Free the engine's memory now (also done when the object is collected)."""
        if getattr(self, "_ctx", None):
            _lib.kvp_ctx_free(self._ctx)
        if getattr(self, "_tok", None):
            _lib.kvp_tokenizer_free(self._tok)
        if getattr(self, "_m", None):
            _lib.kvp_model_free(self._m)
        self._m = self._ctx = self._tok = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"Model({self.path!r}, architecture={self.architecture!r}, n_layers={self.n_layers}, "
                f"chat_template={self.chat_template!r}, precision={self.precision!r})")

    # -- text

    def tokenize(self, text: str, chat: bool = False, system: Optional[str] = None, template: Optional[str] = None,
                 thinking: bool = False, add_bos: Optional[bool] = None, parse_special: bool = False) -> Tokens:
        """Token ids and segment labels. chat=True (or a system message) renders text as a user
        turn in the chat template (template: a name to override the GGUF's), with the
        generation prompt. add_bos: None = as the GGUF says (raw text only)."""
        if not isinstance(text, str):
            raise TypeError("text must be a string")
        err, ids, seg, n = _Error(), _I32P(), _U8P(), _I()
        chat = bool(chat or system is not None)
        bos = _lib.kvp_tokenizer_add_bos(self._tok) if add_bos is None else int(add_bos)
        rc = _lib.kvp_py_tokenize(self._m, self._tok, text.encode("utf-8", "surrogatepass"), int(chat),
                                  system.encode() if system is not None else None,
                                  template.encode() if template else None, int(thinking), bos, int(parse_special),
                                  ctypes.byref(ids), ctypes.byref(seg), ctypes.byref(n), ctypes.byref(err))
        try:
            _check(rc, err)
            k = n.value
            out = Tokens(np.ctypeslib.as_array(ids, (k,)).copy() if k else np.zeros(0, np.int32),
                         np.ctypeslib.as_array(seg, (k,)).copy() if k else np.zeros(0, np.uint8))
        finally:
            _lib.kvp_py_free(ctypes.cast(ids, _P))
            _lib.kvp_py_free(ctypes.cast(seg, _P))
        return out

    def detokenize(self, ids) -> str:
        a = _ids_array(ids)
        err, out, n = _Error(), ctypes.c_char_p(), ctypes.c_size_t()
        _check(_lib.kvp_detokenize(self._tok, a.ctypes.data_as(_I32P), len(a), 0, ctypes.byref(out), ctypes.byref(n),
                                   ctypes.byref(err)), err)
        try:
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            _lib.kvp_py_free(ctypes.cast(out, _P))

    def is_end(self, token: int) -> bool:
        """Does this token end a generation (end of turn / end of text)?"""
        return bool(_lib.kvp_token_is_eog(self._tok, int(token)))

    # -- caches and the forward pass

    def new_cache(self, n_ctx: int, f16: bool = False) -> "KVCache":
        """An empty cache of n_ctx positions (f32, or f16 storage)."""
        err = _Error()
        p = _lib.kvp_kv_new(self._m, int(n_ctx), 1 if f16 else 0, ctypes.byref(err))
        if not p:
            _raise(err)
        return KVCache(p, self)

    def prefill(self, ids, n_ctx: Optional[int] = None, f16: bool = False) -> "KVCache":
        """A new cache holding ids (room for n_ctx positions; default: these + 512)."""
        a = _ids_array(ids)
        kv = self.new_cache(n_ctx or len(a) + 512, f16)
        if len(a):
            self._run(kv, a, want_logits=False)
        return kv

    def decode(self, cache: "KVCache", ids, all_logits: bool = True) -> np.ndarray:
        """Feed ids after the cache's positions; returns the logits after each ([len(ids),
        n_vocab], float32), or only after the last ([n_vocab]) with all_logits=False."""
        a = _ids_array(ids)
        if not isinstance(cache, KVCache) or cache._model is not self:
            raise TypeError("cache must be a KVCache of this model")
        if not len(a):
            raise ValueError("decode needs at least one token")
        out = self._run(cache, a, want_logits=True)
        return out if all_logits else out[-1]

    def _run(self, kv: "KVCache", a: np.ndarray, want_logits: bool) -> Optional[np.ndarray]:
        base, n = len(kv), len(a)
        if base + n > kv.capacity:
            raise ValueError(f"{n} tokens do not fit: the cache holds {base} of {kv.capacity} positions")
        if ((a < 0) | (a >= self.n_vocab)).any():
            raise ValueError(f"token ids must lie in [0, {self.n_vocab})")
        logits = np.empty((n, self.n_vocab), np.float32) if want_logits else None
        err = _Error()
        for i0 in range(0, n, self.max_batch):
            k = min(self.max_batch, n - i0)
            rows = (_Row * k)()
            for j in range(k):
                lp = logits[i0 + j].ctypes.data_as(_F32P) if want_logits else None
                rows[j] = _Row(int(a[i0 + j]), base + i0 + j, kv._kv, lp)
            _check(_lib.kvp_forward(self._ctx, rows, k, ctypes.byref(err)), err)
        return logits

    def generate(self, prompt, max_new_tokens: int = 64, chat: bool = True, system: Optional[str] = None,
                 cache: Optional["KVCache"] = None, stop_at_end: bool = True) -> str:
        """Greedy continuation of prompt (text, rendered as a chat turn unless chat=False, or
        token ids). With cache, the prompt ids continue that cache instead of a new one."""
        ids = _ids_array(self.tokenize(prompt, chat=chat, system=system).ids if isinstance(prompt, str) else prompt)
        kv = cache if cache is not None else self.prefill(ids[:-1], n_ctx=len(ids) + max_new_tokens)
        if cache is not None:
            self.decode(kv, ids[:-1]) if len(ids) > 1 else None
        out, x = [], int(ids[-1])
        for _ in range(max_new_tokens):
            t = int(np.argmax(self.decode(kv, [x], all_logits=False)))
            if stop_at_end and self.is_end(t):
                break
            out.append(t)
            x = t
        return self.detokenize(out)


# ---- the cache ------------------------------------------------------------------------------

class _Side:
    """kv.K / kv.V: index by layer for a copy [positions, kv_heads, head_dim]; assign an array
    of that shape (or [n, kv_heads, head_dim] at positions 0..n-1) to write it."""

    def __init__(self, cache: "KVCache", which: int):
        self._c, self._w = cache, which

    def __getitem__(self, layer: int) -> np.ndarray:
        return self._c._read(self._w, layer)

    def __setitem__(self, layer: int, value):
        self._c._write(self._w, layer, value, 0)


class KVCache:
    """A model's KV cache: positions x layers of post-RoPE keys and values, per KV head."""

    def __init__(self, handle, model: Model):
        self._kv, self._model = handle, model

    # (views made on access: a cache holding views of itself would be freed only by the cycle
    # collector, long after its memory is needed back)
    @property
    def K(self) -> _Side:
        return _Side(self, 1)

    @property
    def V(self) -> _Side:
        return _Side(self, 2)

    def close(self):
        if getattr(self, "_kv", None):
            _lib.kvp_kv_free(self._kv)
        self._kv = None

    def __del__(self):
        self.close()

    def __len__(self):
        return _lib.kvp_kv_len(self._kv)

    @property
    def capacity(self) -> int:
        return _lib.kvp_kv_capacity(self._kv)

    @property
    def nbytes(self) -> int:
        """Memory the cache holds: its pages (16 positions of one KV head each, shared pages
        included) and page tables."""
        return _lib.kvp_kv_bytes(self._kv)

    def __repr__(self):
        return f"KVCache(len={len(self)}, capacity={self.capacity}, n_layers={self._model.n_layers})"

    def _layer(self, layer):
        if not isinstance(layer, (int, np.integer)) or not 0 <= layer < self._model.n_layers:
            raise IndexError(f"layer {layer!r} outside 0..{self._model.n_layers - 1}")
        return int(layer)

    def _shape(self, which):
        m = self._model
        return (m.n_kv_heads, m.head_dim if which == 1 else m.head_dim_v)

    def _read(self, which, layer) -> np.ndarray:
        layer, n = self._layer(layer), len(self)
        out = np.empty((n,) + self._shape(which), np.float32)
        err = _Error()
        if n:
            _check(_lib.kvp_kv_read(self._kv, which, layer, layer + 1, 0, n, out.ctypes.data_as(_F32P), ctypes.byref(err)), err)
        return out

    def _write(self, which, layer, value, start):
        layer = self._layer(layer)
        a = np.asarray(value)
        if a.dtype != np.float32:
            if not np.issubdtype(a.dtype, np.floating):
                raise TypeError(f"K/V values must be floating point, got {a.dtype}")
            a = a.astype(np.float32)
        a = np.ascontiguousarray(a)
        want = self._shape(which)
        if a.ndim != 3 or a.shape[1:] != want:
            raise ValueError(f"expected [positions, {want[0]}, {want[1]}], got {list(a.shape)}")
        if start < 0 or start + a.shape[0] > len(self):
            raise ValueError(f"positions [{start}, {start + a.shape[0]}) outside the cache's [0, {len(self)})")
        err = _Error()
        _check(_lib.kvp_kv_write(self._kv, which, layer, layer + 1, start, start + a.shape[0], a.ctypes.data_as(_F32P),
                                 ctypes.byref(err)), err)

    def k(self, layer: int) -> np.ndarray:
        """Keys of one layer (post-RoPE), a copy: [positions, kv_heads, head_dim] float32."""
        return self._read(1, layer)

    def v(self, layer: int) -> np.ndarray:
        """Values of one layer, a copy: [positions, kv_heads, head_dim_v] float32."""
        return self._read(2, layer)

    def set_k(self, layer: int, values, start: int = 0):
        """Overwrite keys of one layer at positions start.. (values: [n, kv_heads, head_dim])."""
        self._write(1, layer, values, start)

    def set_v(self, layer: int, values, start: int = 0):
        self._write(2, layer, values, start)

    def fork(self) -> "KVCache":
        """An independent copy."""
        err = _Error()
        p = _lib.kvp_kv_clone(self._kv, ctypes.byref(err))
        if not p:
            _raise(err)
        return KVCache(p, self._model)

    def truncate(self, n: int):
        """Forget positions >= n."""
        err = _Error()
        _check(_lib.kvp_kv_truncate(self._kv, int(n), ctypes.byref(err)), err)

    def evict(self, layers: Iterable[int], positions: Iterable[int]):
        """Remove positions from the cache at these layers, for good: attention never sees them
        again and their memory is released (fork first to keep them). Reading an evicted
        position raises."""
        err = _Error()
        for l in layers:
            l = self._layer(l)
            for p in positions:
                _check(_lib.kvp_kv_evict(self._kv, l, l + 1, int(p), int(p) + 1, ctypes.byref(err)), err)

    def holds(self, layer: int, pos: int) -> bool:
        """True if the position's K/V are held (not evicted) at this layer."""
        return bool(_lib.kvp_kv_holds(self._kv, self._layer(layer), int(pos)))

    def splice(self, condition: str, layer_from: int, n_prompt: int, segments=None, span: str = "all-prompt",
               donor: Optional["KVCache"] = None, seed: int = 1):
        """The study's edit, in place (kvprobe's definition, include/kvprobe/splice.h): on the
        prompt positions [0, n_prompt - 1) selected by span, at every layer >= layer_from:
        condition "zero", "mean", "noise", "drop", "drop-content", or "blank" / "other" with a
        donor cache at the same positions. segments: one label per prompt token (Tokens, its
        segment_ids, or names); needed for span != all-prompt and drop-content."""
        if condition not in CONDITIONS:
            raise ValueError(f"unknown condition {condition!r} (one of {', '.join(CONDITIONS)})")
        if not 0 <= int(layer_from) <= self._model.n_layers:
            raise IndexError(f"layer_from {layer_from} outside 0..{self._model.n_layers}")
        if not 1 <= int(n_prompt) <= len(self) + 1:
            raise ValueError(f"n_prompt {n_prompt} must lie in [1, {len(self) + 1}]: the cache holds {len(self)} "
                             "positions (a prompt of n_prompt tokens without its last)")
        seg = None
        if segments is not None:
            s = segments.segment_ids if isinstance(segments, Tokens) else segments
            s = [SEGMENTS.index(x) if isinstance(x, str) else int(x) for x in s]
            if len(s) < n_prompt:
                raise ValueError(f"segments: {len(s)} labels for {n_prompt} prompt tokens")
            seg = np.ascontiguousarray(s[:n_prompt], dtype=np.uint8)
        if donor is not None and (not isinstance(donor, KVCache) or donor._model is not self._model):
            raise TypeError("donor must be a KVCache of the same model")
        err = _Error()
        _check(_lib.kvp_py_splice(self._kv, condition.encode(), int(layer_from), span.encode(), int(n_prompt),
                                  seg.ctypes.data_as(_U8P) if seg is not None else None,
                                  donor._kv if donor is not None else None, int(seed), ctypes.byref(err)), err)


# ---- sweeps -------------------------------------------------------------------------------------

def load_records(out_dir: str, as_dataframe: bool = False):
    """The records of a sweep directory (results.jsonl), as dicts or a pandas DataFrame."""
    path = os.path.join(out_dir, "results.jsonl")
    with open(path, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    if as_dataframe:
        import pandas as pd  # optional dependency
        return pd.DataFrame.from_records(recs)
    return recs


def _sweep_opts(model, dataset, out, conditions, layers, steps, options) -> bytes:
    opts = {"model": os.fspath(model), "dataset": dataset, "out": os.fspath(out), "conditions": list(conditions),
            **options}
    if layers is not None:
        opts["layers"] = [int(x) for x in layers]
    if steps is not None:
        opts["steps"] = [int(x) for x in steps]
    return json.dumps(opts).encode()


def sweep_prompts(model: str, dataset: str, **options) -> list:
    """What a sweep would feed the model, per example (`kvprobe sweep --prompts-only`): dicts
    with example_id, gold, text, ids, seg (s/y/u/a per token), blank_ids, max_new_tokens,
    stop_ids. options as for sweep."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "prompts.jsonl")
        err = _Error()
        _check(_lib.kvp_py_sweep(_sweep_opts(model, dataset, d, options.pop("conditions", ["clean"]),
                                             options.pop("layers", None), options.pop("steps", None), options),
                                 path.encode(), ctypes.byref(err)), err)
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f]


def sweep(model: str, dataset: str, out: str = "sweep-out", conditions: Sequence[str] = ("clean", "blank", "zero"),
          layers: Optional[Sequence[int]] = None, steps: Optional[Sequence[int]] = None, as_dataframe: bool = False,
          **options):
    """Run kvprobe's splice sweep (the same engine as `kvprobe sweep`; resumes in out) and
    return its records. options: the CLI's options with '_' for '-' (max_new_tokens, threads,
    precision, span, shots, readout, format, system, filler, template, margins, seed,
    data_dir, quiet, no_report, thinking, skip_bad_rows). as_dataframe: a pandas DataFrame
    (needs pandas; records otherwise)."""
    err = _Error()
    _check(_lib.kvp_py_sweep(_sweep_opts(model, dataset, out, conditions, layers, steps, options), None,
                             ctypes.byref(err)), err)
    return load_records(out, as_dataframe)
