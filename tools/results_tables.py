"""Markdown tables for docs/results.md from a sweep directory's summary.csv (written by
`kvprobe sweep` / `kvprobe report`): per condition, accuracy (n correct / n) over L x W, and
mean KL(clean || edited) over the first 8 steps after the edit, and token agreement. From
results.jsonl(.gz): with a log-likelihood read-out, the mean change of the gold option's
log-probability against the clean run; and, for every (L, W), BLANK against ZERO paired on
the same examples (discordant counts, exact two-sided McNemar p).

  python3 tools/results_tables.py DIR [DIR...]      (standard library only)
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
        if r["condition"] != "clean":
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
    name = os.path.basename(d.rstrip("/"))
    figs = [f"[heatmap {c}](results/{name}/heatmap_{c}.svg)" for c in run["conditions"] if c != "clean"]
    out.append("Figures: " + ", ".join(figs) + f", [report](results/{name}/report.html).")
    return "\n".join(out)


if __name__ == "__main__":
    print("\n\n".join(tables(d) for d in sys.argv[1:]))
