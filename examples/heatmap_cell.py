# %% [markdown]
# # One heatmap cell, by hand
#
# A sweep's heatmap cell (condition, L, W) is the accuracy of one edit over a dataset. Here the
# cell ZERO, L = 15, W = 2 of a small SST-2 sweep on SmolLM2-135M-Instruct is computed twice:
# by `kvprobe.sweep`, and step by step with the cache as numpy arrays — prompt, prefill, clean
# decode to step W, the edit written as zeros into layers >= L, greedy decoding on — and the two
# give the same tokens and the same accuracy.
#
#     python examples/heatmap_cell.py [N]          (from the repository root, after make models)

# %%
import os
import sys
import tempfile

import numpy as np

import kvprobe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DATA = os.environ.get("KVPROBE_DATA", os.path.join(ROOT, "..", "shared", "datasets"))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
L, W, MAX_NEW = 15, 2, 12

# %% The sweep: clean and ZERO at (L, W)
out = tempfile.mkdtemp(prefix="kvprobe-cell-")
recs = kvprobe.sweep(MODEL, f"sst2:{N}", out=out, conditions=["clean", "zero"], layers=[L], steps=[W],
                     max_new_tokens=MAX_NEW, threads=2, data_dir=DATA, precision="q8x2")
cell = {r["example_id"]: r for r in recs if r["condition"] == "zero"}
print(f"sweep: zero L={L} W={W} accuracy {np.mean([r['score'] for r in cell.values()]):.2f} over {len(cell)} examples")

# %% The same cell by hand
m = kvprobe.Model(MODEL, threads=2, precision="q8x2")
prompts = [p for p in kvprobe.sweep_prompts(MODEL, f"sst2:{N}", data_dir=DATA)]
same = 0
for p in prompts:
    ids, n = np.array(p["ids"], np.int32), len(p["ids"])
    kv = m.prefill(ids[:-1], n_ctx=n + MAX_NEW + 1)  # the last prompt token is decode step 0
    tokens, x = [], int(ids[-1])
    for step in range(MAX_NEW):
        if step == W:  # the edit: every prompt position but the last, every layer >= L, set to 0
            for layer in range(L, m.n_layers):
                kv.set_k(layer, np.zeros((n - 1, m.n_kv_heads, m.head_dim), np.float32))
                kv.set_v(layer, np.zeros((n - 1, m.n_kv_heads, m.head_dim_v), np.float32))
        t = int(np.argmax(m.decode(kv, [x], all_logits=False)))
        if m.is_end(t):
            break
        tokens.append(t)
        x = t
    r = cell[p["example_id"]]
    same += tokens == r["tokens"]
    print(f"{p['example_id']}: gold {r['gold']!r:11} by hand {m.detokenize(tokens)!r:28} sweep {r['text']!r}")
print(f"by hand: {same} of {len(prompts)} examples give the sweep's tokens")
assert same == len(prompts)
