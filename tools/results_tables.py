"""Markdown tables for docs/results.md from a sweep directory's summary.csv (written by
`kvprobe sweep` / `kvprobe report`): per condition, accuracy (n correct / n) over L x W, and
mean KL(clean || edited) over the first 8 steps after the edit, and token agreement. From
results.jsonl(.gz): with a log-likelihood read-out, the mean change of the gold option's
log-probability against the clean run; and, for every (L, W), BLANK against ZERO paired on
the same examples (discordant counts, exact two-sided McNemar p).

A clean-only run (a baseline) gives one row instead: pass@1 with its Wilson interval, the
generation lengths (median / 90th / 99th percentile) and how many answers the token limit cut
(and of those, how many loop). --kv-policy cells get their own table: each policy's accuracy
against the compression of the prompt K/V (1 - prompt_kv_own), next to the blank (scaffold)
and drop-content cells.

  python3 tools/results_tables.py DIR [DIR...]      (standard library only)
  python3 tools/results_tables.py --baselines DIR [DIR...]   one table row per baseline run
"""
import csv
import gzip
import json
import math
import os
import sys
from collections import defaultdict


def records(d):
    for name, opener in (("results.jsonl", open), ("results.jsonl.gz", gzip.open)):
        path = os.path.join(d, name)
        if os.path.exists(path):
            with opener(path, "rt") as f:
                return [json.loads(line) for line in f if line.strip()]
    return []


def mcnemar_p(b, c):
    """Exact two-sided McNemar test: binomial(b + c, 1/2) on the discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def record_tables(d, run):
    recs = records(d)
    if not recs:
        return []
    cell = defaultdict(dict)  # (cond, L, W) -> example -> record
    for r in recs:
        cell[(r["condition"], r["L"], r["W"])][r["example_id"]] = r
    out = []
    keys = sorted({(L, W) for (c, L, W) in cell if c != "clean"})
    if run.get("readout") in ("loglik", "loglik-norm"):
        clean = next((v for (c, _, _), v in cell.items() if c == "clean"), {})

        def delta(r):  # the gold option's log-probability in this cell minus in the clean run
            lp, c = r.get("logprobs") or {}, clean.get(r["example_id"], {}).get("logprobs") or {}
            return lp[r["gold"]] - c[r["gold"]] if r["gold"] in lp and r["gold"] in c else None

        out += ["**mean change of the gold option's log-probability vs clean, nats** (0 = untouched; the "
                "read-out compares options, so a uniform drop need not change the answer):", ""]
        conds = [c for c in run["conditions"] if c != "clean"]
        Ws = sorted({W for _, W in keys})
        out += ["| condition | L | " + " | ".join(f"W={w}" for w in Ws) + " |", "|---|---|" + "---|" * len(Ws)]
        for c in conds:
            for L in sorted({L for L, _ in keys}):
                vals = []
                for W in Ws:
                    ds = [delta(r) for r in cell.get((c, L, W), {}).values()]
                    ds = [x for x in ds if x is not None]
                    vals.append(f"{sum(ds) / len(ds):.2f}" if ds else "–")
                out.append(f"| {c} | {L} | " + " | ".join(vals) + " |")
        out.append("")
    if any(c == "blank" for c, _, _ in cell) and any(c == "zero" for c, _, _ in cell):
        out += ["**BLANK vs ZERO, paired on the same examples**: blank right & zero wrong / blank wrong & "
                "zero right, exact McNemar p:", ""]
        Ws = sorted({W for _, W in keys})
        out += ["| L | " + " | ".join(f"W={w}" for w in Ws) + " |", "|---|" + "---|" * len(Ws)]
        for L in sorted({L for L, _ in keys}):
            vals = []
            for W in Ws:
                bl, ze = cell.get(("blank", L, W), {}), cell.get(("zero", L, W), {})
                common = bl.keys() & ze.keys()
                b = sum(1 for e in common if bl[e]["score"] and not ze[e]["score"])
                c = sum(1 for e in common if ze[e]["score"] and not bl[e]["score"])
                vals.append(f"{b} / {c}, p = {mcnemar_p(b, c):.2g}" if common else "–")
            out.append(f"| {L} | " + " | ".join(vals) + " |")
        out.append("")
    return out


def harmless_from(recs, run):
    """The study's frontier: for each condition and L, the smallest W from which the condition
    stops hurting - at that W and every larger one, accuracy is not significantly below clean
    (the edited cells against the clean run of the same examples, exact two-sided McNemar,
    p >= 0.05, or not below clean at all). Also BLANK's frontier against ZERO's per L: the
    study's "BLANK sits to the left of ZERO"."""
    clean = {r["example_id"]: r["score"] for r in recs if r["condition"] == "clean"}
    cell = defaultdict(dict)
    for r in recs:
        if r["condition"] != "clean" and ":" not in r["condition"]:
            cell[(r["condition"], r["L"], r["W"])][r["example_id"]] = r["score"]
    conds = [c for c in run["conditions"] if c != "clean"]
    Ls = sorted({L for (_, L, _) in cell})
    Ws = sorted({W for (_, _, W) in cell})

    def hurts(c, L, W):
        x = cell.get((c, L, W), {})
        common = [e for e in x if e in clean]
        if not common:
            return None
        lost = sum(1 for e in common if clean[e] and not x[e])
        won = sum(1 for e in common if x[e] and not clean[e])
        return lost > won and mcnemar_p(lost, won) < 0.05

    out = ["**From which W each condition stops hurting** (per L: the smallest W from which every cell's "
           "accuracy is not significantly below clean on the same examples, exact McNemar p >= 0.05; "
           "'never' if even the last W hurts):", "",
           "| L | " + " | ".join(conds) + " |", "|---|" + "---|" * len(conds)]
    front = {}
    for L in Ls:
        row = []
        for c in conds:
            h = [hurts(c, L, W) for W in Ws]
            k = len(Ws)
            while k > 0 and h[k - 1] is False:
                k -= 1
            front[(c, L)] = Ws[k] if k < len(Ws) else None
            row.append("–" if all(x is None for x in h) else f"W ≥ {Ws[k]}" if k < len(Ws) else "never")
        out.append(f"| {L} | " + " | ".join(row) + " |")
    if "blank" in conds and "zero" in conds:
        left = sum(1 for L in Ls if front[("blank", L)] is not None and
                   (front[("zero", L)] is None or front[("blank", L)] < front[("zero", L)]))
        same = sum(1 for L in Ls if front[("blank", L)] == front[("zero", L)])
        out += ["", f"BLANK's frontier lies left of ZERO's (harmless from a smaller W) at {left} of {len(Ls)} layer "
                f"cutoffs, at the same W at {same}."]
    return out + [""]


def wilson(k, n, z=1.959963984540054):
    p, den = k / n, 1 + z * z / n
    c, h = (p + z * z / (2 * n)) / den, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, c - h), min(1.0, c + h)


def baseline_row(d):
    """| run | dataset | n | pass | pass@1 [CI] | steps p50 / p90 / p99 | cut by the limit (looping) |"""
    run = json.load(open(os.path.join(d, "run.json")))
    recs = [r for r in records(d) if r["condition"] == "clean"]
    n, k = len(recs), sum(r["score"] for r in recs)
    lo, hi = wilson(k, n)
    steps = sorted(r["decode_steps"] for r in recs)
    cut = [r for r in recs if r.get("stop_reason") == "max_tokens"]
    pct = lambda q: steps[min(n - 1, int(q * n))]
    return (f"| {os.path.basename(d.rstrip('/'))} | {run['dataset']} | {n} | {k:.0f} | {100 * k / n:.1f} "
            f"[{100 * lo:.1f}, {100 * hi:.1f}] | {pct(0.5)} / {pct(0.9)} / {pct(0.99)} | {run['max_new_tokens']} | "
            f"{len(cut)} ({sum(1 for r in cut if r.get('looped'))}) |")


def baselines(dirs):
    return "\n".join(["| run | dataset | n | pass | pass@1 [95% CI] | decode steps p50 / p90 / p99 | limit | "
                      "cut by the limit (of them looping) |", "|---|---|---|---|---|---|---|---|"]
                     + [baseline_row(d) for d in dirs])


def policy_table(rows, n_layer):
    """The KV-policy race: every --kv-policy cell and the blank / drop-content cells."""
    pts = [r for r in rows if ":" in r["condition"] or r["condition"] in ("blank", "drop-content")]
    pts = [r for r in pts if r.get("prompt_kv_own", "") != ""]
    if not any(":" in r["condition"] for r in pts):
        return []
    out = ["**KV policies: accuracy against compression of the prompt K/V** (compression = 1 - prompt_kv_own: "
           "the share of the prompt's K/V entries a sequence does not hold of its own; blank = the scaffold "
           "policy, whose layers >= L read the shared scaffold cache):", "",
           "| policy | L | W | compression | accuracy | 95% CI |", "|---|---|---|---|---|---|"]
    key = lambda r: (r["condition"].split(":")[0], -float(r["prompt_kv_own"]), int(r["W"]))
    for r in sorted(pts, key=key):
        out.append(f"| {r['condition']} | {r['L']} | {r['W']} | {100 * (1 - float(r['prompt_kv_own'])):.1f}% | "
                   f"{float(r['accuracy']):.3f} ({round(float(r['accuracy']) * int(r['n']))}) | "
                   f"[{float(r['ci95_low']):.3f}, {float(r['ci95_high']):.3f}] |")
    return out + [""]


def tables(d):
    rows = list(csv.DictReader(open(os.path.join(d, "summary.csv"))))
    run = json.load(open(os.path.join(d, "run.json")))
    clean = [r for r in rows if r["condition"] == "clean"][0]
    n = int(clean["n"])
    out = [f"### {os.path.basename(d.rstrip('/'))}: {run['dataset']}, n = {n}, activations {run.get('activations', 'q8')}"
           + (f", {run['shots']}-shot" if run.get("shots") else "")
           + (f", {run['format']} format" if run.get("format") else f", template {run['template']}")
           + (f", read-out {run['readout']}" if run.get("readout") else ", read-out text"),
           "",
           f"CLEAN accuracy {float(clean['accuracy']):.3f} ({round(float(clean['accuracy']) * n)}/{n}, "
           f"95% CI [{float(clean['ci95_low']):.3f}, {float(clean['ci95_high']):.3f}])", ""]
    by = defaultdict(dict)
    for r in rows:
        if r["condition"] != "clean" and ":" not in r["condition"]:  # policies: their own table
            by[r["condition"]][(int(r["L"]), int(r["W"]))] = r
    for metric, title, fmt in (("accuracy", "accuracy (correct of n)", None), ("mean_kl", "mean KL(clean || edited), nats", "{:.2f}"),
                               ("mean_agreement", "token agreement with the clean continuation", "{:.2f}")):
        out.append(f"**{title}**, rows L (first edited layer), columns W (edit step):")
        out.append("")
        conds = list(by)
        Ls = sorted({k[0] for c in conds for k in by[c]})
        Ws = sorted({k[1] for c in conds for k in by[c]})
        out.append("| condition | L | " + " | ".join(f"W={w}" for w in Ws) + " |")
        out.append("|---|---|" + "---|" * len(Ws))
        for c in conds:
            for L in Ls:
                cells = []
                for w in Ws:
                    r = by[c].get((L, w))
                    if not r or r[metric] == "":
                        cells.append("–")
                    elif fmt is None:
                        cells.append(f"{float(r['accuracy']):.3f} ({round(float(r['accuracy']) * int(r['n']))})")
                    else:
                        cells.append(fmt.format(float(r[metric])))
                out.append(f"| {c} | {L} | " + " | ".join(cells) + " |")
        out.append("")
    out += record_tables(d, run)
    if run.get("readout") not in ("loglik", "loglik-norm", "first-token"):
        out += harmless_from(records(d), run)
    out += policy_table(rows, int(clean["L"]))
    name = os.path.basename(d.rstrip("/"))
    figs = [f"[heatmap {c}](results/{name}/heatmap_{c}.svg)" for c in run["conditions"] if c != "clean"]
    if run.get("kv_policies"):
        figs.append(f"[KV policies](results/{name}/kv_policies.svg)")
    out.append("Figures: " + ", ".join(figs) + f", [report](results/{name}/report.html).")
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--baselines"]:
        print(baselines(sys.argv[2:]))
    else:
        print("\n\n".join(tables(d) for d in sys.argv[1:]))
