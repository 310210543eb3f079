#!/usr/bin/env python3
"""Build tiny RANDOM llama / qwen2 / qwen3 / gemma3 models with Hugging Face transformers,
write them as GGUF (all-F32 and Q8_0), and write reference ("golden") logits
computed by transformers (fp32, eager attention) into tests/golden/.

Deterministic: every weight comes from a seeded numpy Generator, torch runs
single-threaded, and GGUFWriter embeds no timestamps, so rerunning rewrites
byte-identical files.

Usage:  tools/.venv/bin/python tools/make_tiny_models.py

Outputs
  tests/fixtures/tiny-<arch>-<f32|q8_0>.gguf    model files (llama.cpp conventions)
  tests/golden/tiny-<arch>-<f32|q8_0>.ref.gguf  reference: prompt, 20 greedy tokens,
                                                logits[n_pos, n_vocab] (F32)

GGUF conventions (as llama.cpp's convert_hf_to_gguf.py writes them):
  * a numpy weight of HF shape [out, in] is written as-is (GGUF ne = [in, out]).
  * llama ONLY: attn_q / attn_k rows are permuted per head (LlamaModel.permute)
    so that llama.cpp's adjacent-pair ("normal") RoPE equals HF's rotate_half RoPE.
  * llama: llama3 rope scaling is expressed as rope_freqs.weight (F32, [head_dim/2])
    with theta_i = pos * base^(-2i/d) / rope_freqs[i].
  * qwen2: q/k/v projection biases as attn_{q,k,v}.bias (F32, also in Q8_0 files); no
    permutation (NEOX RoPE), no q/k norms.
  * gemma3: every RMSNorm weight (incl. q/k norms and output_norm) is written as
    (1 + w) because Gemma3RMSNorm computes x_hat * (1 + w).
  * Q8_0 files: every 2-D matrix (incl. token_embd / output) is Q8_0, all 1-D
    tensors (norms, rope_freqs) stay F32. The Q8_0 reference is HF run on exactly
    the dequantized weights.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import gguf
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
import transformers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.cache_utils import DynamicCache

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GOLDEN = ROOT / "tests" / "golden"

N_VOCAB = 512
N_EMBD = 64
N_FF = 128
N_CTX = 256
BOS_ID = 1
EOS_ID = 2
N_PROMPT = 24
N_GEN = 20
MIN_GAP = 2e-2          # required top1-top2 logit gap at every greedy step
MIN_DISTINCT = 8        # required number of distinct tokens among the 20 generated
PROMPT_SEED_BASE = 1000  # prompt seeds are tried in order PROMPT_SEED_BASE + k
MODEL_SEEDS = {"llama": 11, "qwen3": 22, "gemma3": 33, "qwen2": 44}

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # 64 (not 32): with head_dim 16 and theta 5e5 the wavelengths are
    # 6.28, 32.4, 167, ... so high_freq_wavelen = 16, low_freq_wavelen = 64 puts
    # freq 0 in the "keep" branch, freq 1 in the "smooth" branch, freqs 2..7 in
    # the "divide by factor" branch.  (With 32, freq 1 = 32.4 > 32 -> no smooth.)
    "original_max_position_embeddings": 64,
}


# --------------------------------------------------------------------------
# GGUF writer that can also emit an EMPTY array (tokenizer.ggml.merges = []).
# gguf-py's add_array() silently drops empty lists and _pack_val() rejects
# them, but the GGUF format allows count = 0 (llama.cpp's gpt2 vocab loader
# requires the merges key to exist).
# --------------------------------------------------------------------------
class Writer(GGUFWriter):
    def add_empty_string_array(self, key: str) -> None:
        self.add_key_value(key, [], GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):  # type: ignore[override]
        if vtype == GGUFValueType.ARRAY and len(val) == 0:
            assert sub_type is not None
            out = bytearray()
            if add_vtype:
                out += self._pack("I", vtype)
            out += self._pack("I", sub_type)
            out += self._pack("Q", 0)
            return bytes(out)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


# --------------------------------------------------------------------------
# model construction
# --------------------------------------------------------------------------
@dataclass
class Spec:
    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float
    rope_theta: float
    tied: bool


SPECS = {
    "llama": Spec("llama", 4, 4, 2, 16, 1e-5, 500000.0, True),
    "qwen3": Spec("qwen3", 4, 4, 2, 32, 1e-6, 1000000.0, False),
    # Qwen2 derives head_dim = hidden / heads; tied head as in Qwen2.5 0.5B / 1.5B
    "qwen2": Spec("qwen2", 4, 4, 2, 16, 1e-6, 1000000.0, True),
    "gemma3": Spec("gemma3", 7, 4, 1, 32, 1e-6, 1000000.0, True),
}
GEMMA_SLIDING_WINDOW = 8
GEMMA_LOCAL_BASE = 10000.0


def make_config(spec: Spec):
    common = dict(
        vocab_size=N_VOCAB,
        hidden_size=N_EMBD,
        intermediate_size=N_FF,
        num_hidden_layers=spec.n_layer,
        num_attention_heads=spec.n_head,
        num_key_value_heads=spec.n_head_kv,
        head_dim=spec.head_dim,
        max_position_embeddings=N_CTX,
        rms_norm_eps=spec.eps,
        tie_word_embeddings=spec.tied,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=None,
        attention_bias=False,
        attn_implementation="eager",
    )
    if spec.arch == "llama":
        cfg = LlamaConfig(
            **common,
            hidden_act="silu",
            mlp_bias=False,
            rope_parameters={"rope_theta": spec.rope_theta, **LLAMA3_ROPE},
        )
    elif spec.arch == "qwen3":
        cfg = Qwen3Config(
            **common,
            hidden_act="silu",
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        )
    elif spec.arch == "qwen2":
        # Qwen2Attention always has q/k/v biases (attention_bias is not a Qwen2 option)
        cfg = Qwen2Config(
            **{k: v for k, v in common.items() if k not in ("attention_bias", "head_dim")},
            hidden_act="silu",
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        )
    elif spec.arch == "gemma3":
        cfg = Gemma3TextConfig(
            **common,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=32,
            sliding_window=GEMMA_SLIDING_WINDOW,
            sliding_window_pattern=6,
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": spec.rope_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": GEMMA_LOCAL_BASE},
            },
        )
    else:
        raise ValueError(spec.arch)
    cfg._attn_implementation = "eager"
    return cfg


MODEL_CLASSES = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM,
                 "gemma3": Gemma3ForCausalLM}


# normal std for (token embedding / lm_head, q_proj & k_proj, every other matrix).
# Chosen so that logits have std ~1-2 and greedy decoding does not collapse into
# repeating one token (small inits make random models emit a constant token).
# Gemma multiplies the tied embedding by sqrt(64) = 8, so its embedding std is
# kept small or the residual stream is dominated by the current token.
INIT_STD = {
    "llama": (0.3, 0.25, 0.2),
    "qwen3": (0.3, 0.25, 0.2),
    "qwen2": (0.3, 0.25, 0.2),
    "gemma3": (0.07, 0.4, 0.3),
}


def random_state_dict(spec: Spec, model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic random weights for every parameter, in sorted-name order."""
    rng = np.random.default_rng(seed)
    std_emb, std_qk, std_other = INIT_STD[spec.arch]
    params = dict(model.named_parameters())   # a tied lm_head appears only as embed_tokens
    sd = {}
    for name in sorted(params):
        shape = tuple(params[name].shape)
        if name.endswith("norm.weight"):
            if spec.arch == "gemma3":
                arr = rng.normal(0.0, 0.1, shape)          # HF holds offset w; factor = 1 + w
            else:
                arr = 1.0 + rng.normal(0.0, 0.1, shape)
        elif "embed_tokens" in name or name == "lm_head.weight":
            arr = rng.normal(0.0, std_emb, shape)
        elif name.endswith(".bias"):
            arr = rng.normal(0.0, 0.5, shape)              # large, as real Qwen2 k biases are
        elif name.endswith(("q_proj.weight", "k_proj.weight")):
            arr = rng.normal(0.0, std_qk, shape)
        else:
            arr = rng.normal(0.0, std_other, shape)
        sd[name] = torch.from_numpy(arr.astype(np.float32))
    return sd


def build_model(spec: Spec):
    cfg = make_config(spec)
    torch.manual_seed(0)
    model = MODEL_CLASSES[spec.arch](cfg).float().eval()
    model.config._attn_implementation = "eager"
    sd = random_state_dict(spec, model, MODEL_SEEDS[spec.arch])
    load_state(model, sd)
    if spec.tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    else:
        assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    return model


def load_state(model, sd: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, t in sd.items():
            p = params[name]
            assert p.shape == t.shape, (name, p.shape, t.shape)
            p.copy_(t)
    missing = set(params) - set(sd)
    assert not missing, missing


# --------------------------------------------------------------------------
# HF <-> GGUF tensor mapping
# --------------------------------------------------------------------------
def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py LlamaModel.permute."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def tensor_map(spec: Spec) -> list[tuple[str, str]]:
    """(gguf_name, hf_name) in the order llama.cpp's converter emits them."""
    m = [("token_embd.weight", "model.embed_tokens.weight")]
    for i in range(spec.n_layer):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        m += [
            (b + "attn_norm.weight", p + "input_layernorm.weight"),
            (b + "attn_q.weight", p + "self_attn.q_proj.weight"),
            (b + "attn_k.weight", p + "self_attn.k_proj.weight"),
            (b + "attn_v.weight", p + "self_attn.v_proj.weight"),
            (b + "attn_output.weight", p + "self_attn.o_proj.weight"),
        ]
        if spec.arch == "qwen2":
            m += [(b + f"attn_{x}.bias", p + f"self_attn.{x}_proj.bias") for x in "qkv"]
        if spec.arch in ("qwen3", "gemma3"):
            m += [
                (b + "attn_q_norm.weight", p + "self_attn.q_norm.weight"),
                (b + "attn_k_norm.weight", p + "self_attn.k_norm.weight"),
            ]
        if spec.arch == "gemma3":
            m += [
                (b + "post_attention_norm.weight", p + "post_attention_layernorm.weight"),
                (b + "ffn_norm.weight", p + "pre_feedforward_layernorm.weight"),
                (b + "post_ffw_norm.weight", p + "post_feedforward_layernorm.weight"),
            ]
        else:
            m += [(b + "ffn_norm.weight", p + "post_attention_layernorm.weight")]
        m += [
            (b + "ffn_gate.weight", p + "mlp.gate_proj.weight"),
            (b + "ffn_up.weight", p + "mlp.up_proj.weight"),
            (b + "ffn_down.weight", p + "mlp.down_proj.weight"),
        ]
    m.append(("output_norm.weight", "model.norm.weight"))
    if not spec.tied:
        m.append(("output.weight", "lm_head.weight"))
    return m


def hf_to_gguf(spec: Spec, gname: str, w: np.ndarray) -> np.ndarray:
    w = w.astype(np.float32)
    if spec.arch == "llama" and gname.endswith("attn_q.weight"):
        w = permute(w, spec.n_head)
    elif spec.arch == "llama" and gname.endswith("attn_k.weight"):
        w = permute(w, spec.n_head_kv)
    if spec.arch == "gemma3" and gname.endswith("norm.weight"):
        w = (w + np.float32(1.0)).astype(np.float32)
    return np.ascontiguousarray(w)


def gguf_to_hf(spec: Spec, gname: str, w: np.ndarray) -> np.ndarray:
    w = w.astype(np.float32)
    if spec.arch == "llama" and gname.endswith("attn_q.weight"):
        w = unpermute(w, spec.n_head)
    elif spec.arch == "llama" and gname.endswith("attn_k.weight"):
        w = unpermute(w, spec.n_head_kv)
    if spec.arch == "gemma3" and gname.endswith("norm.weight"):
        raise AssertionError("norms are never quantized; nothing to undo")
    return np.ascontiguousarray(w)


def llama3_rope_freqs(spec: Spec) -> tuple[np.ndarray, list[str]]:
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (llama3 branch)."""
    base = spec.rope_theta
    dim = spec.head_dim
    factor = LLAMA3_ROPE["factor"]
    low_freq_factor = LLAMA3_ROPE["low_freq_factor"]
    high_freq_factor = LLAMA3_ROPE["high_freq_factor"]
    old_context_len = LLAMA3_ROPE["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factors, branches = [], []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1)
            branches.append("keep")
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
            branches.append("divide")
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1 / ((1 - smooth) / factor + smooth))
            branches.append("smooth")
    return np.array(factors, dtype=np.float32), branches


def check_llama3_rope(spec: Spec, model) -> dict:
    ff, branches = llama3_rope_freqs(spec)
    assert set(branches) == {"keep", "divide", "smooth"}, branches
    base_inv = 1.0 / (spec.rope_theta ** (np.arange(0, spec.head_dim, 2, dtype=np.float64) / spec.head_dim))
    ours = base_inv / ff.astype(np.float64)
    hf = model.model.rotary_emb.inv_freq.double().numpy()
    rel = float(np.max(np.abs(ours - hf) / hf))
    assert rel < 1e-6, rel
    return {"branches": branches, "rope_freqs": ff.tolist(), "max_rel_err_vs_hf_inv_freq": rel}


# --------------------------------------------------------------------------
# GGUF model files
# --------------------------------------------------------------------------
def write_model_gguf(path: Path, spec: Spec, tensors: list[tuple[str, np.ndarray, bool]], file_type: int,
                     extra: list[tuple[str, np.ndarray]]):
    """tensors: (gguf_name, data, is_q8_raw)."""
    arch = spec.arch
    w = Writer(str(path), arch)
    w.add_name(f"kvprobe tiny {arch} random")
    w.add_file_type(file_type)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_layer_norm_rms_eps(spec.eps)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_vocab_size(N_VOCAB)
    if arch == "gemma3":
        w.add_sliding_window(GEMMA_SLIDING_WINDOW)
        w.add_rope_freq_base_swa(GEMMA_LOCAL_BASE)
    # fake tokenizer, driven by token ids only
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"<tok{i}>" for i in range(N_VOCAB)])
    w.add_token_types([3 if i in (BOS_ID, EOS_ID) else 1 for i in range(N_VOCAB)])
    w.add_empty_string_array(gguf.Keys.Tokenizer.MERGES)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)

    # extra tensors (rope_freqs) come first, like convert_hf_to_gguf
    for name, arr in extra:
        w.add_tensor(name, arr.astype(np.float32))
    for name, arr, is_q8 in tensors:
        if is_q8:
            w.add_tensor(name, arr, raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --------------------------------------------------------------------------
# reference generation
# --------------------------------------------------------------------------
@torch.no_grad()
def greedy_and_logits(model, prompt: list[int]):
    """Greedy 20 tokens with the KV cache, then one-shot logits for prompt+gen[:-1]."""
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([prompt], dtype=torch.long)
    out = model(input_ids=ids, cache=cache, use_cache=True)
    inc_rows = [out.logits[0]]
    gen = []
    next_tok = int(torch.argmax(out.logits[0, -1]))
    gen.append(next_tok)
    for _ in range(N_GEN - 1):
        out = model(input_ids=torch.tensor([[next_tok]]), cache=cache, use_cache=True)
        inc_rows.append(out.logits[0])
        next_tok = int(torch.argmax(out.logits[0, -1]))
        gen.append(next_tok)
    inc = torch.cat(inc_rows, 0)                       # [n_prompt + n_gen - 1, vocab]
    full = torch.tensor([prompt + gen[:-1]], dtype=torch.long)
    one = model(input_ids=full, use_cache=False).logits[0]
    assert inc.shape == one.shape, (inc.shape, one.shape)
    inc_err = float((inc - one).abs().max())
    assert inc_err < 1e-4, f"incremental vs one-shot logits differ: {inc_err}"
    # greedy tokens must be reproducible from the one-shot logits
    steps = one[len(prompt) - 1:]
    assert steps.argmax(-1).tolist() == gen
    top2 = torch.topk(steps, 2, dim=-1).values
    gaps = (top2[:, 0] - top2[:, 1])
    top2i = torch.topk(inc[len(prompt) - 1:], 2, dim=-1).values
    gap = min(float(gaps.min()), float((top2i[:, 0] - top2i[:, 1]).min()))
    return gen, one.numpy().astype(np.float32), gap, inc_err


def write_ref(path: Path, model_file: str, prompt: list[int], gen: list[int], logits: np.ndarray):
    w = GGUFWriter(str(path), "kvprobe-ref")
    w.add_string("ref.model_file", model_file)
    w.add_key_value("ref.prompt_tokens", [int(t) for t in prompt], GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_key_value("ref.generated_tokens", [int(t) for t in gen], GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
    w.add_string("ref.source", f"transformers {transformers.__version__} torch {torch.__version__.split('+')[0]} fp32 eager")
    w.add_uint32("ref.n_vocab", N_VOCAB)
    w.add_tensor("logits", np.ascontiguousarray(logits, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_prompt(seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(3, N_VOCAB, size=N_PROMPT)]


def process_arch(arch: str) -> list[dict]:
    spec = SPECS[arch]
    model_f32 = build_model(spec)
    info_extra = {}
    if arch == "gemma3":
        info_extra["layer_types"] = list(model_f32.config.layer_types)
        assert info_extra["layer_types"] == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
        assert float(model_f32.model.embed_tokens.embed_scale) == math.sqrt(N_EMBD)
        rot = model_f32.model.rotary_emb
        exp_g = 1.0 / (spec.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float) / spec.head_dim))
        exp_l = 1.0 / (GEMMA_LOCAL_BASE ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float) / spec.head_dim))
        assert torch.equal(rot.full_attention_inv_freq, exp_g)
        assert torch.equal(rot.sliding_attention_inv_freq, exp_l)
        for i, layer in enumerate(model_f32.model.layers):
            assert layer.self_attn.sliding_window == (GEMMA_SLIDING_WINDOW if i != 5 else None)
            assert layer.self_attn.scaling == 32 ** -0.5

    extra = []
    if arch == "llama":
        info_extra["llama3_rope"] = check_llama3_rope(spec, model_f32)
        ff, _ = llama3_rope_freqs(spec)
        extra.append(("rope_freqs.weight", ff))

    tmap = tensor_map(spec)
    sd32 = {n: p.detach().numpy().copy() for n, p in model_f32.named_parameters()}

    # ---- F32 file
    t32 = [(g, hf_to_gguf(spec, g, sd32[h]), False) for g, h in tmap]
    # ---- Q8_0 file and the HF model holding exactly the dequantized weights
    tq, sdq = [], {}
    for g, h in tmap:
        arr = hf_to_gguf(spec, g, sd32[h])
        if arr.ndim == 2:
            q = gguf.quants.quantize(arr, GGMLQuantizationType.Q8_0)
            dq = gguf.quants.dequantize(q, GGMLQuantizationType.Q8_0).reshape(arr.shape)
            tq.append((g, q, True))
            sdq[h] = torch.from_numpy(gguf_to_hf(spec, g, dq))
        else:
            tq.append((g, arr, False))
            sdq[h] = torch.from_numpy(sd32[h].copy())
    model_q8 = build_model(spec)
    # named_parameters() lists a tied lm_head only once (as embed_tokens)
    load_state(model_q8, {n: sdq[n] for n, _ in model_q8.named_parameters()})

    variants = [("f32", model_f32, t32, 0), ("q8_0", model_q8, tq, 7)]

    # ---- pick the first prompt seed giving a clear greedy margin in BOTH variants
    chosen = None
    for k in range(200):
        prompt = make_prompt(PROMPT_SEED_BASE + k)
        results = []
        ok = True
        for _, model, _, _ in variants:
            gen, logits, gap, inc_err = greedy_and_logits(model, prompt)
            if (gap <= MIN_GAP or len(set(gen)) < MIN_DISTINCT
                    or any(t in (BOS_ID, EOS_ID) for t in gen)):
                ok = False
                break
            results.append((gen, logits, gap, inc_err))
        if ok:
            chosen = (PROMPT_SEED_BASE + k, prompt, results)
            break
    assert chosen is not None, f"{arch}: no prompt seed with gap > {MIN_GAP}"
    seed, prompt, results = chosen

    infos = []
    for (vname, _, tensors, ftype), (gen, logits, gap, inc_err) in zip(variants, results):
        mname = f"tiny-{arch}-{vname}.gguf"
        write_model_gguf(FIXTURES / mname, spec, tensors, ftype, extra)
        write_ref(GOLDEN / f"tiny-{arch}-{vname}.ref.gguf", mname, prompt, gen, logits)
        infos.append({
            "model": mname, "prompt_seed": seed, "prompt": prompt, "generated": gen,
            "min_top1_top2_gap": gap, "incremental_vs_oneshot_max_abs": inc_err,
            "logit_std": float(logits.std()), **info_extra,
        })
    return infos


def main() -> int:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for arch in ("llama", "qwen3", "gemma3", "qwen2"):
        for info in process_arch(arch):
            print(f"{info['model']}: prompt_seed={info['prompt_seed']} "
                  f"min_gap={info['min_top1_top2_gap']:.4f} inc_err={info['incremental_vs_oneshot_max_abs']:.2e} "
                  f"logit_std={info['logit_std']:.3f}")
            print(f"    prompt={info['prompt']}")
            print(f"    generated={info['generated']}")
            if "layer_types" in info:
                print(f"    layer_types={info['layer_types']}")
            if "llama3_rope" in info:
                r = info["llama3_rope"]
                print(f"    llama3 rope branches={r['branches']} rope_freqs={r['rope_freqs']} "
                      f"max_rel_err_vs_hf={r['max_rel_err_vs_hf_inv_freq']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
