#!/usr/bin/env python3
"""Write small, valid GGUF seeds for the libFuzzer corpus (fuzz/corpus/gguf/).

Each seed is a complete model of a supported family with tiny dimensions and a real
tokenizer layout (byte-level BPE with merges, or SentencePiece with byte fallback), so the
fuzzer starts from inputs that reach the model loader, the tokenizer and one forward pass.
Deterministic: rerunning rewrites identical files. Needs only numpy and gguf
(tools/requirements.txt)."""
import os
import numpy as np
import gguf

OUT = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "gguf")


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def write_model(name, arch, tok, quant, layers=2, d=32, ff=64, heads=2, kv=1, hd=16):
    rng = np.random.default_rng(len(name))
    w = gguf.GGUFWriter(os.path.join(OUT, name), arch)
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    if arch == "gemma3":
        w.add_sliding_window(4)
    tokens, types, scores, merges, model, pre = tok
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges:
        w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    V = len(tokens)

    def mat(name, n_out, n_in):
        a = (rng.standard_normal((n_out, n_in)) * 0.1).astype(np.float32)
        if quant:
            w.add_tensor(name, gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a)

    def vec(name, n):
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", V, d)
    vec("output_norm.weight", d)
    for l in range(layers):
        p = f"blk.{l}."
        vec(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", heads * hd, d)
        mat(p + "attn_k.weight", kv * hd, d)
        mat(p + "attn_v.weight", kv * hd, d)
        mat(p + "attn_output.weight", d, heads * hd)
        if arch == "qwen2":
            for x, n in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                w.add_tensor(p + f"attn_{x}.bias", (0.1 * rng.standard_normal(n)).astype(np.float32))
        if arch in ("qwen3", "gemma3"):
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        if arch == "gemma3":
            vec(p + "post_attention_norm.weight", d)
            vec(p + "post_ffw_norm.weight", d)
        vec(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d)
        mat(p + "ffn_up.weight", ff, d)
        mat(p + "ffn_down.weight", d, ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def bpe_vocab(pre):
    b2u = bytes_to_unicode()
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [b2u[b] for b in range(256)]
    merges = ["Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "H e", "He l", "Hel l", "Hell o", "1 2"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, types, None, merges, "gpt2", pre


def spm_vocab():
    tokens = ["<pad>", "<bos>", "<eos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    types = [3, 3, 3, 2, 3, 3]
    scores = [-1000.0] * 6
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(6)
        scores.append(0.0)
    for i, piece in enumerate(["▁", "H", "e", "l", "o", "He", "ll", "Hell", "Hello", "▁w", "▁wor", "ld", "x", "▁x"]):
        tokens.append(piece)
        types.append(1)
        scores.append(-float(i))
    return tokens, types, scores, None, "llama", "default"


def main():
    os.makedirs(OUT, exist_ok=True)
    write_model("llama-bpe-f32.gguf", "llama", bpe_vocab("llama-bpe"), quant=False)
    write_model("qwen3-bpe-q8_0.gguf", "qwen3", bpe_vocab("qwen2"), quant=True)
    write_model("qwen2-bpe-q8_0.gguf", "qwen2", bpe_vocab("qwen2"), quant=True, layers=1)
    write_model("gemma3-spm-q8_0.gguf", "gemma3", spm_vocab(), quant=True, layers=7, d=32)
    write_model("smollm-bpe-q8_0.gguf", "llama", bpe_vocab("smollm"), quant=True, layers=1)
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))


if __name__ == "__main__":
    main()
