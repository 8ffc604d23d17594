"""What a perfect attack can certify: the one-run ε ceiling against the number of canaries m, for
each analysis and guessing rule, at δ = 0, 1e-5 and 1e-3.

    python bench/ceiling.py [--out docs/ceiling.png] [--points 25] [--confidence 0.95] [--claim 10]

A perfect attack guesses every canary it guesses on right; its bound is the most any attack can
certify with the design, so a claimed ε at or above the ceiling cannot be found violated. Rules
(`audit.stats.guesses.ceiling`):

* Steinke grid: Steinke, Nasr and Jagielski's bound, best of the 24-point grid of guess counts at
  level (1 - confidence)/|grid| (Bonferroni): `audit.epsilon.epsilon_lower_bound`, and the audits
  before guesses were tuned.
* Steinke tuned: the same bound, one count fixed in advance (chosen on reference runs), full level.
* f-DP grid: the f-DP test of f_{ε,δ} (Mahloujifar, Melis and Chaudhuri), the grid's counts.
* f-DP tuned: the f-DP test of f_{ε,δ}, one count fixed in advance: the verdict's rule.
* Gaussian tuned: the largest μ whose μ-GDP one count rejects, as the ε at δ that μ-GDP implies
  (valid only for a mechanism with a Gaussian trade-off; not defined at δ = 0).

Prints the ceilings at m = 1,000, 2,000, 24,000 (16 targets x 1,500) and 100,000, and for a claim
of ε = --claim at δ = 1e-5 the smallest m of the plotted grid at which each rule's ceiling exceeds
it; writes the figure (one panel per δ, log m axis, the design's m marked).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from audit.stats.epsilon import gaussian_dp_epsilon
from audit.stats.guesses import ceiling

DELTAS = (0.0, 1e-5, 1e-3)
#: label -> (analysis, rule); "gaussian" ceilings are μ, converted to ε at δ below
RULES = {
    "Steinke, grid": ("steinke", "grid"),
    "Steinke, tuned": ("steinke", "tuned"),
    "f-DP f_eps,delta, grid": ("fdp", "grid"),
    "f-DP f_eps,delta, tuned (verdict)": ("fdp", "tuned"),
    "Gaussian mu-GDP, tuned (eps at delta)": ("gaussian", "tuned"),
}
STYLES = {  # label -> matplotlib keywords; Steinke et al. thinner, drawn over f-DP (they coincide at δ = 0)
    "Steinke, grid": dict(color="tab:blue", ls="--", lw=1.2, zorder=3),
    "Steinke, tuned": dict(color="tab:blue", ls="-", lw=1.2, zorder=3),
    "f-DP f_eps,delta, grid": dict(color="tab:red", ls="--", lw=2.6, alpha=0.8, zorder=2),
    "f-DP f_eps,delta, tuned (verdict)": dict(color="tab:red", ls="-", lw=2.6, alpha=0.8, zorder=2),
    "Gaussian mu-GDP, tuned (eps at delta)": dict(color="tab:green", ls="-.", lw=1.6, zorder=2),
}
LEGEND = {  # label -> legend text (mathtext)
    "Steinke, grid": "Steinke et al., grid of 24 counts (the previous rule)",
    "Steinke, tuned": "Steinke et al., one count fixed in advance",
    "f-DP f_eps,delta, grid": r"f-DP $f_{\varepsilon,\delta}$, grid of 24 counts",
    "f-DP f_eps,delta, tuned (verdict)": r"f-DP $f_{\varepsilon,\delta}$, one count (verdict's rule)",
    "Gaussian mu-GDP, tuned (eps at delta)": r"Gaussian $\mu$-GDP, one count, $\varepsilon$ at $\delta$",
}
DESIGN_M = 24_000  # 16 targets x 1,500 canaries
TABLE_M = (1_000, 2_000, DESIGN_M, 100_000)


def epsilon_ceiling(label: str, m: int, delta: float, confidence: float) -> float | None:
    """The perfect-attack ε of one rule; None where it is not defined (Gaussian at δ = 0)."""
    analysis, rule = RULES[label]
    if analysis == "gaussian" and delta == 0.0:
        return None
    value = ceiling(m, analysis=analysis, rule=rule, delta=delta, confidence=confidence)
    return float(gaussian_dp_epsilon(value, delta)) if analysis == "gaussian" else float(value)


def m_grid(points: int) -> list[int]:
    """`points` values of m from 100 to 10^6, evenly spaced in log m (rounded, distinct)."""
    return sorted({int(round(m)) for m in np.logspace(2, 6, points)})


def table_by_delta(values: dict, ms: tuple[int, ...]) -> str:
    """The same numbers, one block per δ (narrower, for a terminal)."""
    blocks = []
    for d in DELTAS:
        lines = [
            f"δ = {d:g}",
            f"| {'rule':<38} | " + " | ".join(f"m = {m:>7,}" for m in ms) + " |",
            f"|{'-' * 40}|" + "|".join("-" * 13 for _ in ms) + "|",
        ]
        for label in RULES:
            cells = [values[label, d, m] for m in ms]
            lines.append(
                f"| {label:<38} | " + " | ".join(f"{'-' if v is None else f'{v:.3f}':>11}" for v in cells) + " |"
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def figure(curves: dict, ms: list[int], claim: float, confidence: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DELTAS), figsize=(10, 6), sharey=True)
    top = max(v for values in curves.values() for v in values if v is not None)
    for ax, delta in zip(axes, DELTAS):
        for label in RULES:
            values = curves[label, delta]
            if all(v is None for v in values):
                ax.text(
                    0.04,
                    0.96,
                    "Gaussian: no ε at δ = 0",
                    transform=ax.transAxes,
                    va="top",
                    fontsize=8,
                    color=STYLES[label]["color"],
                )
                continue
            ax.plot(ms, [np.nan if v is None else v for v in values], label=LEGEND[label], **STYLES[label])
        if delta == 0.0:
            ax.text(
                0.04,
                0.90,
                "Steinke et al. = f-DP at δ = 0\n(blue lines over red)",
                transform=ax.transAxes,
                va="top",
                fontsize=8,
                color="0.25",
            )
        if all(v is not None and v < 0.05 for v in curves["Steinke, grid", delta]):
            ax.text(
                0.03,
                0.03,
                "Steinke et al., grid:\nabout 0 (its 2mδ term)",
                transform=ax.transAxes,
                fontsize=7,
                color="tab:blue",
            )
        ax.axvline(DESIGN_M, color="0.35", lw=1, ls=":")
        ax.text(DESIGN_M * 1.08, 0.4, "m = 24,000\n(16 × 1,500)", fontsize=7, color="0.3")
        ax.axhline(claim, color="0.6", lw=0.8, ls=(0, (1, 3)))
        ax.text(ms[0] * 1.1, claim + 0.25, f"claim ε = {claim:g}", fontsize=7, color="0.45")
        ax.set_xscale("log")
        ax.set_xlim(ms[0], ms[-1])
        ax.set_ylim(0, top * 1.05)
        ax.set_title("δ = 0" if delta == 0 else f"δ = {delta:g}")
        ax.set_xlabel("canaries m")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(f"perfect-attack ε ceiling ({confidence:.0%} confidence)")
    handles = dict(zip(*reversed(axes[1].get_legend_handles_labels())))
    order = [LEGEND[label] for label in RULES]
    fig.legend([handles[text] for text in order], order, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("What a perfect attack can certify in one run: ε ceiling against the number of canaries")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "ceiling.png")
    p.add_argument("--points", type=int, default=25, help="values of m on the log grid from 100 to 10^6")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--claim", type=float, default=10.0, help="claimed ε (at δ = 1e-5) to find the fewest canaries for")
    args = p.parse_args()
    start = time.perf_counter()

    ms = m_grid(args.points)
    curves = {
        (label, d): [epsilon_ceiling(label, m, d, args.confidence) for m in ms] for label in RULES for d in DELTAS
    }
    values = {
        (label, d, m): epsilon_ceiling(label, m, d, args.confidence) for label in RULES for d in DELTAS for m in TABLE_M
    }

    print(f"Perfect-attack ε ceilings at {args.confidence:.0%} confidence")
    print()
    print(table_by_delta(values, TABLE_M))
    print()
    print(
        f"Smallest m on the grid ({len(ms)} values from {ms[0]:,} to {ms[-1]:,}) whose ceiling exceeds "
        f"ε = {args.claim:g} at δ = 1e-5:"
    )
    for label in RULES:
        found = next((m for m, v in zip(ms, curves[label, 1e-5]) if v is not None and v > args.claim), None)
        print(f"  {label:<38} {'none up to 10^6' if found is None else f'{found:,}'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure(curves, ms, args.claim, args.confidence, args.out)
    print()
    print(f"wrote {args.out}; ran in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
