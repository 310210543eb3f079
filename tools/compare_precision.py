#!/usr/bin/env python3
"""How far a sweep on one numeric path is from the same sweep on the reference path.

    python3 tools/compare_precision.py RUN_DIR REF_DIR [--tie 0.05] [--by cell|condition] [--json]

Both directories hold results.jsonl (or results.jsonl.gz) of the same grid (model, dataset, conditions, L, W); REF_DIR
is normally `--precision f32` (equal to transformers token for token), RUN_DIR the path under
test (q8x2, q8). Per condition (and with --by cell per condition x L x W):
  cells          records present in both
  same_tokens    cells whose generated tokens are identical
  same_score     cells whose score is identical
  near_tie       differing cells whose first differing step was a near-tie in the reference:
                 REF's top-1 minus top-2 logit there below --tie (needs REF run with --margins)
  unexplained    differing cells that are not near-ties (the number that must be 0)
  logprob_max    --readout loglik: the largest |difference| of any candidate's log-probability
Needs only the standard library. Exit status 0 always (a report, not a test: the test is
tests/unit/test_fidelity.c).
"""
import argparse
import collections
import gzip
import json
import os
import sys


def load(d):
    """Records by cell, from DIR/results.jsonl or (as committed under docs/results) its .gz."""
    recs = {}
    path = f"{d}/results.jsonl"
    f = open(path, encoding="utf-8") if os.path.exists(path) else gzip.open(path + ".gz", "rt", encoding="utf-8")
    for line in f:
        r = json.loads(line)
        recs[(r["example_id"], r["condition"], r["L"], r["W"])] = r
    return recs


def first_diff(a, b):
    """First step where two generations differ (a token, or one ending before the other)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else None


def compare(run, ref, tie):
    """Per key (condition, L, W): counters."""
    out = collections.defaultdict(collections.Counter)
    lp = collections.defaultdict(float)
    for k, r in ref.items():
        if k not in run:
            continue
        t = run[k]
        key = k[1:]
        c = out[key]
        c["cells"] += 1
        same = t["tokens"] == r["tokens"] and t["stopped_at_eog"] == r["stopped_at_eog"] and \
            t.get("stop_reason") == r.get("stop_reason", t.get("stop_reason"))
        c["same_tokens"] += same
        c["same_score"] += t["score"] == r["score"]
        if "logprobs" in r and "logprobs" in t:
            lp[key] = max([lp[key]] + [abs(t["logprobs"][x] - r["logprobs"][x]) for x in r["logprobs"]])
        if not same:
            s = first_diff(t["tokens"], r["tokens"])
            m = r.get("margins")
            if s is None:
                s = len(r["tokens"])  # same tokens, one stopped (end of turn) where the other did not
            if m is not None and s < len(m) and m[s] < tie:
                c["near_tie"] += 1
            else:
                c["unexplained"] += 1
    return out, lp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("ref")
    ap.add_argument("--tie", type=float, default=0.05)
    ap.add_argument("--by", choices=("cell", "condition"), default="condition")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    run, ref = load(a.run), load(a.ref)
    per, lp = compare(run, ref, a.tie)
    rows = collections.defaultdict(collections.Counter)
    lps = collections.defaultdict(float)
    for (cond, L, W), c in per.items():
        k = (cond, L, W) if a.by == "cell" else (cond,)
        rows[k].update(c)
        lps[k] = max(lps[k], lp.get((cond, L, W), 0.0))
    total = collections.Counter()
    for c in rows.values():
        total.update(c)
    if a.json:
        print(json.dumps({"rows": [{"key": list(k), **c, "logprob_max": lps[k]} for k, c in sorted(rows.items())],
                          "total": dict(total)}))
        return 0
    name = "condition L W" if a.by == "cell" else "condition"
    has_lp = any(lps.values())
    print(f"{a.run} vs {a.ref} (near-tie: reference margin < {a.tie})")
    print(f"| {name} | cells | same tokens | same score | near-tie | unexplained |" + (" max dlogprob |" if has_lp else ""))
    print("|---|---|---|---|---|---|" + ("---|" if has_lp else ""))
    order = {"clean": 0}
    for k, c in sorted(rows.items(), key=lambda kv: (order.get(kv[0][0], 1), kv[0])):
        pct = 100.0 * c["same_tokens"] / c["cells"]
        print(f"| {' '.join(map(str, k))} | {c['cells']} | {c['same_tokens']} ({pct:.1f}%) | {c['same_score']} | "
              f"{c['near_tie']} | {c['unexplained']} |" + (f" {lps[k]:.2g} |" if has_lp else ""))
    pct = 100.0 * total["same_tokens"] / max(1, total["cells"])
    print(f"| all | {total['cells']} | {total['same_tokens']} ({pct:.1f}%) | {total['same_score']} | "
          f"{total['near_tie']} | {total['unexplained']} |" + (" |" if has_lp else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
