"""kvprobe against its peers, measured in the same run on the same GGUF files (bench/run.sh).

  prompt processing (512 tokens) and generation (128 tokens), 1 and 2 threads: kvprobe
      generate vs llama.cpp (llama-cpp-python, bench/llama_cpp_bench.py); REPS repetitions,
      engines interleaved, medians; greedy, end-of-generation ignored, the same token ids.
  memory: peak RSS of kvprobe generate vs model file + KV cache.
  kernels: kvp_qdot_rows alone over every weight, 1 thread, batch 1 / 16 / 64 (bench/qdot_bench.c),
      against the core's integer-dot peak (qdot-bench --peak).
  bandwidth: read bandwidth (bench/bandwidth.c) and decode tok/s x bytes read per token.
  sweep: the same grid (SST-2 x {clean, blank, zero} x 4 L x 3 W) by kvprobe sweep batched,
      kvprobe sweep --unbatched, and the naive transformers loop (bench/naive_sweep.py), on the
      models of --sweep-models (default SmolLM2 and Gemma: the naive loop on the 1.5B model
      takes over 35 minutes on 2 cores; --sweep-models qwen1.5b,... to include it).

Writes bench/out/results.json and ends with
  ratios: pp_t1=X pp_t2=X tg_t1=X tg_t2=X sweep_vs_naive=X      (kvprobe / peer, Gemma 3 270M)
with the same line for SmolLM2-135M above it. Orchestration only: every number comes from
the engines themselves."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVPROBE = os.path.join(ROOT, "build", "kvprobe")
QDOT_BENCH = os.path.join(ROOT, "build", "qdot-bench")
LLAMA_PY = os.path.join(ROOT, "bench", ".venv", "bin", "python")
TOOLS_PY = os.path.join(ROOT, "tools", ".venv", "bin", "python")

MODELS = [
    {"key": "smollm2", "name": "SmolLM2-135M-Instruct Q4_1", "file": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
     "layers": "0,10,20,29"},
    {"key": "qwen1.5b", "name": "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
     "file": "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "layers": "0,9,18,27"},
    {"key": "gemma3", "name": "Gemma 3 270M Q4_K_M", "file": "models/gemma-3-270m-q4_k_m.gguf",
     "layers": "0,6,12,17"},
]
N_PROMPT, N_GEN = 512, 128
SWEEP = {"dataset": "sst2:20", "conditions": "clean,blank,zero", "steps": "0,2,8"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, **kw)


def prompt_ids(model):
    """512 token ids of GSM8K questions, tokenized by kvprobe (both engines get these ids)."""
    rows = [json.loads(l) for l in open(os.path.join(ROOT, "..", "shared", "datasets", "gsm8k", "test.jsonl"))]
    text = " ".join(r["question"] for r in rows[:60])
    out = run([KVPROBE, "tokenize", "-m", model, "--ids", "-f", "-"], input=text).stdout.split()
    if len(out) < N_PROMPT:
        sys.exit(f"bench: only {len(out)} prompt tokens")
    return ",".join(out[:N_PROMPT])


GEN_RE = re.compile(r"prompt (\d+) tokens in [\d.]+ s \(([\d.]+) tok/s\), generated (\d+) tokens in [\d.]+ s \(([\d.]+) tok/s\)")


def kvprobe_generate(model, ids, threads):
    """(pp tok/s, tg tok/s, peak RSS bytes) of one kvprobe generate run."""
    cmd = [KVPROBE, "generate", "-m", model, "--tokens", ids, "-n", str(N_GEN), "--ignore-eog", "--ids",
           "-t", str(threads), "--batch", str(N_PROMPT)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    out, err = p.communicate()
    if p.returncode:
        sys.exit(f"bench: kvprobe generate failed: {err}")
    m = GEN_RE.search(err)
    if not m or int(m.group(1)) != N_PROMPT or int(m.group(3)) != N_GEN:
        sys.exit(f"bench: cannot read kvprobe's timing line: {err}")
    return float(m.group(2)), float(m.group(4)), out.split()


def peak_rss(cmd):
    """Peak resident set size (bytes) of a command."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _, status, ru = os.wait4(p.pid, 0)
    if status:
        sys.exit(f"bench: {cmd[0]} failed")
    return ru.ru_maxrss * 1024


def llama_generate(model, ids, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".ids", delete=False) as f:
        f.write(ids)
    try:
        out = run([LLAMA_PY, os.path.join(ROOT, "bench", "llama_cpp_bench.py"), model, str(threads), f.name, str(N_GEN),
                   "1"]).stdout
    finally:
        os.unlink(f.name)
    r = json.loads(out.strip().splitlines()[-1])
    return r["pp_tok_s"], r["tg_tok_s"], [str(t) for t in r["tokens"]]


def inspect(model):
    return json.loads(run([KVPROBE, "inspect", "--json", model]).stdout)


def bandwidth(threads):
    exe = os.path.join(ROOT, "build", "bench-bandwidth")
    out = run([exe, "1024", str(threads), "5"]).stdout
    return float(re.search(r"read_gbps=([\d.]+)", out).group(1)) * 1e9


def kv_pairs(text):
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", text)}


def kernel(model):
    """The integer kernels alone over every weight, 1 thread (bench/qdot_bench.c): the decode
    product (batch 1, q8 as in generate) and the sweep's batched steps (16 and 64 rows, q8x2)."""
    out = {}
    for key, batch, prec in (("b1_q8", 1, "q8"), ("b16_q8x2", 16, "q8x2"), ("b64_q8x2", 64, "q8x2")):
        text = run([QDOT_BENCH, model, "-b", str(batch), "-p", prec, "-s", "3"]).stdout
        out[key] = kv_pairs(text.strip().splitlines()[-1])
    return out


def timed(cmd):
    t0 = time.perf_counter()
    run(cmd)
    return time.perf_counter() - t0


def sweep(m, threads, tmp):
    """cells/s of kvprobe batched, kvprobe unbatched, naive transformers."""
    grid = ["--dataset", SWEEP["dataset"], "--conditions", SWEEP["conditions"], "--layers", m["layers"], "--steps",
            SWEEP["steps"], "-t", str(threads)]
    res = {}
    for mode, extra in (("batched", []), ("unbatched", ["--unbatched"])):
        out = os.path.join(tmp, f"{m['key']}-{mode}")
        secs = timed([KVPROBE, "sweep", "-m", m["file"], *grid, "--quiet", "--out", out, *extra])
        cells = sum(1 for _ in open(os.path.join(out, "results.jsonl")))
        res[mode] = {"cells": cells, "seconds": round(secs, 3), "cells_per_s": cells / secs}
    if os.path.exists(TOOLS_PY):
        naive_out = os.path.join(tmp, f"{m['key']}-naive.jsonl")
        out = run([TOOLS_PY, os.path.join(ROOT, "bench", "naive_sweep.py"), "--model", m["file"], "--dataset",
                   SWEEP["dataset"], "--conditions", SWEEP["conditions"], "--layers", m["layers"], "--steps",
                   SWEEP["steps"], "--threads", str(threads), "--out", naive_out]).stdout
        res["naive"] = json.loads(out.strip().splitlines()[-1])
        # The naive loop is exact fp32: it must reproduce kvprobe --exact cell for cell.
        exact_out = os.path.join(tmp, f"{m['key']}-exact")
        secs = timed([KVPROBE, "sweep", "-m", m["file"], *grid, "--quiet", "--exact", "--out", exact_out])
        cells = sum(1 for _ in open(os.path.join(exact_out, "results.jsonl")))
        res["batched_exact"] = {"cells": cells, "seconds": round(secs, 3), "cells_per_s": cells / secs}
        key = lambda r: (r["example_id"], r["condition"], r["L"], r["W"])
        ours = {key(r): r["tokens"] for r in map(json.loads, open(os.path.join(exact_out, "results.jsonl")))}
        theirs = {key(r): r["tokens"] for r in map(json.loads, open(naive_out))}
        res["naive_equals_exact"] = sum(ours.get(k) == v for k, v in theirs.items())
        res["naive_cells"] = len(theirs)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 5)))
    ap.add_argument("--models", default="smollm2,qwen1.5b,gemma3")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--sweep-models", default="smollm2,gemma3")
    a = ap.parse_args()
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="kvprobe-bench-")
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu_name(), "reps": a.reps,
               "kvprobe_isa": isa(), "bandwidth": {}, "models": {}}
    for t in (1, 2):
        results["bandwidth"][t] = bandwidth(t)
        log(f"read bandwidth, {t} thread(s): {results['bandwidth'][t] / 1e9:.2f} GB/s")
    results["int_dot_peak"] = kv_pairs(run([QDOT_BENCH, "--peak"]).stdout)
    log(f"integer-dot peak, 1 thread: {results['int_dot_peak']}")
    lines = []
    for m in MODELS:
        if m["key"] not in a.models.split(","):
            continue
        if not os.path.exists(os.path.join(ROOT, m["file"])):
            log(f"== {m['name']}: {m['file']} missing (make models MODELS=all), skipped")
            continue
        log(f"== {m['name']}")
        ids = prompt_ids(m["file"])
        info = inspect(m["file"])
        r = {"file": m["file"], "file_bytes": os.path.getsize(os.path.join(ROOT, m["file"]))}
        for t in (1, 2):
            kv_pp, kv_tg, ll_pp, ll_tg = [], [], [], []
            agree = None
            for rep in range(a.reps):
                p, g, ktoks = kvprobe_generate(m["file"], ids, t)
                kv_pp.append(p), kv_tg.append(g)
                p, g, ltoks = llama_generate(m["file"], ids, t)
                ll_pp.append(p), ll_tg.append(g)
                agree = sum(1 for x, y in zip(ktoks, ltoks) if x == y) if agree is None else agree
                log(f"  t={t} rep {rep + 1}: kvprobe pp {kv_pp[-1]:.1f} tg {kv_tg[-1]:.1f} | "
                    f"llama.cpp pp {ll_pp[-1]:.1f} tg {ll_tg[-1]:.1f} tok/s")
            first_diff = next((i for i, (x, y) in enumerate(zip(ktoks, ltoks)) if x != y), len(ktoks))
            r[f"t{t}"] = {"kvprobe_pp": statistics.median(kv_pp), "kvprobe_tg": statistics.median(kv_tg),
                          "llama_pp": statistics.median(ll_pp), "llama_tg": statistics.median(ll_tg),
                          "kvprobe_pp_all": kv_pp, "kvprobe_tg_all": kv_tg, "llama_pp_all": ll_pp,
                          "llama_tg_all": ll_tg, "greedy_tokens_equal_prefix": first_diff}
        # memory: peak RSS of a 1-thread generate vs file + KV cache (f32, prompt + generated)
        hp = info["hparams"]
        kv_bytes = (N_PROMPT + N_GEN) * hp["n_layer"] * hp["n_head_kv"] * (hp["head_dim"] + hp["head_dim_v"]) * 4
        rss = peak_rss([KVPROBE, "generate", "-m", m["file"], "--tokens", ids, "-n", str(N_GEN), "--ignore-eog",
                        "--ids", "-t", "1", "--batch", str(N_PROMPT)])
        r["memory"] = {"peak_rss": rss, "kv_bytes": kv_bytes, "overhead": rss - r["file_bytes"] - kv_bytes}
        # bytes read per generated token: every weight (the tied LM head reads all of token_embd;
        # an untied model reads one embedding row) + K and V up to the mean context
        weights = 0
        tied = hp["tied_output"]
        for ten in info["tensors"]:
            if ten["name"] == "token_embd.weight" and not tied:
                continue
            weights += ten["bytes"]
        kv_read = (N_PROMPT + N_GEN // 2) * hp["n_layer"] * hp["n_head_kv"] * (hp["head_dim"] + hp["head_dim_v"]) * 4
        r["bytes_per_token"] = weights + kv_read
        for t in (1, 2):
            r[f"t{t}"]["tg_fraction_of_bandwidth"] = r[f"t{t}"]["kvprobe_tg"] * r["bytes_per_token"] / results["bandwidth"][t]
        log("  kernels alone (1 thread) ...")
        r["kernel"] = kernel(m["file"])
        if not a.no_sweep and m["key"] in a.sweep_models.split(","):
            log("  sweep grid (2 threads) ...")
            r["sweep"] = sweep(m, 2, tmp)
        results["models"][m["key"]] = r
        rat = {f"pp_t{t}": r[f"t{t}"]["kvprobe_pp"] / r[f"t{t}"]["llama_pp"] for t in (1, 2)}
        rat.update({f"tg_t{t}": r[f"t{t}"]["kvprobe_tg"] / r[f"t{t}"]["llama_tg"] for t in (1, 2)})
        if "sweep" in r and "naive" in r["sweep"]:
            rat["sweep_vs_naive"] = r["sweep"]["batched"]["cells_per_s"] / r["sweep"]["naive"]["cells_per_s"]
        r["ratios"] = rat
        report(m, r, results)
        lines.append((m["key"], " ".join(f"{k}={v:.2f}" for k, v in rat.items())))
    json.dump(results, open(os.path.join(ROOT, "bench", "out", "results.json"), "w"), indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    for i, (key, line) in enumerate(lines):
        print(("ratios: " if i == len(lines) - 1 else f"{key} ratios: ") + line)


def report(m, r, res):
    print(f"## {m['name']} ({r['file_bytes'] / 2**20:.1f} MiB)")
    print("| threads | kvprobe pp512 | llama.cpp pp512 | ratio | kvprobe tg128 | llama.cpp tg128 | ratio | decode x bytes/token / bandwidth |")
    print("|---|---|---|---|---|---|---|---|")
    for t in (1, 2):
        x = r[f"t{t}"]
        print(f"| {t} | {x['kvprobe_pp']:.1f} | {x['llama_pp']:.1f} | {x['kvprobe_pp'] / x['llama_pp']:.2f} | "
              f"{x['kvprobe_tg']:.1f} | {x['llama_tg']:.1f} | {x['kvprobe_tg'] / x['llama_tg']:.2f} | "
              f"{x['tg_fraction_of_bandwidth']:.2f} |")
    mem = r["memory"]
    print(f"memory: peak RSS {mem['peak_rss'] / 2**20:.1f} MiB = model {r['file_bytes'] / 2**20:.1f} + KV "
          f"{mem['kv_bytes'] / 2**20:.1f} + overhead {mem['overhead'] / 2**20:.1f} MiB")
    print(f"bytes read per generated token: {r['bytes_per_token'] / 2**20:.1f} MiB; read bandwidth "
          f"{res['bandwidth'][1] / 1e9:.1f} GB/s (1 thread), {res['bandwidth'][2] / 1e9:.1f} GB/s (2)")
    k = r["kernel"]
    peak = max(res["int_dot_peak"].get("peak_gmacs_512", 0), res["int_dot_peak"].get("peak_gmacs_256", 0))
    print("| kernels alone, 1 thread | passes/s | weights GB/s | GMAC/s | of the int-dot peak |")
    print("|---|---|---|---|---|")
    for key, label in (("b1_q8", "decode (1 row, q8)"), ("b16_q8x2", "batch 16, q8x2"), ("b64_q8x2", "batch 64, q8x2")):
        print(f"| {label} | {k[key]['passes_per_s']:.2f} | {k[key]['gbps']:.2f} | {k[key]['gmacs']:.1f} | "
              f"{k[key]['gmacs'] / peak:.3f} |")
    if "sweep" in r:
        s = r["sweep"]
        print("| sweep (2 threads) | cells | seconds | cells/s |")
        print("|---|---|---|---|")
        for k in ("batched", "batched_exact", "unbatched", "naive"):
            if k in s:
                print(f"| {k} | {s[k]['cells']} | {s[k]['seconds']:.1f} | {s[k]['cells_per_s']:.2f} |")
        if "naive" in s:
            print(f"naive transformers records equal kvprobe --exact: {s['naive_equals_exact']}/{s['naive_cells']}")
    sys.stdout.flush()


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def isa():
    out = subprocess.run([KVPROBE, "generate", "-m", MODELS[0]["file"], "--tokens", "1", "-n", "1"], capture_output=True,
                         text=True, cwd=ROOT).stderr
    return out.strip().split(", ")[-1]


if __name__ == "__main__":
    main()
