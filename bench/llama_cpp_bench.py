"""llama.cpp (through llama-cpp-python's C API) on the same GGUF and the same token ids as
kvprobe: prompt processing of the given ids, then greedy generation of n tokens (end-of-
generation tokens ignored). Prints one JSON line per repetition:
  {"engine": "llama.cpp", "threads": T, "pp_tok_s": ..., "tg_tok_s": ..., "tokens": [...]}

  python bench/llama_cpp_bench.py MODEL THREADS IDS_FILE N_GEN REPS
IDS_FILE: comma-separated prompt token ids (what kvprobe's --tokens reads)."""
import ctypes
import json
import os
import sys
import time

import llama_cpp as L


def main():
    model_path, threads, ids_file, n_gen, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    ids = [int(t) for t in open(ids_file).read().strip().split(",")]
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    if os.environ.get("KVPROBE_BENCH_NO_EXTRA_BUFTS"):
        mp.use_extra_bufts = False
    model = L.llama_model_load_from_file(model_path.encode(), mp)
    if not model:
        sys.exit(f"llama.cpp cannot load {model_path}")
    cp = L.llama_context_default_params()
    cp.n_ctx = len(ids) + n_gen + 16
    cp.n_batch = max(512, len(ids))
    cp.n_ubatch = 512
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    smpl = L.llama_sampler_init_greedy()
    prompt = (L.llama_token * len(ids))(*ids)
    one = (L.llama_token * 1)()
    for _ in range(reps):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        t0 = time.perf_counter()
        if L.llama_decode(ctx, L.llama_batch_get_one(prompt, len(ids))) != 0:
            sys.exit("llama_decode failed on the prompt")
        t1 = time.perf_counter()
        out = []
        for _ in range(n_gen):
            tok = L.llama_sampler_sample(smpl, ctx, -1)
            out.append(tok)
            one[0] = tok
            if L.llama_decode(ctx, L.llama_batch_get_one(one, 1)) != 0:
                sys.exit("llama_decode failed while generating")
        t2 = time.perf_counter()
        # n_gen tokens sampled; n_gen decode calls (the last one is the (n_gen+1)-th token's pass,
        # which kvprobe also runs: it generates token i from pass i).
        print(json.dumps({"engine": "llama.cpp", "threads": threads, "pp_tok_s": len(ids) / (t1 - t0),
                          "tg_tok_s": n_gen / (t2 - t1), "tokens": out}), flush=True)
    L.llama_sampler_free(smpl)
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
