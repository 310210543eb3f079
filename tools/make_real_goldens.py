#!/usr/bin/env python3
"""Reference ("golden") greedy runs of the REAL models under models/, computed
by Hugging Face transformers loading each GGUF file itself.

    tools/.venv/bin/python tools/make_real_goldens.py [NAME ...]
    (needs `make models`; qwen2.5-coder-1.5b needs `make models MODELS=all`)

For each model transformers builds the config, the tokenizer and the weights from
the GGUF file alone (`from_pretrained(models/, gguf_file=..., dtype=float32,
attn_implementation="eager")`, HF_HUB_OFFLINE=1). llama / gemma3 go through
transformers' legacy GGUF loader, which dequantizes every tensor to fp32 with
gguf-py and then undoes llama.cpp's conversion: llama q/k rows are un-permuted
(back to rotate_half RoPE order), gemma3 norm weights get the converter's +1
subtracted (Gemma3RMSNorm computes x_hat * (1 + w)). The script re-checks both
against its own dequantization of the file, checks that no parameter was left at
its random init, and checks the config transformers built.

qwen2 (Qwen2.5-Coder-0.5B / 1.5B-Instruct) loads the same way (no permutation, q/k/v biases).

Prompt: PROMPT, tokenized by the tokenizer transformers builds from the GGUF,
with BOS prepended iff the file says tokenizer.ggml.add_bos_token = true. The instruct
Qwen models get CHAT_PROMPT as one user turn rendered by apply_chat_template with the
GGUF's own template (ref.chat = 1; the prompt is ASCII, so the NFC normalizer that
transformers' GGUF tokenizer lacks cannot matter).
Then exactly N_GEN greedy steps (argmax, no EOS stop) with a KV cache, plus one
one-shot forward over prompt + generated[:-1] that must agree with the
incremental logits.

Output: tests/golden/real-<name>.ref.gguf (arch "kvprobe-ref")
  ref.model_file        STRING   basename of the model file
  ref.model_sha256      STRING   sha256 of the model file (checked before use)
  ref.prompt_text       STRING   the raw prompt, or the user message when ref.chat = 1
  ref.chat              UINT32   1: prompt_text is a user turn in the chat template
  ref.prompt_tokens     INT32[]  (BOS included when the file adds one)
  ref.generated_tokens  INT32[32] greedy continuation
  ref.generated_text    STRING   tokenizer.decode(generated), special tokens kept
  ref.source            STRING
  ref.n_vocab           UINT32
  ref.topk              UINT32   64
  logits0     F32 (n_vocab,)  logits at the last prompt position (predict gen[0])
  top_ids     I32 (32, 64)    step s: ids of the 64 largest logits that predicted
                              gen[s], by logit descending (ties: lower id first)
  top_logits  F32 (32, 64)    those logits
  top_gap     F32 (32,)       top1 - top2 logit at each step
All logits are from the incremental (KV-cached) run that chose the tokens.

Deterministic: single-threaded torch on the CPU, no timestamps in GGUFWriter output.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")   # the legacy GGUF loader uses plain tqdm

import numpy as np
import torch

import gguf
from gguf import GGUFReader, GGUFValueType, GGUFWriter
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

torch.set_num_threads(1)
transformers.utils.logging.disable_progress_bar()

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
GOLDEN = ROOT / "tests" / "golden"

PROMPT = "The capital of France is"
CHAT_PROMPT = "Write a Python function is_prime(n) that returns True when n is a prime number."
N_GEN = 32
TOPK = 64
ONESHOT_TOL = 1e-3   # max |incremental - one-shot| logit difference accepted

MODELS_SPEC = [
    {
        "name": "gemma3-270m",
        "file": "gemma-3-270m-q4_k_m.gguf",
        "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "arch": "gemma3",
    },
    {
        "name": "smollm2-135m",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "arch": "llama",
    },
    {
        "name": "qwen2.5-coder-0.5b",
        "file": "qwen2.5-coder-0.5b-instruct.gguf",
        "sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "arch": "qwen2",
        "chat": True,
    },
    {
        "name": "qwen2.5-coder-1.5b",
        "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "arch": "qwen2",
        "chat": True,
    },
]


def log(msg: str) -> None:
    print(msg, flush=True)


def fail(msg: str) -> None:
    raise SystemExit(f"make_real_goldens: FAIL: {msg}")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- GGUF metadata

def field_value(reader: GGUFReader, key: str):
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.contents()


# ---------------------------------------------------------------- config checks

def check_config(cfg, arch: str, reader: GGUFReader) -> list[str]:
    """Assert the config transformers built from the GGUF; return report lines."""
    problems = []

    def expect(name, got, want, rel=0.0):
        ok = (abs(got - want) <= rel * abs(want)) if rel else (got == want)
        if not ok:
            problems.append(f"{name}: got {got!r}, want {want!r}")

    def md(key):
        return field_value(reader, f"{arch}.{key}")

    expect("hidden_size", cfg.hidden_size, md("embedding_length"))
    expect("num_hidden_layers", cfg.num_hidden_layers, md("block_count"))
    expect("intermediate_size", cfg.intermediate_size, md("feed_forward_length"))
    expect("num_attention_heads", cfg.num_attention_heads, md("attention.head_count"))
    expect("num_key_value_heads", cfg.num_key_value_heads, md("attention.head_count_kv"))
    expect("max_position_embeddings", cfg.max_position_embeddings, md("context_length"))
    expect("vocab_size", cfg.vocab_size, len(reader.fields["tokenizer.ggml.tokens"].data))
    expect("tie_word_embeddings", cfg.tie_word_embeddings, not any(t.name == "output.weight" for t in reader.tensors))
    expect("bos_token_id", cfg.bos_token_id, field_value(reader, "tokenizer.ggml.bos_token_id"))
    expect("eos_token_id", cfg.eos_token_id, field_value(reader, "tokenizer.ggml.eos_token_id"))
    rp = cfg.rope_parameters
    if arch == "gemma3":
        expect("model_type", cfg.model_type, "gemma3_text")
        expect("rms_norm_eps", cfg.rms_norm_eps, 1e-6, rel=1e-6)
        expect("head_dim", cfg.head_dim, 256)
        expect("sliding_window", cfg.sliding_window, 512)
        want_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                      for i in range(cfg.num_hidden_layers)]
        expect("layer_types", list(cfg.layer_types), want_types)
        expect("rope full_attention", dict(rp["full_attention"]), {"rope_type": "default", "rope_theta": 1e6})
        expect("rope sliding_attention", dict(rp["sliding_attention"]), {"rope_type": "default", "rope_theta": 1e4})
        expect("query_pre_attn_scalar", cfg.query_pre_attn_scalar, 256)
        expect("hidden_activation", cfg.hidden_activation, "gelu_pytorch_tanh")
        expect("attn_logit_softcapping", cfg.attn_logit_softcapping, None)
        expect("final_logit_softcapping", cfg.final_logit_softcapping, None)
        expect("use_bidirectional_attention", cfg.use_bidirectional_attention, False)
        lines = [
            f"model_type={cfg.model_type} hidden={cfg.hidden_size} layers={cfg.num_hidden_layers} "
            f"ff={cfg.intermediate_size} heads={cfg.num_attention_heads}/{cfg.num_key_value_heads} "
            f"head_dim={cfg.head_dim} vocab={cfg.vocab_size} ctx={cfg.max_position_embeddings}",
            f"rms_norm_eps={cfg.rms_norm_eps!r} (the file's float32 1e-6) sliding_window={cfg.sliding_window} "
            f"query_pre_attn_scalar={cfg.query_pre_attn_scalar} act={cfg.hidden_activation} "
            f"tie_word_embeddings={cfg.tie_word_embeddings} softcaps=({cfg.attn_logit_softcapping}, "
            f"{cfg.final_logit_softcapping})",
            f"full-attention layers={[i for i, t in enumerate(cfg.layer_types) if t == 'full_attention']} "
            f"rope full={rp['full_attention']} sliding={rp['sliding_attention']}",
        ]
    elif arch == "qwen2":
        expect("model_type", cfg.model_type, "qwen2")
        expect("rms_norm_eps", cfg.rms_norm_eps, md("attention.layer_norm_rms_epsilon"), rel=1e-6)
        expect("head_dim", getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
               md("embedding_length") // md("attention.head_count"))
        expect("rope", dict(rp), {"rope_type": "default", "rope_theta": md("rope.freq_base")})
        expect("hidden_act", cfg.hidden_act, "silu")
        expect("use_sliding_window", cfg.use_sliding_window, False)
        lines = [
            f"model_type={cfg.model_type} hidden={cfg.hidden_size} layers={cfg.num_hidden_layers} "
            f"ff={cfg.intermediate_size} heads={cfg.num_attention_heads}/{cfg.num_key_value_heads} "
            f"vocab={cfg.vocab_size} ctx={cfg.max_position_embeddings}",
            f"rms_norm_eps={cfg.rms_norm_eps!r} rope={dict(rp)} act={cfg.hidden_act} "
            f"tie_word_embeddings={cfg.tie_word_embeddings} sliding_window={cfg.use_sliding_window}",
        ]
    else:
        expect("model_type", cfg.model_type, "llama")
        expect("rms_norm_eps", cfg.rms_norm_eps, 1e-5, rel=1e-6)
        expect("head_dim", cfg.head_dim, 64)
        expect("rope", dict(rp), {"rope_type": "default", "rope_theta": 1e5})
        expect("hidden_act", cfg.hidden_act, "silu")
        expect("attention_bias", cfg.attention_bias, False)
        expect("mlp_bias", cfg.mlp_bias, False)
        lines = [
            f"model_type={cfg.model_type} hidden={cfg.hidden_size} layers={cfg.num_hidden_layers} "
            f"ff={cfg.intermediate_size} heads={cfg.num_attention_heads}/{cfg.num_key_value_heads} "
            f"head_dim={cfg.head_dim} vocab={cfg.vocab_size} ctx={cfg.max_position_embeddings}",
            f"rms_norm_eps={cfg.rms_norm_eps!r} (the file's float32 1e-5) rope={dict(rp)} "
            f"act={cfg.hidden_act} tie_word_embeddings={cfg.tie_word_embeddings}",
        ]
    if problems:
        fail(f"{arch} config: " + "; ".join(problems))
    return lines


# ---------------------------------------------------------------- weight checks

LLAMA_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
GEMMA3_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
}


def hf_name(arch: str, gguf_name: str) -> str:
    base, suffix = gguf_name.rsplit(".", 1)
    assert suffix in ("weight", "bias") and (suffix == "weight" or arch == "qwen2"), gguf_name
    if base == "token_embd":
        return "model.embed_tokens.weight"
    if base == "output_norm":
        return "model.norm.weight"
    if base == "output":
        return "lm_head.weight"
    _, layer, kind = base.split(".", 2)
    table = GEMMA3_NAMES if arch == "gemma3" else LLAMA_NAMES
    return f"model.layers.{int(layer)}.{table[kind]}.{suffix}"


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Invert llama.cpp's LlamaModel.permute on the rows (output dim) of w.

    llama.cpp stores, per head of width hd, HF row k*hd/2 + i at GGUF row 2i + k
    (k in {0, 1}), so that adjacent-pair RoPE equals HF's rotate_half RoPE.
    """
    rows = w.shape[0]
    hd = rows // n_head
    idx = np.empty(rows, dtype=np.int64)   # idx[hf_row] = gguf_row
    for h in range(n_head):
        for k in range(2):
            for i in range(hd // 2):
                idx[h * hd + k * (hd // 2) + i] = h * hd + 2 * i + k
    return w[idx]


def check_weights(model, reader: GGUFReader, arch: str, cfg) -> list[str]:
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    for k, v in sd.items():
        if v.dtype != torch.float32:
            fail(f"{arch}: parameter {k} is {v.dtype}, not float32")
    seen = set()
    n_perm = n_norm = 0
    perm_changed = []
    norm_means = []
    for t in reader.tensors:
        name = hf_name(arch, t.name)
        if name not in sd:
            fail(f"{arch}: GGUF tensor {t.name} -> {name} not in the model")
        raw = gguf.quants.dequantize(t.data, t.tensor_type)
        raw = np.asarray(raw, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        want = raw
        kind = t.name.split(".")[-2]
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            nh = cfg.num_attention_heads if kind == "attn_q" else cfg.num_key_value_heads
            want = unpermute_rows(raw, nh)
            n_perm += 1
            perm_changed.append(not np.array_equal(want, raw))
        if arch == "gemma3" and t.name.endswith("norm.weight"):
            want = raw - np.float32(1.0)
            n_norm += 1
            if t.name == "blk.0.attn_norm.weight":
                norm_means = [float(raw.mean()), float(sd[name].mean())]
        got = sd[name].numpy()
        if got.shape != want.shape:
            fail(f"{arch}: {t.name}: shape {got.shape} != expected {want.shape}")
        if not np.array_equal(got, want):
            d = float(np.max(np.abs(got.astype(np.float64) - want)))
            fail(f"{arch}: {t.name} -> {name}: loaded weight differs from own dequantization (max {d:g})")
        seen.add(name)
    # every parameter must come from the file (a tied lm_head is the embedding)
    tied = cfg.tie_word_embeddings
    missing = [k for k in sd if k not in seen and not (tied and k == "lm_head.weight")]
    if missing:
        fail(f"{arch}: parameters not loaded from the GGUF: {missing[:8]}")
    if tied:
        if "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"]):
            fail(f"{arch}: lm_head is not the token embedding")
        if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            fail(f"{arch}: lm_head does not share storage with embed_tokens")
    lines = [f"all {len(reader.tensors)} GGUF tensors == own gguf-py dequantization after the expected transform; "
             f"no parameter left unloaded; lm_head {'tied to embed_tokens' if tied else '= output.weight'}; all fp32"]
    if arch == "llama":
        if n_perm != 2 * cfg.num_hidden_layers or not all(perm_changed):
            fail(f"llama: q/k un-permute not verified ({n_perm} tensors, changed={perm_changed})")
        lines.append(f"q/k un-permute verified on {n_perm} tensors (loaded = rows inverse-permuted; "
                     f"raw GGUF rows differ from loaded in every one)")
    elif arch == "qwen2":
        n_bias = sum(t.name.endswith(".bias") for t in reader.tensors)
        if n_bias != 3 * cfg.num_hidden_layers:
            fail(f"qwen2: expected {3 * cfg.num_hidden_layers} q/k/v biases, saw {n_bias}")
        lines.append(f"{n_bias} q/k/v biases loaded; no permutation")
    else:
        if n_norm != 6 * cfg.num_hidden_layers + 1:
            fail(f"gemma3: expected {6 * cfg.num_hidden_layers + 1} norm tensors, saw {n_norm}")
        lines.append(f"-1 verified on all {n_norm} norm weights (blk.0.attn_norm mean: file {norm_means[0]:.4f}, "
                     f"loaded {norm_means[1]:.4f}); embed_scale={float(model.model.embed_tokens.embed_scale):.6f}")
    return lines


# ---------------------------------------------------------------- generation

def top_k_sorted(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest logits, descending; ties broken by lower token id first."""
    order = np.lexsort((np.arange(logits.shape[0]), -logits.astype(np.float64)))[:k]
    return order.astype(np.int32), logits[order].astype(np.float32)


@torch.no_grad()
def greedy(model, prompt: list[int], n_gen: int) -> tuple[list[int], np.ndarray]:
    """Exactly n_gen argmax steps with a KV cache. Returns (tokens, logits[n_gen, n_vocab])."""
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([prompt], dtype=torch.long)
    pos = torch.arange(len(prompt)).unsqueeze(0)
    out = model(input_ids=ids, position_ids=pos, cache=cache, use_cache=True)
    gen, rows = [], []
    n = len(prompt)
    for s in range(n_gen):
        row = out.logits[0, -1].float().numpy().copy()
        rows.append(row)
        tok = int(np.argmax(row))   # first maximal index, as torch.argmax / llama.cpp greedy
        gen.append(tok)
        if s + 1 == n_gen:
            break
        out = model(input_ids=torch.tensor([[tok]]), position_ids=torch.tensor([[n]]),
                    cache=cache, use_cache=True)
        n += 1
    if cache.get_seq_length() != len(prompt) + n_gen - 1:
        fail(f"cache holds {cache.get_seq_length()} positions")
    return gen, np.stack(rows)


@torch.no_grad()
def oneshot(model, tokens: list[int]) -> np.ndarray:
    ids = torch.tensor([tokens], dtype=torch.long)
    out = model(input_ids=ids, use_cache=False)
    return out.logits[0].float().numpy()


# ---------------------------------------------------------------- output

def write_ref(path: Path, spec: dict, prompt: list[int], gen: list[int], gen_text: str,
              source: str, logits: np.ndarray) -> dict:
    n_vocab = logits.shape[1]
    top_ids = np.zeros((N_GEN, TOPK), dtype=np.int32)
    top_logits = np.zeros((N_GEN, TOPK), dtype=np.float32)
    for s in range(N_GEN):
        top_ids[s], top_logits[s] = top_k_sorted(logits[s], TOPK)
        if top_ids[s, 0] != gen[s]:
            fail(f"{spec['name']}: step {s}: top id {top_ids[s, 0]} != generated {gen[s]}")
    top_gap = (top_logits[:, 0] - top_logits[:, 1]).astype(np.float32)

    w = GGUFWriter(str(path), "kvprobe-ref")
    w.add_string("ref.model_file", spec["file"])
    w.add_string("ref.model_sha256", spec["sha256"])
    w.add_string("ref.prompt_text", CHAT_PROMPT if spec.get("chat") else PROMPT)
    w.add_uint32("ref.chat", 1 if spec.get("chat") else 0)
    w.add_key_value("ref.prompt_tokens", [int(t) for t in prompt], GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.INT32)
    w.add_key_value("ref.generated_tokens", [int(t) for t in gen], GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.INT32)
    w.add_string("ref.generated_text", gen_text)
    w.add_string("ref.source", source)
    w.add_uint32("ref.n_vocab", n_vocab)
    w.add_uint32("ref.topk", TOPK)
    w.add_tensor("logits0", np.ascontiguousarray(logits[0], dtype=np.float32))
    w.add_tensor("top_ids", np.ascontiguousarray(top_ids))
    w.add_tensor("top_logits", np.ascontiguousarray(top_logits))
    w.add_tensor("top_gap", np.ascontiguousarray(top_gap))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"top_gap": top_gap}


def verify_file(path: Path, spec: dict, prompt, gen, logits) -> None:
    r = GGUFReader(str(path))
    if field_value(r, "general.architecture") != "kvprobe-ref":
        fail(f"{path}: architecture")
    if list(field_value(r, "ref.prompt_tokens")) != prompt:
        fail(f"{path}: prompt_tokens round trip")
    if list(field_value(r, "ref.generated_tokens")) != gen:
        fail(f"{path}: generated_tokens round trip")
    t = {x.name: x for x in r.tensors}
    if not np.array_equal(np.asarray(t["logits0"].data), logits[0]):
        fail(f"{path}: logits0 round trip")
    ids = np.asarray(t["top_ids"].data)
    if ids.shape != (N_GEN, TOPK) or t["top_ids"].tensor_type != gguf.GGMLQuantizationType.I32:
        fail(f"{path}: top_ids shape/type {ids.shape} {t['top_ids'].tensor_type}")
    if list(ids[:, 0]) != gen:
        fail(f"{path}: top_ids[:, 0] != generated")
    if path.stat().st_size >= 2_000_000:
        fail(f"{path}: {path.stat().st_size} bytes, over 2 MB")


# ---------------------------------------------------------------- main

def run_model(spec: dict) -> dict:
    t0 = time.time()
    path = MODELS / spec["file"]
    if not path.exists():
        fail(f"{path} missing: run `make models` first")
    digest = sha256_file(path)
    if digest != spec["sha256"]:
        fail(f"{path}: sha256 {digest} != expected {spec['sha256']}")
    reader = GGUFReader(str(path))
    arch = field_value(reader, "general.architecture")
    if arch != spec["arch"]:
        fail(f"{path}: architecture {arch!r}")
    log(f"== {spec['name']} ({spec['file']}, arch {arch})")

    # --- tokenizer and prompt ids
    tok = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=spec["file"])
    add_bos = bool(field_value(reader, "tokenizer.ggml.add_bos_token"))
    bos_id = int(field_value(reader, "tokenizer.ggml.bos_token_id"))
    if spec.get("chat"):
        text = tok.apply_chat_template([{"role": "user", "content": CHAT_PROMPT}], add_generation_prompt=True,
                                       tokenize=False)
        body = tok(text, add_special_tokens=False)["input_ids"]
        prompt = list(body)
        if add_bos or not CHAT_PROMPT.isascii():
            fail(f"{spec['name']}: chat prompt needs add_bos_token false and ASCII content")
        if tok.apply_chat_template([{"role": "user", "content": CHAT_PROMPT}], add_generation_prompt=True,
                                   tokenize=True)["input_ids"] != prompt:
            fail(f"{spec['name']}: apply_chat_template ids differ")
        log(f"chat prompt: {text!r}")
    else:
        body = tok(PROMPT, add_special_tokens=False)["input_ids"]
        prompt = ([bos_id] if add_bos else []) + list(body)
        default_ids = tok(PROMPT)["input_ids"]
        if default_ids != prompt:
            fail(f"{spec['name']}: tokenizer default ids {default_ids} != {prompt} (add_bos_token={add_bos})")
        if tok.decode(body, clean_up_tokenization_spaces=False) != PROMPT:
            fail(f"{spec['name']}: decode(prompt) = {tok.decode(body)!r}")
    pieces = tok.convert_ids_to_tokens(prompt)
    log(f"tokenizer: {type(tok).__name__}; add_bos_token={add_bos} (bos {bos_id})")
    log(f"prompt ids: {prompt}  pieces: {pieces}")

    # --- model
    model, info = AutoModelForCausalLM.from_pretrained(
        str(MODELS), gguf_file=spec["file"], dtype=torch.float32,
        attn_implementation="eager", output_loading_info=True)
    model.eval()
    bad = {k: v for k, v in info.items() if v}
    if bad:
        fail(f"{spec['name']}: loading info {bad}")
    if model.config._attn_implementation != "eager":
        fail(f"{spec['name']}: attention {model.config._attn_implementation}")
    log(f"model: {type(model).__name__}, attn={model.config._attn_implementation}, "
        f"quantizer={type(getattr(model, 'hf_quantizer', None)).__name__}")
    for line in check_config(model.config, arch, reader):
        log("config: " + line)
    for line in check_weights(model, reader, arch, model.config):
        log("weights: " + line)
    t_load = time.time() - t0

    # --- greedy decode and one-shot cross-check
    gen, logits = greedy(model, prompt, N_GEN)
    full = oneshot(model, prompt + gen[:-1])
    shot = full[len(prompt) - 1:]
    diff = float(np.max(np.abs(shot.astype(np.float64) - logits)))
    shot_gen = [int(x) for x in np.argmax(shot, axis=1)]
    log(f"one-shot vs incremental: max |diff| = {diff:.3g} over {N_GEN}x{logits.shape[1]} logits; "
        f"argmax agree: {shot_gen == gen}")
    if diff > ONESHOT_TOL or shot_gen != gen:
        fail(f"{spec['name']}: one-shot forward disagrees with incremental decode")
    if logits.shape[1] != model.config.vocab_size:
        fail(f"{spec['name']}: logits width {logits.shape[1]}")

    gen_text = tok.decode(gen, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    source = (f"transformers {transformers.__version__} from_pretrained(gguf_file) fp32 eager, "
              f"torch {torch.__version__.split('+')[0]}, gguf {importlib.metadata.version('gguf')}")
    out = GOLDEN / f"real-{spec['name']}.ref.gguf"
    res = write_ref(out, spec, prompt, gen, gen_text, source, logits)
    verify_file(out, spec, prompt, gen, logits)
    gaps = res["top_gap"]
    log(f"generated ids: {gen}")
    log(f"generated text: {gen_text!r}")
    log(f"top_gap: min {gaps.min():.4f} at step {int(gaps.argmin())}; steps with gap < 0.1: "
        f"{[int(i) for i in np.nonzero(gaps < 0.1)[0]]}")
    log(f"wrote {out.relative_to(ROOT)} ({out.stat().st_size} bytes, sha256 {sha256_file(out)}); "
        f"load+checks {t_load:.1f}s, total {time.time() - t0:.1f}s")
    del model
    return {"name": spec["name"], "prompt": prompt, "gen": gen}


def main() -> int:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    names = sys.argv[1:]
    for spec in MODELS_SPEC:
        if names and spec["name"] not in names:
            continue
        run_model(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
