#!/bin/sh
# The real runs of docs/results.md (issue 11: the study on Qwen2.5-Coder; issue 13: its KV
# policies against StreamingLLM / H2O / SnapKV; issue 15: the q8x2 rerun of smollm2-mbpp), in
# the order they are run. Every run resumes from its results.jsonl, so this script can be
# stopped at any time and started again, in this session or a later one; a finished run costs
# nothing on the next start.
#
#   sh tools/study_runs.sh [NAME...]    all runs in order, or only those named
#   sh tools/study_runs.sh --list       the names and commands
#   sh tools/study_runs.sh --snapshot [NAME...]   gzip the runs' records into docs/results/ (to commit)
#
# Runs write to runs/NAME (ignored by git); --snapshot copies what they hold so far (records
# gzipped, run.json, summary.csv, report, figures) to docs/results/NAME. The clean baselines
# live in docs/results/baselines/ and are continued there with --extend (their first pass had
# lower token limits). Needs: make, models (make models MODELS=all), 2 cores, hours.
set -eu
cd "$(dirname "$0")/.."
KVPROBE=${KVPROBE:-build/kvprobe}
T=${THREADS:-2}
Q05=models/qwen2.5-coder-0.5b-instruct.gguf
Q15=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
B=docs/results/baselines
# The study's grid (issue 11): conditions x 6 layer cutoffs (0, n/4, n/2, 5n/8, 3n/4, 7n/8) x W
GRID="--conditions clean,blank,zero,drop-content,mean --steps 0,1,4,16,64"
L15="--layers 0,7,14,18,21,24"   # 28 layers
L05="--layers 0,6,12,15,18,21"   # 24 layers
# The peers of the scaffold policy (issue 13) at 75 / 50 / 25 / 12.5% of the prompt KV, as
# cells of the same examples (the scaffold and drop-content points are the blank and
# drop-content cells: scaffold:L,W holds L / n_layer of the prompt's K/V of its own)
PEERS=""
for b in 0.75 0.5 0.25 0.125; do PEERS="$PEERS --kv-policy streaming:budget=$b --kv-policy h2o:budget=$b --kv-policy snapkv:budget=$b"; done

# The race's own grids (issue 13, the tasks the study grids do not cover): the scaffold policy
# (blank) and drop-content at L giving 0 / ~12.5 / 25 / 50 / 75% of the prompt K/V, from the
# first step (W = 0) and after 16 tokens, against the same peers
RACE="--conditions clean,blank,drop-content --steps 0,16"
R15="--layers 0,4,7,14,21"        # 28 layers
R05="--layers 0,3,6,12,18"        # 24 layers

# The scaffold policy's variant (issue 13: it lost on 0.5B GSM8K, its filler read as the
# question): the shared scaffold above L except the prompt's last N positions, which stay the
# request's own; drop-content with the same window beside it. Compared with qwen05-gsm8k's
# peers and blank / drop-content cells on the same 100 examples (the clean cells are the same).
RECENT05=""
for L in 12 18 21; do for N in 16 32; do RECENT05="$RECENT05 --kv-policy scaffold:L=$L,W=0,recent=$N"; done; done
RECENT05="$RECENT05 --kv-policy drop-content:L=12,W=0,recent=32 --kv-policy drop-content:L=18,W=0,recent=32"
# and on HumanEval, where the scaffold policy holds at L = 18 and collapses from L = 12 at W = 0
RECENT05H=""
for L in 6 12 18; do for N in 16 32; do RECENT05H="$RECENT05H --kv-policy scaffold:L=$L,W=0,recent=$N"; done; done
RECENT05H="$RECENT05H --kv-policy drop-content:L=6,W=0,recent=32 --kv-policy drop-content:L=12,W=0,recent=32"

runs="base05-humaneval base05-mbpp base05-gsm8k base15-humaneval base15-mbpp base15-gsm8k smollm2-mbpp qwen05-gsm8k recent05-gsm8k race05-humaneval recent05-humaneval qwen15-humaneval qwen15-mbpp race15-gsm8k"

cmd() {
    case $1 in
    base05-humaneval) echo "-m $Q05 --dataset humaneval --conditions clean --extend --out $B/qwen05-humaneval" ;;
    base05-mbpp) echo "-m $Q05 --dataset mbpp --conditions clean --extend --out $B/qwen05-mbpp" ;;
    base05-gsm8k) echo "-m $Q05 --dataset gsm8k:250 --conditions clean --extend --out $B/qwen05-gsm8k" ;;
    base15-humaneval) echo "-m $Q15 --dataset humaneval --conditions clean --extend --out $B/qwen15-humaneval" ;;
    base15-mbpp) echo "-m $Q15 --dataset mbpp --conditions clean --extend --out $B/qwen15-mbpp" ;;
    base15-gsm8k) echo "-m $Q15 --dataset gsm8k:250 --conditions clean --out $B/qwen15-gsm8k" ;;
    # issue 15: the last Results table still on q8, rerun on the default path (same settings)
    smollm2-mbpp) echo "-m $SMOL --dataset mbpp:100 --conditions clean,blank,zero,drop-content --layers 0,8,15,22,29 --steps 0,4,16,64 --max-new-tokens 384 --out runs/smollm2-mbpp" ;;
    qwen15-humaneval) echo "-m $Q15 --dataset humaneval $GRID $L15 $PEERS --out runs/qwen15-humaneval" ;;
    qwen05-gsm8k) echo "-m $Q05 --dataset gsm8k:100 $GRID $L05 $PEERS --out runs/qwen05-gsm8k" ;;
    qwen15-mbpp) echo "-m $Q15 --dataset mbpp:100 $GRID $L15 $PEERS --out runs/qwen15-mbpp" ;;
    recent05-gsm8k) echo "-m $Q05 --dataset gsm8k:100 --conditions clean $RECENT05 --out runs/recent05-gsm8k" ;;
    recent05-humaneval) echo "-m $Q05 --dataset humaneval --conditions clean $RECENT05H --out runs/recent05-humaneval" ;;
    race05-humaneval) echo "-m $Q05 --dataset humaneval $RACE $R05 $PEERS --out runs/race05-humaneval" ;;
    race15-gsm8k) echo "-m $Q15 --dataset gsm8k:100 $RACE $R15 $PEERS --out runs/race15-gsm8k" ;;
    *) echo "unknown run '$1' (sh $0 --list)" >&2; return 1 ;;
    esac
}

# Records are committed gzipped (the baselines in place, the runs as --snapshot copies in
# docs/results/NAME): the resume reads them unpacked, so a run interrupted in one session goes
# on in the next from its last committed snapshot, even in a fresh checkout.
unpack() {
    d=$(cmd "$1" | sed 's/.*--out //')
    case $d in runs/*) snap=docs/results/${d#runs/} ;; *) snap=$d ;; esac
    [ -f "$d/results.jsonl" ] && return 0
    [ -f "$snap/results.jsonl.gz" ] || return 0
    # records of the retired 8-bit path (issue 15) are what a rerun replaces, not resumes
    if grep -q '"activations":[[:space:]]*"q8"' "$snap/run.json" 2>/dev/null; then
        echo "== $1: $snap holds q8 records: rerun from scratch"
        return 0
    fi
    mkdir -p "$d"
    gunzip -c "$snap/results.jsonl.gz" > "$d/results.jsonl"
    if [ "$snap" != "$d" ] && [ -f "$snap/run.json" ]; then cp "$snap/run.json" "$d/run.json"; fi
}

snapshot() {
    for r in "$@"; do
        d=$(cmd "$r" | sed 's/.*--out //')
        [ -f "$d/results.jsonl" ] || continue
        case $d in runs/*) dst=docs/results/${d#runs/} ;; *) dst=$d ;; esac
        mkdir -p "$dst"
        gzip -9 -n -c "$d/results.jsonl" > "$dst/results.jsonl.gz"
        [ "$d" = "$dst" ] && continue
        for f in run.json summary.csv paired.csv failures.csv report.html "$d"/*.svg; do
            f=${f#"$d"/}
            [ -f "$d/$f" ] && cp "$d/$f" "$dst/$f"
        done
        echo "$dst: $(wc -l < "$d/results.jsonl") records"
    done
}

case ${1:-} in
--list) for r in $runs; do echo "$r: kvprobe sweep $(cmd "$r") -t $T"; done; exit 0 ;;
--snapshot) shift; if [ $# -gt 0 ]; then snapshot "$@"; else snapshot $runs; fi; exit 0 ;;
esac
[ $# -gt 0 ] && runs="$*"
make -s all
mkdir -p runs
# a frozen copy: rebuilding build/ while a run goes on must not change the binary it runs
cp "$KVPROBE" runs/kvprobe
KVPROBE=runs/kvprobe
echo "== kvprobe $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo '+uncommitted')"
for r in $runs; do
    c=$(cmd "$r")
    unpack "$r"
    echo "== $r: kvprobe sweep $c -t $T ($(date -u +%FT%TZ))"
    # shellcheck disable=SC2086
    "$KVPROBE" sweep $c -t "$T"
    echo "== $r: done ($(date -u +%FT%TZ))"
done
