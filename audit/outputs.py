"""What an audit leaves in `<experiment>/audit/`: summary.json (contract), scores.npz, roc.png."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from audit.reporting import figures
from audit.reporting.verdict import Verdict, epsilon_verdict
from shadow_runs.files import atomic_write, write_json
from shadow_runs.records import CanaryColumns

#: summary.json keys that must agree for attacks of an earlier command to be kept beside new ones
_SAME_EVALUATION = ("victim", "dataset", "config", "n_shadow", "target_runs", "evaluation")


def write_audit(
    audit_dir: Path,
    *,
    summary: dict,
    scores: dict[str, np.ndarray],
    membership: np.ndarray,
    init_mask: np.ndarray,
    canaries: CanaryColumns | None = None,
) -> Path:
    """Write summary.json, scores.npz and roc.png; attacks that an earlier command (say
    `audit.loss` before `audit.lira`) scored on the same runs and targets are kept. With
    `canaries` (their columns), scores.npz keeps every row, and roc.png
    shows each attack's canary records (first row of each) and natural examples apart."""
    summary_path, scores_path = audit_dir / "summary.json", audit_dir / "scores.npz"
    if summary_path.exists() and scores_path.exists():
        earlier = json.loads(summary_path.read_text())
        if all(earlier.get(k) == summary.get(k) for k in _SAME_EVALUATION):
            with np.load(scores_path) as z:
                kept = {k: earlier["attacks"][k] for k in earlier["attacks"] if k not in scores and k in z.files}
                scores = {**{k: z[k] for k in kept}, **scores}
            summary = {**summary, "attacks": {**kept, **summary["attacks"]}}
    atomic_write(
        scores_path,
        lambda f: np.savez(
            f, target_runs=np.asarray(summary["target_runs"]), membership=membership, init=init_mask, **scores
        ),
    )
    png = (
        roc_png(scores, membership, title=_title(summary))
        if canaries is None
        else canary_roc_png(scores, membership, canaries, title=_title(summary))
    )
    atomic_write(audit_dir / "roc.png", lambda f: f.write(png))
    write_json(summary_path, summary)
    return summary_path


def _title(summary: dict) -> str:
    runs, targets = summary["n_shadow"], len(summary["target_runs"])
    return f"{summary['victim']} on {summary['dataset']}, {runs} runs, {targets} targets"


def roc_png(scores: dict[str, np.ndarray], membership: np.ndarray, *, title: str) -> bytes:
    """Log-log ROC curves, one per attack (pooled over targets), with the chance diagonal."""
    return figures.roc_png({name: (s[membership], s[~membership]) for name, s in scores.items()}, title=title)


def canary_roc_png(
    scores: dict[str, np.ndarray], membership: np.ndarray, canaries: CanaryColumns, *, title: str
) -> bytes:
    """roc_png with two curves per attack: its canary records (each on its first row) and its natural examples."""
    columns = {"canaries": canaries.scored, "natural": canaries.natural}
    curves = {}
    for name, s in scores.items():
        for group, cols in columns.items():
            g, m = s[:, cols], membership[:, cols]
            scored = ~np.isnan(g)  # a white-box attack scores the canaries only
            if (m & scored).any() and (~m & scored).any():
                curves[f"{name} ({group})"] = (g[m & scored], g[~m & scored])
    return figures.roc_png(curves, title=title)


def describe(summary: dict, path: Path) -> str:
    """A few lines for the terminal: per attack AUC, TPRs, eps_hat, and the one-run bound beside the
    design's ceiling (what a perfect attack would certify), or why there is no bound."""
    canaries = (summary.get("evaluation") or {}).get("canaries")
    lines = [
        f"{_title(summary)}; test accuracy {summary['utility']['test_accuracy']:.3f}"
        + (f"; formal epsilon {summary['formal_epsilon']:.3g}" if summary["formal_epsilon"] is not None else "")
    ]
    if canaries:
        lines.append(
            f"  each attack: its {canaries['n']} {canaries['kind']} canaries per target, then the natural "
            "examples (descriptive)"
        )
    for name, a in summary["attacks"].items():
        bound = (
            "eps_lower n/a"
            if a.get("eps_lower") is None
            else f"eps_lower {a['eps_lower']:.2f} / f-DP {a['eps_lower_fdp']:.2f} (ceilings {a['eps_ceiling']:.2f} / "
            f"{a['eps_ceiling_fdp']:.2f}, {a['confidence']:.0%} each, {a['guess_rule']})"
        )
        views = (a.get("reference_choice") or {}).get("views")
        if views == "image":
            bound += ", image view only"
        lines.append(
            f"  {name:<13} AUC {a['auc']:.3f}  TPR@1%FPR {a['tpr_at_fpr']['0.01']:.3f}  "
            f"TPR@0.1%FPR {a['tpr_at_fpr']['0.001']:.4f}  eps_hat {a['eps_hat']:.2f}  {bound}"
        )
        if "natural" in a:  # with canaries: the line above is the canaries, this one the natural examples
            n = a["natural"]
            natural = "n/a" if n.get("eps_lower") is None else f"{n['eps_lower']:.2f} (ceiling {n['eps_ceiling']:.2f})"
            lines.append(
                f"  {'  natural':<13} AUC {n['auc']:.3f}  TPR@1%FPR {n['tpr_at_fpr']['0.01']:.3f}  "
                f"TPR@0.1%FPR {n['tpr_at_fpr']['0.001']:.4f}  eps_hat {n['eps_hat']:.2f}  eps_lower {natural}, "
                "descriptive"
            )
    note = (summary.get("evaluation") or {}).get("epsilon_note")
    if note and any(a.get("eps_lower") is None for a in summary["attacks"].values()):
        lines.append(f"  ({note})")
    if summary.get("verdict"):
        lines.append(verdict_line(summary))
    lines.append(f"  -> {path}")
    return "\n".join(lines)


def _claim(summary: dict) -> tuple[float | None, str]:
    """The ε the verdict checks and where it comes from: a release's claimed ε, else the formal ε."""
    if summary.get("claimed_epsilon") is not None:
        return summary["claimed_epsilon"], "claimed"
    return summary.get("formal_epsilon"), "formal"


def summary_verdict(summary: dict) -> Verdict | None:
    """The ε verdict of summary.json's `verdict` (the paid-for bound) against `_claim` (none: "no ε
    claim was checked"); None where no bound applies."""
    found = summary.get("verdict")
    if not found:
        return None
    claimed, source = _claim(summary)
    n_canaries = (summary.get("evaluation") or {}).get("n_canaries")
    targets = len(summary.get("target_runs") or []) or 1
    return epsilon_verdict(
        found["bounds"],
        ceiling=found["ceilings"],
        claimed_epsilon=claimed,
        delta=found["delta"],
        confidence=found["confidence"],
        source=source,
        n_canaries=n_canaries,
        per_target=n_canaries // targets if n_canaries else None,
        rule=found["rule"],
    )


def verdict_line(summary: dict) -> str:
    """The ε verdict in words, two lines for the terminal: the claim, the verdict, the bound it
    rests on beside the ceiling, and the reason."""
    found, verdict = summary["verdict"], summary_verdict(summary)
    claimed, source = _claim(summary)
    head = ("" if claimed is None else f"{source} ε = {claimed:.4g} at δ = {found['delta']:g}: ") + verdict.text
    return (
        f"  verdict: {head}, ε ≥ {found['eps_lower']:.2f} ({found['attack']}, f-DP test, ceiling "
        f"{found['eps_ceiling']:.2f}, {found['rule']})\n    {verdict.reason}"
    )
