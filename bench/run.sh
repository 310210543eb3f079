#!/bin/sh
# All benchmarks in one run (see bench/bench.py for what is measured and how):
#   sh bench/run.sh            REPS=5 by default; REPS=3 sh bench/run.sh for a quicker pass
# Needs the models (make models). Installs its peers on first use (bench/setup.sh: llama-cpp-python
# built from source, torch + transformers). Run it on a quiet machine: both engines share the cores.
# Output: tables on stdout, bench/out/results.json, ending with the line
#   ratios: pp_t1=X pp_t2=X tg_t1=X tg_t2=X sweep_vs_naive=X     (kvprobe / peer, Gemma 3 270M)
set -eu
cd "$(dirname "$0")/.."
make --no-print-directory all build/qdot-bench >/dev/null
cc -O2 -march=native -pthread bench/bandwidth.c -o build/bench-bandwidth
case " $* " in *" --no-sweep "*) BENCH_NO_TORCH=1 sh bench/setup.sh ;; *) sh bench/setup.sh ;; esac
mkdir -p bench/out
python3 bench/bench.py "$@" | tee bench/out/run.log
