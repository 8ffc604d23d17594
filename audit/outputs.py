"""What an audit leaves in `<experiment>/audit/`: summary.json (contract), scores.npz, roc.png."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from audit.evaluate import PREDICTED_KEY
from audit.reporting import figures
from audit.reporting.remarks import SHOWN_RATES, remarks
from audit.reporting.verdict import count, percent
from audit.result import AuditResult
from shadow_runs.atomic_files import atomic_write, write_json
from shadow_runs.records import CanaryColumns


def _same_evaluation(a: AuditResult, b: AuditResult) -> bool:
    """Whether an earlier result `a`'s attacks may be kept beside `b`'s: the same runs, targets and evaluation."""
    same = ("victim", "dataset", "config", "n_shadow", "target_runs", "evaluation")
    return all(getattr(a, k) == getattr(b, k) for k in same)


def replaced_summary(audit_dir: Path, result: AuditResult) -> str | None:
    """The line to say before `write_audit` replaces an audit of other runs (a prefix, or another evaluation):
    summary.json is the last audit's; None where there is none or it is of the same runs."""
    path = audit_dir / "summary.json"
    if not path.exists():
        return None
    earlier = AuditResult.from_json(json.loads(path.read_text()))
    if _same_evaluation(earlier, result):  # write_audit keeps it, adding attacks
        return None
    return (
        f"note: {path} held the audit of {earlier.n_shadow} runs ({len(earlier.target_runs)} "
        f"targets); it now holds this audit of {result.n_shadow} ({len(result.target_runs)} targets). "
        f"The runs stay in the store: the earlier command re-scores them"
    )


def write_audit(
    audit_dir: Path,
    *,
    result: AuditResult,
    scores: dict[str, np.ndarray],
    membership: np.ndarray,
    init_mask: np.ndarray,
    canaries: CanaryColumns | None = None,
) -> Path:
    """Write summary.json, scores.npz and roc.png, keeping attacks an earlier command scored on the same runs and
    targets. With `canaries` (their columns), scores.npz keeps every row and roc.png shows canary records (first row of
    each) and natural examples apart."""
    summary_path, scores_path = audit_dir / "summary.json", audit_dir / "scores.npz"
    if summary_path.exists() and scores_path.exists():
        earlier = AuditResult.from_json(json.loads(summary_path.read_text()))
        if _same_evaluation(earlier, result):
            with np.load(scores_path) as z:
                kept = {k: earlier.attacks[k] for k in earlier.attacks if k not in scores and k in z.files}
                scores = {**{k: z[k] for k in kept}, **scores}
            result = replace(result, attacks={**kept, **result.attacks})
    atomic_write(
        scores_path,
        lambda f: np.savez(
            f, target_runs=np.asarray(result.target_runs), membership=membership, init=init_mask, **scores
        ),
    )
    png = (
        roc_png(scores, membership, title=_title(result))
        if canaries is None
        else canary_roc_png(scores, membership, canaries, title=_title(result))
    )
    atomic_write(audit_dir / "roc.png", lambda f: f.write(png))
    write_json(summary_path, result.to_json())
    return summary_path


def _title(result: AuditResult) -> str:
    runs, targets = result.n_shadow, len(result.target_runs)
    return f"{result.victim} on {result.dataset}, {count(runs, 'run')}, {count(targets, 'target')}"


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


def describe(result: AuditResult, path: Path) -> str:
    """Terminal lines: per attack AUC, TPRs, eps_hat, and the one-run bound beside the design's ceiling, or why there is
    none; attacks at chance; the verdict and its attack; the own-curve test; warnings of too few runs (the last three as
    the report shows them, `audit.reporting.remarks`); and a legend of the terms used (`TERMS`)."""
    noted, canaries = remarks(result), result.canaries
    runs, targets = result.n_shadow, len(result.target_runs)
    accuracy = f"test accuracy {result.utility['test_accuracy']:.3f}"
    if result.utility.get("shadow_test_accuracy") is None:
        accuracy += f" (mean over the {count(runs, 'run')})"
    head = f"{result.victim} on {result.dataset}, {count(runs, 'run')}: {count(targets, 'target')}"
    if not result.release_audit:
        head += f", {count(runs - targets, 'reference run')}"
    formal = result.formal_epsilon
    lines = [f"{head}; {accuracy}" + (f"; formal ε {formal:.4g}" if formal is not None else "")]
    if canaries:
        natural = result.evaluation.get("natural_note")
        then = "then the natural examples (descriptive)" if natural is None else f"no natural examples ({natural})"
        lines.append(f"  each attack: its {canaries['n']} {canaries['kind']} canaries per target, {then}")
    used = {"AUC", "TPR@1%FPR", "eps_hat"}
    for name, a in result.attacks.items():
        lines += _attack_lines(name, a, noted, used)
    note = result.evaluation.get("epsilon_note")
    if note and any(a.get("eps_lower") is None for a in result.attacks.values()):
        lines.append(f"  ({note})")
    if result.verdict is not None:
        lines.append(verdict_line(result))
        used |= {"verdict", "formal ε"} if formal is not None else {"verdict"}
        if noted.own_curve is not None:
            lines.append(f"  own curve: {noted.own_curve}")
            used.add("own curve")
    lines += [f"  warning: {w}" for w in noted.warnings]
    if any("canaries" in line for line in lines):
        used.add("canaries")
    lines.append("  terms: " + "\n         ".join(f"{t}: {TERMS[t]}" for t in TERMS if t in used))
    lines.append(f"  -> {path}")
    return "\n".join(lines)


def _attack_lines(name: str, a: dict, noted, used: set) -> list[str]:
    """An attack's line (and, with canaries, its natural examples' line); adds the terms it uses to `used`."""
    bound = (
        "eps_lower n/a"
        if a.get("eps_lower") is None
        else f"eps_lower {a['eps_lower']:.2f} / f-DP {a['eps_lower_fdp']:.2f} (ceilings {a['eps_ceiling']:.2f} / "
        f"{a['eps_ceiling_fdp']:.2f}, {a['confidence']:.0%} each, {a['guess_rule']})"
    )
    used |= {"eps_lower", "ceilings", a["guess_rule"]} if a.get("eps_lower") is not None else set()
    if (a.get("reference_choice") or {}).get("views") == "image":
        bound += ", image view only"
        used.add("image view only")
    tprs = "  ".join(_tpr_text(a, rate, chance=rate in noted.at_chance[name]) for rate in SHOWN_RATES)
    if "(chance)" in tprs:
        used.add("(chance)")
    lines = [f"  {name:<13} AUC {a['auc']:.3f}  {tprs}  eps_hat {a['eps_hat']:.2f}  {bound}"]
    if "natural" in a:  # with canaries: the line above is the canaries, this one the natural examples
        n = a["natural"]
        natural = "n/a" if n.get("eps_lower") is None else f"{n['eps_lower']:.2f} (ceiling {n['eps_ceiling']:.2f})"
        lines.append(
            f"  {'  natural':<13} AUC {n['auc']:.3f}  TPR@1%FPR {n['tpr_at_fpr']['0.01']:.3f}  "
            f"TPR@0.1%FPR {n['tpr_at_fpr']['0.001']:.4f}  eps_hat {n['eps_hat']:.2f}  eps_lower {natural}, "
            "descriptive"
        )
    return lines


#: what each term the terminal prints means, in the order the legend lists them
TERMS = {
    "AUC": "area under the ROC curve of the attack's scores, members against non-members (0.5 = guessing)",
    "TPR@1%FPR": "the share of members an attacker finds when 1% (0.1%) of non-members are wrongly flagged; "
    "guessing finds 1% (0.1%)",
    "eps_hat": "the largest ln(TPR/FPR) at 10%, 1% and 0.1% FPR, a point estimate judged on the scores it "
    "was read from: never a bound",
    "eps_lower": "a lower bound on ε that holds with the stated confidence (95% each): Steinke, Nasr & Jagielski's "
    "one-run bound / the f-DP test (Mahloujifar, Melis & Chaudhuri), over the target runs' coins; each attack's "
    "holds on its own, so the largest of them is not a 95% statement (the verdict's is)",
    "ceilings": "what a perfect attack (every guess right) would certify with this many targets and examples; "
    "a claim at or above it cannot be tested",
    "tuned": "the guess count was chosen on the reference runs, whose coins are public, before the targets were judged",
    "grid": "a fixed grid of guess counts, paid for by splitting the confidence across it (too few reference runs "
    "to choose one)",
    "image view only": "the reference runs chose to query the image alone rather than it with its shifted copies",
    "(chance)": "the members found are not significantly more than the FPR's share (one-sided binomial test at "
    "5%): no better than guessing",
    "canaries": "the records whose membership a fair coin drew, which an ε bound is over: every pool example of "
    "every target run, or with --canaries only the records it planted",
    "verdict": "the claim against one bound paid for at 95%: the attack, its views and guess count chosen on "
    "the reference runs (when they predict 0 for every attack, the loss and a count fixed in advance; with too few "
    "of them, every attack at a split confidence); where the runs record a mechanism, one decision with the own "
    "curve's test, each at half the error, violated if either rejects (the test that did is named)",
    "own curve": "the f-DP test against the trade-off curve of the very mechanism the runs' accountant composed "
    "(noise multiplier, sample rate, steps): stronger than the test of the claimed ε, which holds for any mechanism; "
    "its ε at δ is computed tightly from that curve, so it can lie below the formal ε, the accountant's upper bound; "
    "the ε it rules out is relative to that family (if the pipeline is a subsampled Gaussian at that rate and step "
    "count, its ε is at least this)",
    "formal ε": "the largest ε the victim's own accountant reports over the runs, for the noise it used (a "
    "victim that calibrates its noise to --epsilon lands at or just below it)",
}


def _tpr_text(attack: dict, rate: str, *, chance: bool) -> str:
    digits = 3 if rate == "0.01" else 4
    text = f"TPR@{float(rate):.1%}FPR {attack['tpr_at_fpr'][rate]:.{digits}f}".replace(".0%", "%")
    return text + (" (chance)" if chance else "")


def verdict_line(result: AuditResult) -> str:
    """The ε verdict in words (made with the result), two lines for the terminal: the claim, the
    verdict, the bound it rests on (its confidence, its test) and which attack that is and why
    (`_chosen_because`) beside the ceiling; then the reason."""
    found, verdict = result.bound, result.verdict
    head = (f"{verdict.checked}: " if verdict.checked else "") + verdict.text
    return (
        f"  verdict: {head}; ε ≥ {found['eps_lower']:.2f} at {percent(found['confidence'])} (f-DP test) from "
        f"{found['attack']}, {_chosen_because(result)}; ceiling {found['eps_ceiling']:.2f}\n    {verdict.reason}"
    )


def _chosen_because(result: AuditResult) -> str:
    """Why the verdict rests on its attack, in words: chosen on the reference runs (the largest
    predicted bound there, of how many), or the largest of every attack's bound at a split confidence."""
    found = result.bound
    candidates = found.get("candidates") or [found["attack"]]
    if found["rule"] == "tuned" and found.get("chosen_by") == "fixed":
        used = found["guesses"]
        return (
            f"the attack and guess count fixed before the audit ({used['k_in'] + used['k_out']} guesses), "
            f"since the reference runs predicted a bound of 0 for each of {count(len(candidates), 'attack')}"
        )
    if found["rule"] == "tuned" and found.get("chosen_by") == "declared":
        return "the attack declared before the audit (--verdict-attack), its guess count chosen on the reference runs"
    if found["rule"] == "tuned":
        choice = (result.attacks.get(found["attack"]) or {}).get("reference_choice") or {}
        predicted = choice.get(PREDICTED_KEY)
        there = "" if predicted is None else f" ({predicted:.2f})"
        return (
            f"the attack whose predicted bound on the reference runs{there} was the largest of "
            f"{count(len(candidates), 'attack')}, chosen before any target was judged"
        )
    return (
        f"the largest bound of {count(len(candidates), 'attack')}, each at "
        f"{found['per_attack_confidence']:.2%} so that the largest holds at {found['confidence']:.0%}"
    )
