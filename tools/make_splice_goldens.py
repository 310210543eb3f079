#!/usr/bin/env python3
"""Reference implementation of kvprobe's KV splice in Hugging Face transformers,
written as goldens for the C engine.

    tools/.venv/bin/python tools/make_splice_goldens.py   (~10 s on 2 cores; byte-identical on rerun)

The models are the tiny random llama / qwen2 / qwen3 / gemma3 of make_tiny_models.py, built by
its own build_model() (same seeds, fp32, eager attention), so they hold exactly the
weights of tests/fixtures/tiny-<arch>-f32.gguf (re-checked against the file).

Definitions (the contract src/kv/splice.c implements)
  prompt P       ref.prompt_tokens of tests/golden/tiny-<arch>-f32.ref.gguf, n = 24
  user span      positions [SPAN_LO, SPAN_HI) = [4, 20)
  donor D        P with D[4 + k] = [7, 8, 9][k % 3] for k in 0..15
  decode         prefill P[:-1] (positions 0..n-2); step w feeds x_w at position n-1+w
                 (x_0 = P[n-1], x_w = argmax of step w-1) and yields the logits of
                 generated token w
  edit           applied once, in place, right before the forward pass of step W;
                 tokens generated before W keep their K/V
  span           all prompt positions in the cache but the last prompt token: [0, n-1)
                 (drop-content: the user span [4, 20)); layers l >= L
  clean          no edit (written with L = n_layer)
  zero           K and V of the span slots set to 0.0 (they stay attended)
  blank          K and V of the span slots replaced by the donor's, the donor cache being
                 the prefill of D[:-1] by the same model (keys are post-RoPE in HF's cache,
                 as in kvprobe's)
  drop           the span slots get -inf added to their attention scores (before softmax)
                 at layers >= L for every later step; layers < L still attend them
  drop-content   drop restricted to the user span [4, 20)

Grid: {zero, blank, drop, drop-content} x L in {0, n_layer//2, n_layer-1} x W in {0, 2, 5},
plus clean x W. Each cell greedy-decodes through step W+7.

How it is done in transformers 5.24
  * The cache is a plain DynamicCache() (no config): one DynamicLayer per layer holding
    every position, [batch, kv_heads, seq, head_dim]. DynamicCache(config=...) gives
    gemma3's sliding layers a DynamicSlidingWindowLayer that keeps only the last
    sliding_window - 1 positions, so slots outside the window would not exist. The
    sliding-window MASK comes from the config, not from the cache class, so with full
    layers gemma3 still attends only to (q - 8, q] on its sliding layers; the clean run
    is checked against the golden logits and against the plain (config) cache.
  * zero / blank write into cache.layers[l].keys / .values in place.
  * drop / drop-content: a forward pre-hook on every layer's self_attn replaces the
    4-D additive eager mask [b, 1, q, kv] (causal, and sliding for gemma3's sliding
    layers) by mask + extra, extra = -inf on the dropped key columns. Column j is
    absolute position j because every cache layer holds all positions (kv_offset 0).

Output: tests/golden/splice/tiny-<arch>.splice.gguf (arch "kvprobe-ref")
  ref.model_file      STRING    f32 fixture basename
  ref.prompt          INT32[n]
  ref.donor           INT32[n]
  ref.span_lo         UINT32    4
  ref.span_hi         UINT32    20
  ref.n_vocab         UINT32
  ref.n_layer         UINT32
  ref.source          STRING    versions
  ref.cells           STRING[]  "<cond>.L<L>.W<W>" (clean: L = n_layer)
  <cell>.tokens       INT32[W+8]  generated tokens of steps 0..W+7
  <cell>.min_gap      FLOAT32   smallest top1 - top2 logit gap over steps 0..W+7
  tensor <cell>.logits F32 (8, n_vocab): logits of steps W..W+7
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import numpy as np
import torch

import gguf
from gguf import GGUFValueType, GGUFWriter
import transformers
from transformers.cache_utils import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_models as mtm  # noqa: E402  (model construction is shared, not copied)

ROOT = mtm.ROOT
OUT_DIR = ROOT / "tests" / "golden" / "splice"
ARCHS = ("llama", "qwen2", "qwen3", "gemma3")

SPAN_LO, SPAN_HI = 4, 20
FILLER = (7, 8, 9)
N_REC = 8                      # recorded steps from the edit on: W .. W+7
WS = (0, 2, 5)
CONDS = ("zero", "blank", "drop", "drop-content")
GOLDEN_TOL = 1e-4


# --------------------------------------------------------------------------
# drop: per-layer extra additive mask
# --------------------------------------------------------------------------
class DropHooks:
    """Forward pre-hooks on every self_attn. `drop[l]` = key positions masked out at layer l."""

    def __init__(self, model):
        self.drop: dict[int, list[int]] = {}
        self.n_applied = 0
        self.handles = []
        for i, layer in enumerate(model.model.layers):
            attn = layer.self_attn
            assert attn.layer_idx == i
            self.handles.append(attn.register_forward_pre_hook(self._hook, with_kwargs=True))

    def _hook(self, module, args, kwargs):
        pos = self.drop.get(module.layer_idx)
        if not pos:
            return None
        mask = kwargs.get("attention_mask")
        assert isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.dtype == torch.float32, type(mask)
        cache = kwargs["cache"]
        hs = kwargs["hidden_states"]
        layer = cache.layers[module.layer_idx]
        assert type(layer) is transformers.cache_utils.DynamicLayer, type(layer)
        kv_len = layer.keys.shape[-2] + hs.shape[1]        # this layer's keys after the update
        assert mask.shape[-1] == kv_len, (mask.shape, kv_len)
        assert max(pos) < layer.keys.shape[-2]
        extra = torch.zeros(kv_len, dtype=mask.dtype)
        extra[pos] = float("-inf")
        kwargs = dict(kwargs)
        kwargs["attention_mask"] = mask + extra             # new tensor: the mask is shared by layers
        self.n_applied += 1
        return args, kwargs

    def remove(self):
        for h in self.handles:
            h.remove()


# --------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------
@torch.no_grad()
def prefill(model, ids: list[int], cache=None):
    cache = DynamicCache() if cache is None else cache
    model(input_ids=torch.tensor([ids], dtype=torch.long), cache=cache, use_cache=True)
    return cache


@torch.no_grad()
def decode(model, prompt: list[int], W: int, edit=None, n_steps: int | None = None, cache=None):
    """Prefill prompt[:-1], then greedy steps 0..W+N_REC-1 (or n_steps); `edit(cache)` runs
    right before step W. Returns (tokens [steps], logits [steps, vocab] float32 tensor)."""
    n_steps = W + N_REC if n_steps is None else n_steps
    cache = prefill(model, prompt[:-1], cache)
    x = prompt[-1]
    toks, rows = [], []
    for w in range(n_steps):
        if w == W and edit is not None:
            edit(cache)
        out = model(input_ids=torch.tensor([[x]], dtype=torch.long), cache=cache, use_cache=True)
        row = out.logits[0, -1].clone()
        rows.append(row)
        x = int(torch.argmax(row))
        toks.append(x)
    return toks, torch.stack(rows)


def min_gap(logits: torch.Tensor) -> float:
    top2 = torch.topk(logits, 2, dim=-1).values
    return float((top2[:, 0] - top2[:, 1]).min())


class Splicer:
    def __init__(self, model, n_layer: int, prompt: list[int], donor: list[int]):
        self.model = model
        self.n_layer = n_layer
        self.prompt = prompt
        self.n = len(prompt)
        self.hooks = DropHooks(model)
        self.donor_cache = prefill(model, donor[:-1])
        self.self_cache = prefill(model, prompt[:-1])      # donor = P (self-splice check)

    def span(self, cond: str) -> list[int]:
        return list(range(SPAN_LO, SPAN_HI)) if cond == "drop-content" else list(range(0, self.n - 1))

    def run(self, cond: str, L: int, W: int, donor_cache=None, layers=None, positions=None):
        layers = list(range(L, self.n_layer)) if layers is None else layers
        pos = self.span(cond) if positions is None else positions
        donor_cache = self.donor_cache if donor_cache is None else donor_cache

        def edit(cache):
            for l in layers:
                lk = cache.layers[l]
                assert type(lk) is transformers.cache_utils.DynamicLayer
                assert lk.keys.shape[-2] == self.n - 1 + W, lk.keys.shape
                if cond == "zero":
                    lk.keys[:, :, pos, :] = 0.0
                    lk.values[:, :, pos, :] = 0.0
                elif cond == "blank":
                    dk = donor_cache.layers[l]
                    lk.keys[:, :, pos, :] = dk.keys[:, :, pos, :]
                    lk.values[:, :, pos, :] = dk.values[:, :, pos, :]
                elif cond in ("drop", "drop-content"):
                    self.hooks.drop[l] = list(pos)
                else:
                    raise ValueError(cond)

        try:
            return decode(self.model, self.prompt, W, None if cond == "clean" else edit)
        finally:
            self.hooks.drop = {}


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------
def load_ref(arch: str):
    r = gguf.GGUFReader(str(mtm.GOLDEN / f"tiny-{arch}-f32.ref.gguf"))
    prompt = [int(t) for t in r.fields["ref.prompt_tokens"].contents()]
    gen = [int(t) for t in r.fields["ref.generated_tokens"].contents()]
    model_file = r.fields["ref.model_file"].contents()
    (t,) = [t for t in r.tensors if t.name == "logits"]
    logits = np.array(t.data, dtype=np.float32).reshape(len(prompt) + len(gen) - 1, -1)
    return prompt, gen, model_file, logits


def check_weights_match_fixture(spec, model, model_file: str) -> None:
    """The model built here holds exactly the F32 fixture's weights."""
    r = gguf.GGUFReader(str(mtm.FIXTURES / model_file))
    tens = {t.name: np.array(t.data) for t in r.tensors}
    params = dict(model.named_parameters())
    for gname, hname in mtm.tensor_map(spec):
        want = mtm.hf_to_gguf(spec, gname, params[hname].detach().numpy())
        got = tens[gname].reshape(want.shape)
        assert np.array_equal(got, want), gname


def maxdiff(a, b) -> float:
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


@torch.no_grad()
def oneshot_masked(model, ids: list[int], q_from: int, drop_pos: list[int], is_gemma: bool):
    """No cache: one forward over ids with a hand-built 4-D mask = causal (and, for gemma3's
    sliding layers, the window) plus -inf on drop_pos for every query row >= q_from.
    The independent form of drop at L = 0."""
    T = len(ids)
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    allowed = k <= q
    extra = torch.zeros(T, T, dtype=torch.bool)
    if drop_pos:
        extra[q_from:, drop_pos] = True
    neg = torch.finfo(torch.float32).min

    def as_mask(ok):
        return torch.where(ok & ~extra, 0.0, neg).to(torch.float32)[None, None]

    if is_gemma:
        sw = mtm.GEMMA_SLIDING_WINDOW
        mask = {"full_attention": as_mask(allowed), "sliding_attention": as_mask(allowed & (k > q - sw))}
    else:
        mask = as_mask(allowed)
    return model(input_ids=torch.tensor([ids], dtype=torch.long), attention_mask=mask, use_cache=False).logits[0]


@torch.no_grad()
def process_arch(arch: str) -> dict:
    spec = mtm.SPECS[arch]
    model = mtm.build_model(spec)
    assert model.config._attn_implementation == "eager"
    n_layer = spec.n_layer
    prompt, ref_gen, model_file, ref_logits = load_ref(arch)
    assert model_file == f"tiny-{arch}-f32.gguf"
    check_weights_match_fixture(spec, model, model_file)
    n = len(prompt)
    assert n == mtm.N_PROMPT == 24
    donor = list(prompt)
    for k in range(SPAN_HI - SPAN_LO):
        donor[SPAN_LO + k] = FILLER[k % 3]
    is_gemma = arch == "gemma3"

    # plain incremental decode, BEFORE any hook is installed, with the model's own cache
    # (gemma3: sliding layers keep only the window)
    plain_toks, plain_logits = decode(model, prompt, 0, n_steps=max(WS) + N_REC,
                                      cache=DynamicCache(config=model.config))

    sp = Splicer(model, n_layer, prompt, donor)
    Ls = (0, n_layer // 2, n_layer - 1)
    cells: list[tuple[str, list[int], np.ndarray, float]] = []
    res: dict[tuple[str, int, int], tuple[list[int], torch.Tensor]] = {}
    for W in WS:
        res[("clean", n_layer, W)] = sp.run("clean", n_layer, W)
    for cond in CONDS:
        for L in Ls:
            for W in WS:
                res[(cond, L, W)] = sp.run(cond, L, W)
    order = [("clean", n_layer, W) for W in WS] + [(c, L, W) for c in CONDS for L in Ls for W in WS]
    for key in order:
        cond, L, W = key
        toks, logits = res[key]
        assert len(toks) == W + N_REC and logits.shape == (W + N_REC, mtm.N_VOCAB)
        cells.append((f"{cond}.L{L}.W{W}", toks, logits[W:].numpy().astype(np.float32), min_gap(logits)))

    rep: dict = {"arch": arch, "n_layer": n_layer, "Ls": Ls}
    # (a) clean == plain decode == golden
    a_plain, a_gold = 0.0, 0.0
    for W in WS:
        toks, logits = res[("clean", n_layer, W)]
        assert toks == plain_toks[:W + N_REC]
        assert toks == ref_gen[:W + N_REC], (toks, ref_gen)
        a_plain = max(a_plain, maxdiff(logits, plain_logits[:W + N_REC]))
        a_gold = max(a_gold, maxdiff(logits, ref_logits[n - 1:n - 1 + W + N_REC]))
    assert a_plain < 1e-5, a_plain
    assert a_gold < GOLDEN_TOL, a_gold
    rep["a_clean_vs_plain"] = a_plain
    rep["a_clean_vs_golden"] = a_gold

    # (b) blank with no layers (L = n_layer) == clean, exactly
    b = 0.0
    for W in WS:
        t, lg = sp.run("blank", n_layer, W)
        assert t == res[("clean", n_layer, W)][0]
        b = max(b, maxdiff(lg, res[("clean", n_layer, W)][1]))
    assert b == 0.0, b
    rep["b_blank_Lnlayer_vs_clean"] = b

    # (c) self-splice (donor = P) == clean
    c = 0.0
    for L in Ls:
        for W in WS:
            t, lg = sp.run("blank", L, W, donor_cache=sp.self_cache)
            assert t == res[("clean", n_layer, W)][0]
            c = max(c, maxdiff(lg, res[("clean", n_layer, W)][1]))
    assert c < 1e-6, c
    rep["c_selfsplice_vs_clean"] = c

    # (d) zero / drop at L = 0 differ from clean
    d = {}
    for cond in ("zero", "drop", "blank", "drop-content"):
        for W in WS:
            t, lg = res[(cond, 0, W)]
            ct, clg = res[("clean", n_layer, W)]
            diff = maxdiff(lg[W:], clg[W:])
            ntok = sum(x != y for x, y in zip(t[W:], ct[W:]))
            d[f"{cond}.L0.W{W}"] = (diff, ntok)
            if cond in ("zero", "drop"):
                assert diff > 1.0, (cond, W, diff)
    rep["d_L0_vs_clean"] = d

    # every edited cell: identical to clean before W; how many differ after W
    same_as_clean = []
    for cond in CONDS:
        for L in Ls:
            for W in WS:
                t, lg = res[(cond, L, W)]
                ct, clg = res[("clean", n_layer, W)]
                assert t[:W] == ct[:W] and torch.equal(lg[:W], clg[:W])
                if torch.equal(lg, clg):
                    same_as_clean.append(f"{cond}.L{L}.W{W}")
    rep["cells_equal_to_clean"] = same_as_clean

    # (f) independent forms at L = 0:
    #     drop / drop-content: one forward over P + tokens[:-1] (no cache) with a hand-built mask
    #     blank (all-prompt):  one forward over D[:-1] + tokens[:-1] (the whole prompt prefix but
    #                          its last token is the donor's), valid for W = 0 only
    #     drop (all-prompt) W = 0: decode of the single token P[n-1] at position n-1, empty cache
    f = {}
    for cond in ("drop", "drop-content"):
        for W in WS:
            t, lg = res[(cond, 0, W)]
            one = oneshot_masked(model, prompt + t[:-1], n - 1 + W, sp.span(cond), is_gemma)
            f[f"{cond}.L0.W{W} vs one-shot mask"] = maxdiff(lg, one[n - 1:])
            assert one[n - 1:].argmax(-1).tolist() == t
    t, lg = res[("blank", 0, 0)]
    one = model(input_ids=torch.tensor([donor[:-1] + [prompt[-1]] + t[:-1]]), use_cache=False).logits[0]
    f["blank.L0.W0 vs one-shot donor prompt"] = maxdiff(lg, one[n - 1:])
    t, lg = res[("drop", 0, 0)]
    cache = DynamicCache()
    x, rows = prompt[-1], []
    with torch.no_grad():
        for w in range(N_REC):
            out = model(input_ids=torch.tensor([[x]]), position_ids=torch.tensor([[n - 1 + w]]),
                        cache=cache, use_cache=True)
            rows.append(out.logits[0, -1])
            x = int(rows[-1].argmax())
    f["drop.L0.W0 vs lone last token at pos n-1"] = maxdiff(lg, torch.stack(rows))
    for k, v in f.items():
        assert v < GOLDEN_TOL, (k, v)     # different summation order: one-shot vs incremental
    rep["f_independent"] = f

    # (e) gemma3: dropping positions outside a sliding layer's window changes nothing there
    if is_gemma:
        e = {}
        types = model.config.layer_types
        sliding = [i for i, ty in enumerate(types) if ty == "sliding_attention"]
        full = [i for i, ty in enumerate(types) if ty == "full_attention"]
        sw = mtm.GEMMA_SLIDING_WINDOW
        for W in WS:
            q0 = n - 1 + W                       # query position of step W
            outside = list(range(0, q0 - sw + 1))  # keys never in (q - sw, q] for q >= q0
            ct, clg = res[("clean", n_layer, W)]
            for l in sliding:
                t, lg = sp.run("drop", 0, W, layers=[l], positions=outside)
                e[f"W{W} sliding L{l} drop [0,{q0 - sw + 1})"] = maxdiff(lg, clg)
                assert t == ct and torch.equal(lg, clg)
            for l in full:
                t, lg = sp.run("drop", 0, W, layers=[l], positions=outside)
                e[f"W{W} full L{l} drop [0,{q0 - sw + 1})"] = maxdiff(lg, clg)
            # one position inside the window, at a sliding layer: must change things
            t, lg = sp.run("drop", 0, W, layers=[sliding[0]], positions=[q0 - sw + 1])
            e[f"W{W} sliding L{sliding[0]} drop [{q0 - sw + 1}] (inside)"] = maxdiff(lg, clg)
            assert maxdiff(lg, clg) > 0
        rep["e_gemma_sliding"] = e

    assert sp.hooks.n_applied > 0
    sp.hooks.remove()
    return {"rep": rep, "cells": cells, "prompt": prompt, "donor": donor, "model_file": model_file}


def write_file(path: Path, arch: str, out: dict) -> None:
    w = GGUFWriter(str(path), "kvprobe-ref")
    w.add_string("ref.model_file", out["model_file"])
    w.add_key_value("ref.prompt", out["prompt"], GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_key_value("ref.donor", out["donor"], GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_uint32("ref.span_lo", SPAN_LO)
    w.add_uint32("ref.span_hi", SPAN_HI)
    w.add_uint32("ref.n_vocab", mtm.N_VOCAB)
    w.add_uint32("ref.n_layer", mtm.SPECS[arch].n_layer)
    w.add_string("ref.source", f"transformers {transformers.__version__} torch {torch.__version__.split('+')[0]} "
                               f"gguf-py {importlib.metadata.version('gguf')} fp32 eager, DynamicCache() full layers")
    w.add_array("ref.cells", [name for name, _, _, _ in out["cells"]])
    for name, toks, _, gap in out["cells"]:
        w.add_key_value(f"{name}.tokens", [int(t) for t in toks], GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
        w.add_float32(f"{name}.min_gap", gap)
    for name, _, logits, _ in out["cells"]:
        assert logits.shape == (N_REC, mtm.N_VOCAB) and logits.dtype == np.float32
        w.add_tensor(f"{name}.logits", np.ascontiguousarray(logits))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for arch in ARCHS:
        out = process_arch(arch)
        path = OUT_DIR / f"tiny-{arch}.splice.gguf"
        write_file(path, arch, out)
        rep = out["rep"]
        print(f"{path.relative_to(ROOT)}: {len(out['cells'])} cells, {path.stat().st_size} bytes, L in {rep['Ls']}")
        print(f"  (a) clean vs plain decode {rep['a_clean_vs_plain']:.3g}, vs golden {rep['a_clean_vs_golden']:.3g}")
        print(f"  (b) blank L={rep['n_layer']} vs clean {rep['b_blank_Lnlayer_vs_clean']:.3g}")
        print(f"  (c) self-splice vs clean {rep['c_selfsplice_vs_clean']:.3g}")
        print("  (d) L=0 vs clean, max|dlogit| over steps W..W+7 / tokens differing:")
        for k, (dv, nt) in rep["d_L0_vs_clean"].items():
            print(f"      {k:20s} {dv:9.4f} {nt}/8")
        for k, v in rep["f_independent"].items():
            print(f"  (f) {k}: {v:.3g}")
        for k, v in rep.get("e_gemma_sliding", {}).items():
            print(f"  (e) {k}: {v:.3g}")
        print(f"  edited cells bit-identical to clean: {rep['cells_equal_to_clean'] or 'none'}")
        gaps = sorted((g, name) for name, _, _, g in out["cells"])
        print(f"  smallest top1-top2 gaps: " + ", ".join(f"{name} {g:.2e}" for g, name in gaps[:4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
