"""Draw the benchmark chart: one panel per workload, wall time as a ratio to s5cmd.

Run by bench/run.py with the Python of its matplotlib venv:
    python chart.py SUMMARY.chart.json OUT.png
"""

from __future__ import annotations

import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

TICKS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500]

COLORS = {"flowfs": "#d62728", "s5cmd": "#7f7f7f", "aws": "#bcbd22", "aws-mc8": "#dbdb8d", "s3fs": "#1f77b4",
          "rclone": "#2ca02c", "rclone-full": "#98df8a", "juicefs": "#9467bd", "ratarmount": "#8c564b",
          "geesefs": "#17becf", "mountpoint-s3": "#ff7f0e"}


def main() -> int:
    spec = json.load(open(sys.argv[1]))
    rows, title, desc = spec["rows"], spec.get("title", ""), spec.get("descriptions", {})
    labels = []
    for r in rows:
        if r["label"] not in labels:
            labels.append(r["label"])
    n = len(labels)
    cols = 2 if n > 1 else 1
    nrows = math.ceil(n / cols)
    per = max(len([r for r in rows if r["label"] == lab]) for lab in labels) if labels else 1
    fig, axes = plt.subplots(nrows, cols, figsize=(7.2 * cols, 0.42 * per * nrows + 1.4 * nrows + 0.8),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, lab in zip(axes.flat, labels):
        rs = [r for r in rows if r["label"] == lab]
        names, vals, lo, hi, texts, colors = [], [], [], [], [], []
        for r in rs:
            names.append(r["tool"])
            x = r.get("x_wall_s")
            if r["ok_runs"] and x is not None:
                vals.append(x)
                lo.append(x - (r.get("x_wall_min") or x))
                hi.append((r.get("x_wall_max") or x) - x)
                mark = "" if r["verified"] else "  (NOT verified)"
                texts.append(f"{x:.2f}×  ({r['wall_s']:.2f} s){mark}")
            else:
                vals.append(float("nan"))
                lo.append(0)
                hi.append(0)
                err = (r.get("errors") or ["failed"])[0]
                why = "skipped" if r.get("skipped") else "failed: " + (err[:48] + "…" if len(err) > 48 else err)
                if r["ok_runs"] and x is None:
                    why = f"{r['wall_s']:.2f} s (no s5cmd baseline)"
                texts.append(why)
            colors.append(COLORS.get(r["tool"], "#555555"))
        y = list(range(len(names)))[::-1]
        finite = [v for v in vals if v == v]
        ax.barh(y, [v if v == v else 0 for v in vals], xerr=[lo, hi], color=colors, capsize=3,
                error_kw={"elinewidth": 0.8})
        ax.axvline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xscale("log")
        if finite:
            left = min(min(finite), 1.0) / 1.6
            right = max(max(finite), 1.0) * 6
            ax.set_xlim(left, right)
        else:
            left = 0.5
            ax.set_xlim(0.5, 2)
        for yi, v, t in zip(y, vals, texts):
            ax.text((v if v == v else left) * 1.08, yi, t, va="center", fontsize=8)
        ax.xaxis.set_major_locator(ticker.FixedLocator(TICKS))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.set_yticks(y)
        ax.set_yticklabels(names, fontsize=9)
        for tl in ax.get_yticklabels():
            if tl.get_text() == "flowfs":
                tl.set_fontweight("bold")
        d = desc.get(lab.split()[0], "")
        ax.set_title(f"{lab}: {d}" if d else lab, fontsize=9.5, loc="left")
        ax.set_xlabel("wall time ÷ s5cmd (log; lower is better)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_size_inches()[1]))
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
