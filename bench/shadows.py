"""How many reference runs are enough: LiRA (online, offline; each variance) against RMIA, as the
number of reference runs R grows, on stores that hold T target runs and the largest R references.

    python bench/shadows.py [--runs-dir runs/shadows-sweep] [--victims real dm kip]
                            [--references 2 4 8 16 32 64] [--targets 16] [--n-boot 200]

For each victim, `python -m audit.lira` first trains whatever runs its store lacks (T + max R
runs, the plan of the audit itself, so a store of an earlier audit is reused and extended). Then,
for each R, every target is attacked with the first R reference runs (T .. T+R-1) as its shadows;
the targets and their coins are the same at every R, so the points differ only by the shadows.
Each point is the metric pooled over the T target runs (as an audit reports it) with a 95%
percentile-bootstrap interval that resamples the target runs. Prints a markdown table and writes
`shadows.md`, `shadows.json` and `shadows.png` under --runs-dir.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from attacks import lira_offline, lira_online
from attacks.rmia import rmia_offline, rmia_online
from audit.evaluate import StoredRuns
from audit.stats.metrics import auc, tpr_at_fpr
from shadow_runs.store import RunStore
from timing import audit_into
from victims import load_pool

VICTIMS = {  # label -> audit.lira flags
    "real": ["--victim", "real"],
    "dm": ["--victim", "dm", "--init", "real", "--ipc", "10"],
    "kip": ["--victim", "kip", "--init", "real", "--ipc", "10"],
}
ATTACKS = {  # label -> scores [T, n] from (confidence stats, keep, targets, shadows)
    "LiRA online, per-example var": lambda s, k, t, m: lira_online(s, k, t, shadows=m, variance="per-example"),
    "LiRA online, fixed var": lambda s, k, t, m: lira_online(s, k, t, shadows=m, variance="fixed"),
    "LiRA online, global var": lambda s, k, t, m: lira_online(s, k, t, shadows=m, variance="global"),
    "LiRA offline, per-example var": lambda s, k, t, m: lira_offline(s, k, t, shadows=m, variance="per-example"),
    "LiRA offline, fixed var": lambda s, k, t, m: lira_offline(s, k, t, shadows=m, variance="fixed"),
    "RMIA online": lambda s, k, t, m: rmia_online(s, k, t, shadows=m),
    "RMIA offline": lambda s, k, t, m: rmia_offline(s, k, t, shadows=m),
}
METRICS = {  # label -> f(member scores, non-member scores)
    "AUC": auc,
    "TPR@1%": lambda m, n: tpr_at_fpr(m, n, 0.01)[0],
    "TPR@0.1%": lambda m, n: tpr_at_fpr(m, n, 0.001)[0],
}


def train(label: str, runs_dir: Path, n_runs: int) -> RunStore:
    """The victim's store with at least `n_runs` runs (trained by the audit CLI itself)."""
    return RunStore(audit_into(runs_dir / label, [*VICTIMS[label], "--n-shadow", str(n_runs)]).store)


def pooled(metric, scores: np.ndarray, member: np.ndarray, rows: np.ndarray) -> float:
    s, m = scores[rows], member[rows]
    return float(metric(s[m], s[~m]))


def point(metric, scores: np.ndarray, member: np.ndarray, *, n_boot: int, rng) -> tuple[float, float, float]:
    """The metric pooled over all target rows, and its 95% bootstrap interval over target runs."""
    rows = np.arange(len(scores))
    boot = [pooled(metric, scores, member, rng.choice(rows, size=rows.size)) for _ in range(n_boot)]
    low, high = np.percentile(boot, [2.5, 97.5]) if boot else (np.nan, np.nan)
    return pooled(metric, scores, member, rows), float(low), float(high)


def sweep(store: RunStore, *, n_targets: int, references: list[int], n_boot: int, seed: int) -> dict:
    keep = store.keep()[: n_targets + max(references)]
    pool = load_pool("digits")
    runs = StoredRuns.load(store, keep=keep, images=pool.x, labels=pool.y)
    targets = np.arange(n_targets)
    member = keep[targets]
    out = {}
    for attack, score in ATTACKS.items():
        for r in references:
            shadows = np.zeros((n_targets, n_targets + r), dtype=bool)
            shadows[:, n_targets:] = True
            scores = score(runs.confidence[: n_targets + r], keep[: n_targets + r], targets, shadows)
            rng = np.random.default_rng([seed, r])
            out.setdefault(attack, {})[r] = {
                name: point(metric, scores, member, n_boot=n_boot, rng=rng) for name, metric in METRICS.items()
            }
    return out


def table(results: dict, references: list[int]) -> str:
    lines = []
    for victim, by_attack in results.items():
        lines += [
            f"\n**{victim}** (pooled over the target runs; 95% interval over target runs)\n",
            "| attack | metric | " + " | ".join(f"R={r}" for r in references) + " |",
            "|---|---|" + "---|" * len(references),
        ]
        for attack, by_r in by_attack.items():
            for metric in METRICS:
                cells = [by_r[r][metric] for r in references]
                fmt = "{:.3f} ({:.3f}–{:.3f})" if metric == "AUC" else "{:.4f} ({:.4f}–{:.4f})"
                lines.append(f"| {attack} | {metric} | " + " | ".join(fmt.format(*c) for c in cells) + " |")
    return "\n".join(lines)


def figure(results: dict, references: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(results), len(METRICS), figsize=(4.2 * len(METRICS), 3.4 * len(results)), squeeze=False
    )
    for row, (victim, by_attack) in enumerate(results.items()):
        for col, metric in enumerate(METRICS):
            ax = axes[row, col]
            for attack, by_r in by_attack.items():
                values = np.array([by_r[r][metric] for r in references])
                ax.errorbar(
                    references,
                    values[:, 0],
                    yerr=[values[:, 0] - values[:, 1], values[:, 2] - values[:, 0]],
                    marker="o",
                    ms=3,
                    lw=1.2,
                    capsize=2,
                    label=attack,
                )
            ax.set_xscale("log", base=2)
            ax.set(xlabel="reference runs R", ylabel=metric, title=f"{victim}: {metric}")
            ax.minorticks_off()
            ax.set_xticks(references, [str(r) for r in references])
            ax.grid(True, alpha=0.3)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs-dir", type=Path, default=Path("runs/shadows-sweep"))
    p.add_argument("--victims", nargs="+", choices=VICTIMS, default=["real", "dm"])
    p.add_argument("--references", nargs="+", type=int, default=[2, 4, 8, 16, 32, 64])
    p.add_argument("--targets", type=int, default=16)
    p.add_argument("--n-boot", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    references = sorted(args.references)
    results = {}
    for victim in args.victims:
        store = train(victim, args.runs_dir, args.targets + references[-1])
        results[victim] = sweep(
            store, n_targets=args.targets, references=references, n_boot=args.n_boot, seed=args.seed
        )
    text = table(results, references)
    print(text)
    (args.runs_dir / "shadows.md").write_text(text + "\n")
    (args.runs_dir / "shadows.json").write_text(json.dumps(results, indent=1))
    figure(results, references, args.runs_dir / "shadows.png")
    print(f"wrote {args.runs_dir / 'shadows.png'}")


if __name__ == "__main__":
    main()
