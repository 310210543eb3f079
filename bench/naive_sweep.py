"""The splice grid the way a transformers / TransformerLens / nnsight user writes it: one
greedy generation per cell, each with its own prefill, the cache edited in place at step W.
This is the peer of `kvprobe sweep` in bench/run.sh (sweep cells/s), and, run on the same
inputs, an end-to-end cross-check of kvprobe's sweep records.

Inputs come from kvprobe itself (`kvprobe sweep --prompts-only`): the same token ids, the
same BLANK donor, the same stop tokens and token limit. The model is the same GGUF,
dequantized to fp32 by transformers (eager attention), as in tools/make_real_goldens.py.
Definitions as in kvprobe (README, "The splice sweep"): prefill ids[:-1]; step w feeds one
token at position n-1+w; the edit runs once, right before step W, on prompt positions
[0, n-1) of every layer >= L (zero: K, V = 0; blank: K, V = the donor prefill's).

  tools/.venv/bin/python bench/naive_sweep.py --model M.gguf --dataset sst2:20 \
      --conditions clean,blank,zero --layers 0,10,20,29 --steps 0,2,8 --threads 2 --out naive.jsonl
Prints one JSON line: {"cells": N, "seconds": S, "cells_per_s": R} (model loading excluded).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DynamicCache


@torch.no_grad()
def prefill(model, ids):
    cache = DynamicCache()  # full layers: every position stays editable (Gemma's sliding layers too)
    model(input_ids=torch.tensor([ids], dtype=torch.long), cache=cache, use_cache=True)
    return cache


@torch.no_grad()
def run_cell(model, ex, cond, L, W, donor, n_layer):
    ids, n = ex["ids"], len(ex["ids"])
    stop = set(ex["stop_ids"])
    cache = prefill(model, ids[:-1])
    x, toks = ids[-1], []
    for step in range(ex["max_new_tokens"]):
        if step == W and cond != "clean":
            for layer in range(L, n_layer):
                lk = cache.layers[layer]
                if cond == "zero":
                    lk.keys[:, :, : n - 1, :] = 0.0
                    lk.values[:, :, : n - 1, :] = 0.0
                else:
                    dk = donor.layers[layer]
                    lk.keys[:, :, : n - 1, :] = dk.keys[:, :, : n - 1, :]
                    lk.values[:, :, : n - 1, :] = dk.values[:, :, : n - 1, :]
        out = model(input_ids=torch.tensor([[x]], dtype=torch.long), cache=cache, use_cache=True)
        x = int(torch.argmax(out.logits[0, -1]))
        if x in stop:
            break
        toks.append(x)
    return toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvprobe", default="build/kvprobe")
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--conditions", default="clean,blank,zero")
    ap.add_argument("--layers", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cmd = [a.kvprobe, "sweep", "-m", a.model, "--dataset", a.dataset, "--prompts-only"]
    if a.max_new_tokens:
        cmd += ["--max-new-tokens", str(a.max_new_tokens)]
    exs = [json.loads(l) for l in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()]
    conds = a.conditions.split(",")
    layers = [int(v) for v in a.layers.split(",")]
    steps = [int(v) for v in a.steps.split(",")]

    torch.set_num_threads(a.threads)
    d, f = os.path.split(os.path.abspath(a.model))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    n_layer = model.config.num_hidden_layers

    out = open(a.out, "w") if a.out else None
    cells = 0
    t0 = time.perf_counter()
    for ex in exs:
        donor = prefill(model, ex["blank_ids"][:-1]) if "blank" in conds else None
        grid = [("clean", n_layer, 0)] if "clean" in conds else []
        grid += [(c, L, W) for W in steps for c in conds if c != "clean" for L in layers]
        for cond, L, W in grid:
            toks = run_cell(model, ex, cond, L, W, donor, n_layer)
            cells += 1
            if out:
                out.write(json.dumps({"example_id": ex["example_id"], "condition": cond, "L": L, "W": W,
                                      "tokens": toks}) + "\n")
    dt = time.perf_counter() - t0
    print(json.dumps({"cells": cells, "seconds": round(dt, 3), "cells_per_s": cells / dt}))


if __name__ == "__main__":
    sys.exit(main())
