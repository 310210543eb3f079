#!/bin/sh
# One sweep grid on the three numeric paths, and how far each fast path is from f32.
#
#   tools/fidelity_grid.sh OUT_DIR SWEEP_ARGS...
#
# Runs `kvprobe sweep SWEEP_ARGS` with --precision f32 --margins (the reference: equal to
# transformers token for token, and its top-2 gaps tell near-ties apart), then q8x2 (the
# sweep's default) and q8, each into OUT_DIR/<path>/ (each resumes from its results.jsonl, so a
# stopped run is continued by running the same command again), then writes
# OUT_DIR/compare.md: tools/compare_precision.py per condition and per cell for q8x2 and q8
# against f32. Records are left as results.jsonl; gzip them to commit.
#
# PATHS="f32 q8x2" runs (and compares) only those paths; f32, the reference, always runs.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR SWEEP_ARGS..." >&2; exit 2; }
out=$1
shift
KVPROBE=${KVPROBE:-build/kvprobe}
PY=${PYTHON:-python3}
here=$(dirname "$0")
mkdir -p "$out"
PATHS=${PATHS:-f32 q8x2 q8}
case " $PATHS " in *" f32 "*) ;; *) PATHS="f32 $PATHS" ;; esac
fast=""
for p in $PATHS; do
    case $p in
    f32) ;;
    q8 | q8x2) fast="$fast $p" ;;
    *) echo "$0: unknown path '$p' in PATHS (f32, q8x2, q8)" >&2; exit 2 ;;
    esac
done
for p in $PATHS; do
    extra=""
    [ "$p" = f32 ] && extra="--margins"
    echo "[fidelity] $p: $(date -u +%H:%M:%S)" >&2
    "$KVPROBE" sweep "$@" --precision "$p" $extra --quiet --out "$out/$p"
done
{
    echo "# $*"
    echo
    for p in $fast; do
        "$PY" "$here/compare_precision.py" "$out/$p" "$out/f32"
        echo
    done
    for p in $fast; do
        "$PY" "$here/compare_precision.py" "$out/$p" "$out/f32" --by cell
        echo
    done
} > "$out/compare.md"
echo "[fidelity] done: $out/compare.md" >&2
