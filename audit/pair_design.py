"""The worst-case neighbour design's certifier in an audit (summary.json's `pair_test`; docs/contracts.md, "The
worst-case neighbour design").

Every run releases from D or D ∪ {target} by the target's fair coin. The reference runs, scored as pseudo-targets,
choose the attack, direction and threshold; `audit.stats.threshold.threshold_audit` then bounds μ (GDP) and ε at the
claim's δ on the target runs, exact, beside Nasr et al.'s Clopper–Pearson baseline. A figure beside the verdict, not a
second verdict: `claim` says whether the exact ε bound exceeds the claimed ε, and the μ bound the μ of a Gaussian
mechanism meeting the claim exactly.
"""

from __future__ import annotations

import math

import numpy as np

from audit.evaluate import StoredRuns, pseudo_target_scores
from audit.stats.threshold import ThresholdAudit, predicted_choice, threshold_audit
from shadow_runs.plan import FIXED_REMAINDER
from victims.dp.privacy import MOST_GDP_EPSILON, gdp_mu_for
from victims.tabular.canaries import RECORD

#: the objective the threshold is chosen for (μ's threshold is central: docs/results/threshold.md)
OBJECTIVE = "mu"
#: what each figure of the entry rests on
THEOREMS = {
    "mu_lower": "G_mu, the mu-GDP trade-off curve (Dong, Roth & Su 2019), rejected by the exact binomial test "
    "(audit.stats.pair_test)",
    "epsilon_lower": "the (epsilon, delta) trade-off region (Kairouz, Oh & Viswanath 2015), rejected by the same test",
    "baseline": "Clopper-Pearson bounds on TPR and FPR at (1 - confidence)/2 each, plugged into the curve "
    "(Nasr et al. 2023)",
    "mu_gaussian": "the mu whose mu-GDP is exactly (epsilon, delta)-DP (Dong, Roth & Su 2019, Corollary 2.13)",
}


def applies(plan: str, canaries: dict | None) -> bool:
    """Whether an audit is of the worst-case neighbour design: the fixed remainder, one record canary."""
    return plan == FIXED_REMAINDER and bool(canaries) and canaries["kind"] == RECORD and canaries["n"] == 1


def pair_samples(runs: StoredRuns, scores: dict, choices: dict, targets, *, variance: str, column: int) -> dict:
    """attack -> (reference IN, reference OUT, judged IN, judged OUT) finite canary scores: the judged
    from the target runs' `scores`, the references' every reference run scored as a pseudo-target with
    the views chosen on them (`choices`). Attacks that leave a side empty are left out."""
    targets = np.asarray(targets).reshape(-1)
    n_references = len(runs.keep) - len(targets)
    found = {}
    for attack, judged in scores.items():
        views = choices[attack].views if choices.get(attack) is not None else "all"
        pseudo, reference = pseudo_target_scores(
            runs, attack, targets, variance=variance, views=views, most=n_references
        )
        sides = []
        for rows, values in ((pseudo, reference[:, column]), (targets, judged[:, column])):
            member = runs.keep[rows, column]
            sides += [values[member & np.isfinite(values)], values[~member & np.isfinite(values)]]
        if all(len(side) for side in sides):
            found[attack] = tuple(sides)
    return found


def choose_attack(samples: dict, *, confidence: float, delta: float) -> tuple[str | None, dict]:
    """(attack, attack -> predicted μ bound): the attack whose references predict the largest μ bound at
    its judged counts (`predicted_choice`; ties to the first in `samples`' order). Reads the judged
    runs' counts of IN and OUT coins, never their scores."""
    predicted = {}
    for attack, (ref_in, ref_out, judged_in, judged_out) in samples.items():
        _, value = predicted_choice(
            ref_in,
            ref_out,
            n_in=len(judged_in),
            n_out=len(judged_out),
            confidence=confidence,
            delta=delta,
            objective=OBJECTIVE,
        )
        predicted[attack] = value
    best = max(predicted, key=lambda a: (predicted[a], -list(predicted).index(a)), default=None)
    return best, predicted


def pair_entry(samples: dict, *, confidence: float, delta: float, claim=None, declared: str | None = None) -> dict:
    """summary.json's `pair_test`: the chosen attack's `threshold_audit` at `confidence` and `delta`
    (the claim's), its counts, the references' predictions, and against `claim` (a `audit.claim.Claim`
    with both parts, or None) whether its bounds exceed what the claim allows. An attack `declared`
    before the audit (`--verdict-attack`) is the only candidate: its direction and threshold are still
    chosen on the references."""
    if declared is not None:
        samples = {a: found for a, found in samples.items() if a == declared}
    attack, predicted = choose_attack(samples, confidence=confidence, delta=delta)
    entry: dict = {
        "design": "worst-case neighbours: D or D plus the target, by the target's coin",
        "decision": "figure",  # beside the one-run verdict, not combined with it (docs/contracts.md)
        "confidence": confidence,
        "delta": delta,
        "objective": OBJECTIVE,
        "predicted_mu": {a: _finite(v) for a, v in predicted.items()},
        "attack": attack,
        "chosen_by": "references" if declared is None else "declared",
    }
    if attack is None:
        which = "no attack" if declared is None else f"the declared attack {declared} never"
        return {**entry, "note": f"{which} scored the target on both sides of the reference and the target runs"}
    ref_in, ref_out, judged_in, judged_out = samples[attack]
    audit = threshold_audit(
        ref_in, ref_out, judged_in, judged_out, delta=delta, confidence=confidence, objective=OBJECTIVE
    )
    return {**entry, **_audit_keys(audit, len(ref_in), len(ref_out)), **_claim_keys(audit, claim), "theorems": THEOREMS}


def _audit_keys(audit: ThresholdAudit, ref_in: int, ref_out: int) -> dict:
    return {
        "sign": audit.sign,
        "threshold": audit.threshold,
        "references": {"n_in": ref_in, "n_out": ref_out},
        "tp": audit.tp,
        "n_in": audit.n_in,
        "fp": audit.fp,
        "n_out": audit.n_out,
        "mu_lower": audit.mu_lower,
        "epsilon_lower": _finite(audit.epsilon_lower),
        "mu_lower_baseline": audit.mu_lower_baseline,
        "epsilon_lower_baseline": _finite(audit.epsilon_lower_baseline),
    }


def _claim_keys(audit: ThresholdAudit, claim) -> dict:
    """The claim and what it allows: its ε at its δ, and `mu_gaussian` (`THEOREMS`)."""
    if claim is None or claim.epsilon is None:
        return {"claim": None}
    if claim.delta <= 0:
        mu_gaussian = 0.0
    else:  # opacus's GDP duality (`gdp_mu_for`); past its range (ε > 100) none is given
        mu_gaussian = gdp_mu_for(claim.epsilon, claim.delta) if claim.epsilon <= MOST_GDP_EPSILON else None
    return {
        "claim": {
            "epsilon": claim.epsilon,
            "delta": claim.delta,
            "epsilon_exceeded": bool(audit.epsilon_lower > claim.epsilon),
            "mu_gaussian": mu_gaussian,
            "mu_gaussian_exceeded": mu_gaussian is not None and bool(audit.mu_lower > mu_gaussian),
        }
    }


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def pair_line(entry: dict) -> str:
    """The terminal's line on `pair_test`, beside the one-run verdict."""
    if entry["attack"] is None:
        return f"  pair test: n/a ({entry['note']})"
    eps = "inf" if entry["epsilon_lower"] is None else f"{entry['epsilon_lower']:.2f}"
    base_eps = "inf" if entry["epsilon_lower_baseline"] is None else f"{entry['epsilon_lower_baseline']:.2f}"
    line = (
        f"  pair test (a figure beside the verdict; {entry['n_in'] + entry['n_out']} target runs judged, "
        f"{entry['references']['n_in'] + entry['references']['n_out']} reference runs choosing): "
        f"mu >= {entry['mu_lower']:.3f}, eps >= {eps} at delta = {entry['delta']:.3g} "
        f"(exact, {entry['confidence']:.0%} each; Clopper-Pearson {entry['mu_lower_baseline']:.3f}, {base_eps}) "
        f"from {entry['attack']} (TP {entry['tp']}/{entry['n_in']}, FP {entry['fp']}/{entry['n_out']})"
    )
    claim = entry.get("claim")
    if claim:
        said = "exceeds" if claim["epsilon_exceeded"] else "does not exceed"
        line += f"; {said} the claimed eps {claim['epsilon']:.3g} at delta {claim['delta']:.3g}"
        if claim["mu_gaussian"] is not None:
            line += f"; a Gaussian mechanism meeting the claim exactly has mu {claim['mu_gaussian']:.3f}"
    return line
