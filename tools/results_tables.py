"""Markdown tables for docs/results.md from a sweep directory's summary.csv (written by
`kvprobe sweep` / `kvprobe report`): per condition, accuracy (n correct / n) over L x W, and
mean KL(clean || edited) over the first 8 steps after the edit, and token agreement.

  python3 tools/results_tables.py DIR [DIR...]      (standard library only)
"""
import csv
import json
import os
import sys
from collections import defaultdict


def tables(d):
    rows = list(csv.DictReader(open(os.path.join(d, "summary.csv"))))
    run = json.load(open(os.path.join(d, "run.json")))
    clean = [r for r in rows if r["condition"] == "clean"][0]
    n = int(clean["n"])
    out = [f"### {os.path.basename(d.rstrip('/'))}: {run['dataset']}, n = {n}, activations {run.get('activations', 'q8')}"
           + (f", {run['shots']}-shot" if run.get("shots") else ""),
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
    return "\n".join(out)


if __name__ == "__main__":
    print("\n\n".join(tables(d) for d in sys.argv[1:]))
