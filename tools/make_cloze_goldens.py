#!/usr/bin/env python3
"""Reference cloze scores: transformers' log-probability of every ARC-easy option after the
cloze prompt, for the two real models, so `kvprobe sweep --format cloze --readout loglik`
can be checked against it (tests/unit/test_cloze.c).

    tools/.venv/bin/python tools/make_cloze_goldens.py      (needs `make models` first)

Model and tokenizer: transformers loads each GGUF itself, fp32, eager attention, exactly as
tools/make_real_goldens.py does (whose checks of config and weights are not repeated here).

Per example (the first N_EX rows of ../shared/datasets/arc_easy/test.jsonl):
  prompt    = [BOS if the file's add_bos_token] + tok("Question: " + stem + "\\nAnswer:")
  option k  = tok(" " + text_k), tokenized alone (no special tokens), as lm-eval does
  logprob_k = sum over j of log softmax(logits at prompt + option[:j])[option[j]], from one
              forward pass over prompt + option, accumulated in float64

Output: tests/golden/cloze/<name>.arc-easy.json
  {model_file, model_sha256, source, examples: [{id, gold, prompt_ids,
   options: [{text, ids, logprob}]}]}
Deterministic (single-threaded torch); a rerun writes the same file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")

import torch
import transformers
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_real_goldens import MODELS, MODELS_SPEC, field_value, sha256_file  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.disable_progress_bar()

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "datasets" / "arc_easy" / "test.jsonl"
OUT = ROOT / "tests" / "golden" / "cloze"
N_EX = 8


def arc_rows(n: int) -> list[dict]:
    rows = []
    with open(DATA) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


def run(spec: dict) -> None:
    path = MODELS / spec["file"]
    if sha256_file(path) != spec["sha256"]:
        raise SystemExit(f"{path}: sha256 mismatch (run `make models`)")
    reader = GGUFReader(str(path))
    add_bos = bool(field_value(reader, "tokenizer.ggml.add_bos_token"))
    bos = int(field_value(reader, "tokenizer.ggml.bos_token_id"))
    tok = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=spec["file"])
    model = AutoModelForCausalLM.from_pretrained(str(MODELS), gguf_file=spec["file"], dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    examples = []
    for row in arc_rows(N_EX):
        q = row["question"]
        prompt = ([bos] if add_bos else []) + tok("Question: " + q["stem"] + "\nAnswer:", add_special_tokens=False)["input_ids"]
        options = []
        for ch in q["choices"]:
            ids = tok(" " + ch["text"], add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logits = model(torch.tensor([prompt + ids])).logits[0].double()
            lsm = torch.log_softmax(logits, dim=-1)
            lp = sum(float(lsm[len(prompt) - 1 + j, t]) for j, t in enumerate(ids))
            options.append({"text": ch["text"], "ids": ids, "logprob": round(lp, 6)})
        gold = [c["label"] for c in q["choices"]].index(row["answerKey"])
        examples.append({"id": "arc-easy-" + row["id"], "gold": "ABCDEFGH"[gold], "prompt_ids": prompt, "options": options})
        print(spec["name"], examples[-1]["id"], [o["logprob"] for o in options], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    doc = {
        "model_file": spec["file"],
        "model_sha256": spec["sha256"],
        "source": f"transformers {transformers.__version__} from_pretrained(gguf_file) fp32 eager, "
                  f"torch {torch.__version__.split('+')[0]}",
        "examples": examples,
    }
    out = OUT / f"{spec['name']}.arc-easy.json"
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print("wrote", out.relative_to(ROOT))


def main() -> int:
    for spec in MODELS_SPEC:
        if len(sys.argv) > 1 and spec["name"] not in sys.argv[1:]:
            continue
        run(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
