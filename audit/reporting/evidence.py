"""What the report states about one audited experiment: the attacks' joint bounds and ceilings
behind its ε verdict, the protocol paragraph, the examples at highest risk, utility and
provenance, and the `subset` (or `tabular-subset`) experiment it is compared with."""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from audit.reporting.verdict import count
from audit.results import Audited
from audit.stats.epsilon import unfair_coins_reason
from shadow_runs.plan import DEFAULT_INCLUSION_RATE, NATURAL_FIXED, natural_coins
from shadow_runs.records import CanaryColumns
from audit.stats.guesses import Guesses, verdict_bound


def verdict_evidence(audited: Audited, *, delta: float, confidence: float, seed: int) -> dict:
    """The ε lower bounds the verdict rests on at `delta` (the claim's), recomputed from scores.npz by
    `audit.stats.guesses.verdict_bound`: the recorded tuned attack and count at the full `confidence`, or else every
    attack on the grid at 1 - (1 - confidence) / k (Bonferroni). Ties are seeded by (master seed, attack) as in the
    audit (`audit.evaluate.tie_order`), so at its δ the bound is summary.json's; `seed` stands in where none is
    recorded."""
    recorded = audited.result.bound or {}
    groups = {a: audited.bound_scores(a) for a in audited.attacks}
    chosen, guesses = None, None
    if recorded.get("rule") == "tuned" and recorded.get("attack") in groups and recorded.get("guesses"):
        chosen = recorded["attack"]
        guesses = Guesses(int(recorded["guesses"]["k_in"]), int(recorded["guesses"]["k_out"]))
    master = audited.result.evaluation.get("master_seed")
    master = seed if master is None else int(master)
    return verdict_bound(
        groups,
        chosen=chosen,
        guesses=guesses,
        delta=delta,
        confidence=confidence,
        rng_of=lambda a: np.random.default_rng([master, zlib.crc32(a.encode())]),
    )


def fair_coins(audited: Audited) -> bool:
    """Whether the ε numbers apply: every attack of summary.json has an eps_lower (null where the
    plan's coins were not fair, or where a release's members were chosen)."""
    return all(audited.result.attacks.get(a, {}).get("eps_lower") is not None for a in audited.attacks)


def no_epsilon_reason(audited: Audited) -> str:
    """Why an experiment has no ε numbers, in one sentence (a release records its own)."""
    evaluation = audited.result.evaluation
    if evaluation.get("epsilon_note"):  # audit.lira and audit.release record why
        return str(evaluation["epsilon_note"])
    rate = evaluation.get("inclusion_rate")
    if isinstance(rate, (int, float)):
        return unfair_coins_reason(rate)
    return "the membership coins are not recorded as fair, so these numbers describe leakage and bound no ε"


def protocol(audited: Audited) -> str:
    """How membership was drawn, which runs are targets and shadows, and what the ε numbers are."""
    evaluation = audited.result.evaluation
    targets = list(audited.result.target_runs)
    n_runs = int(audited.result.n_shadow or len(targets))
    if evaluation.get("membership"):
        shadows, are = (
            ("The shadow run", "is a reference run, the attacks' only shadow")
            if n_runs == 1
            else (f"The {n_runs} shadow runs", "are reference runs, the attacks' only shadows")
        )
        text = (
            f"One target, the user's release; its members: {evaluation['membership']}. {shadows} of the same "
            "pipeline on the same pool, each example in each by an independent coin of probability "
            f"{evaluation.get('inclusion_rate', DEFAULT_INCLUSION_RATE):g}, {are}."
        )
    else:
        coins, n_coins = plan_sentence(audited, n_runs)
        n_references = n_runs - len(targets)
        first = "run is the target" if len(targets) == 1 else f"{len(targets)} runs are the targets"
        others = (
            "run is a reference run, the attacks' only shadow"
            if n_references == 1
            else f"{n_references} runs are reference runs, the attacks' only shadows"
        )
        text = (
            f"{coins} The first {first}, whose {len(targets) * n_coins:,} coins "
            f"{'are the canaries' if fair_coins(audited) and not audited.canaries else 'the attacks guess'}; the "
            f"other {others}, so no guess depends on a target's coins."
        )
    if audited.canaries:
        text += " " + canary_protocol(audited)
    if fair_coins(audited):
        text += (
            " Each attack's ε lower is the one-run bound (Steinke, Nasr & Jagielski 2023) on all the canaries, "
            "at the stated confidence on its own; the verdict uses the f-DP test of the claim's curve f_{ε,δ} "
            "(Mahloujifar, Melis & Chaudhuri 2025) with the attack, query views and guess count chosen on the "
            "reference runs, whose coins are public, before any target was judged (or, with too few reference "
            "runs, every attack at a confidence split across them). ε ceiling is what a perfect attack would "
            "certify with this design, so a claim at or above it cannot be tested."
        )
    else:
        text += " No ε bound: " + no_epsilon_reason(audited) + "."
    return text


def plan_sentence(audited: Audited, n_runs: int) -> tuple[str, int]:
    """(a sentence on how the plan drew each run's members; the coins of a run): an independent coin per pool example (a
    duplicate canary's rows share one), or the fixed remainder, with the expected member count."""
    evaluation, canaries = audited.result.evaluation, audited.canaries
    rate, plan = evaluation.get("inclusion_rate", DEFAULT_INCLUSION_RATE), audited.experiment.plan
    n_rows = int(audited.experiment.membership.shape[1])
    if canaries is None:
        n, what = n_rows, "pool examples"
    elif natural_coins(plan):  # one coin per record: a duplicate canary's rows share one
        n, what = int(canaries["n_natural"]) + int(canaries["n"]), "records (examples and canaries)"
    else:
        n_natural = int(canaries["n_natural"])
        expected = n_natural + rate * (n_rows - n_natural)
        return (
            f"Each of the {count(int(canaries['n']), 'canary record')} is in each of the {n_runs} runs by an "
            f"independent coin of probability {rate:g}, and each of the {n_natural:,} natural examples is in "
            f"every run (plan {plan}: a canary IN or OUT is the fixed natural pool with or without it, the "
            f"neighbouring data sets of DP; a run's expected member count, which the pipeline was handed, is "
            f"{expected:g}).",
            int(canaries["n"]),
        )
    coins = f"an independent coin of probability {rate:g} (plan {plan})"
    return f"Each of the {n:,} {what} is in each of the {n_runs} runs by {coins}.", n


def canary_protocol(audited: Audited) -> str:
    """What the inserted canaries are, and per attack a "canaries vs natural examples" line."""
    entry, targets = audited.canaries, audited.result.target_runs
    copies = f" of {entry['copies']} identical rows sharing one coin" if entry.get("copies") else ""
    canaries = count(entry["n"], f"{entry['kind']} canary", f"{entry['kind']} canaries")
    text = (
        f"The audit inserted {canaries}{copies} (pool rows from {entry['first_row']:,} "
        f"on, after the {entry['n_natural']:,} natural examples) before the plan was drawn, each a record with its "
        f"own coin per run: the top-level numbers (and any ε verdict) are over the "
        f"{count(len(targets) * entry['n'], 'canary coin')} of the target runs, designated before any training; "
        + (
            "the natural examples are reported beside them, descriptively."
            if natural_coins(audited.experiment.plan)
            else f"the natural examples have no numbers ({NATURAL_FIXED})."
        )
    )
    lines = []
    for attack in audited.attacks:
        m = audited.result.attacks.get(attack) or {}
        n = m.get("natural")
        if not n:
            continue
        eps = (
            ""
            if m.get("eps_lower") is None and n.get("eps_lower") is None
            else f", ε lower {_eps_text(m.get('eps_lower'))} vs {_eps_text(n.get('eps_lower'))}"
        )
        lines.append(
            f"{attack}: AUC {m['auc']:.3f} vs {n['auc']:.3f}, TPR at 1% FPR {m['tpr_at_fpr']['0.01']:.4f} vs "
            f"{n['tpr_at_fpr']['0.01']:.4f}{eps}"
        )
    if lines:
        text += " Canaries vs natural examples: " + "; ".join(lines) + "."
    return text


def _eps_text(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def highest_risk(audited: Audited, *, attack: str, top_k: int) -> list[dict]:
    """The `top_k` pool examples with the highest mean score over the targets where they are members; under the fixed
    remainder the canary records only (natural examples have no coin)."""
    exp = audited.experiment
    scores, membership = exp.scores[attack], exp.membership
    counts = membership.sum(0)
    if audited.canaries and not natural_coins(exp.plan):
        counts = np.where(CanaryColumns.from_entry(audited.canaries).scored, counts, 0)
    mean = np.where(counts > 0, (scores * membership).sum(0) / np.maximum(counts, 1), -np.inf)
    percentile = np.zeros(scores.shape)
    for t in range(len(scores)):
        nonmember = np.sort(scores[t][~membership[t]])
        percentile[t] = np.searchsorted(nonmember, scores[t], side="left") / len(nonmember)
    mean_percentile = (percentile * membership).sum(0) / np.maximum(counts, 1)
    order = [int(i) for i in np.argsort(-mean, kind="stable") if counts[i] > 0][:top_k]
    labels = _pool_labels(audited)
    return [
        {
            "index": i,
            "label": None if labels is None else int(labels[i]),
            "mean_score": float(mean[i]),
            "nonmember_percentile": float(mean_percentile[i]),
            "member_targets": int(counts[i]),
        }
        for i in order
    ]


def _pool_labels(audited: Audited) -> np.ndarray | None:
    path = audited.path / "pool_labels.npy"
    return np.load(path) if path.is_file() else None


def utility(audited: Audited) -> dict:
    """Downstream test accuracy over the audited runs, targets and references (runs 0..n_shadow-1, as
    `Experiment.test_accuracy`): the mean is summary.json's `utility.test_accuracy`, whatever other
    runs the store holds. For a release audit, the release's, and the reference runs' from summary.json."""
    accuracy = audited.experiment.test_accuracy
    out = {
        "test_accuracy_mean": float(accuracy.mean()),
        "test_accuracy_std": float(accuracy.std()),
        "n_runs": int(accuracy.size),
    }
    own = audited.result.utility
    if own.get("shadow_test_accuracy") is not None:
        out["reference_runs"] = {
            "mean": own["shadow_test_accuracy"],
            "std": own["shadow_test_accuracy_std"],
            "n_runs": audited.result.n_shadow,
        }
    return out


def run_provenance(audited: Audited) -> dict:
    meta, runs = audited.meta, audited.runs
    walls = [r["wall_s"] for r in runs if isinstance(r.get("wall_s"), (int, float))]
    return {
        "config": audited.experiment.config,
        "master_seed": meta.get("master_seed"),
        "evaluation": audited.result.evaluation or None,
        "versions": meta.get("versions"),
        "git_commit": meta.get("git_commit"),
        "python": meta.get("python"),
        "run_seeds": [r.get("seed") for r in runs],
        "wall_s_total": float(sum(walls)),
        "wall_s_mean": float(np.mean(walls)) if walls else None,
        "hosts": sorted({str(r.get("host")) for r in runs if r.get("host") is not None}),
    }


def find_subset(audited: Audited, candidates: Sequence[Audited]) -> Audited | None:
    """An experiment of `audited`'s baseline (`subset`, or `tabular-subset` for a table) of the same
    dataset and size (images per class, or rows), if one is among `candidates`."""
    if audited.victim == audited.baseline or audited.size is None:
        return None
    return next(
        (
            c
            for c in candidates
            if c.victim == audited.baseline
            and c.size == audited.size
            and c.experiment.dataset == audited.experiment.dataset
        ),
        None,
    )
