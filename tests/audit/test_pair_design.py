"""The worst-case neighbour design's certifier in an audit (audit.pair_design): which audits get it,
that its attack and threshold are chosen on the reference runs alone, and the claim's Gaussian μ."""

import numpy as np
import pytest

from audit.claim import Claim
from audit.pair_design import applies, choose_attack, pair_entry
from shadow_runs.plan import FIXED_REMAINDER, INDEPENDENT


def gaussian_samples(mu: float, *, n_ref: int, n_judged: int, seed: int) -> tuple:
    """(reference IN, reference OUT, judged IN, judged OUT): N(mu, 1) IN scores, N(0, 1) OUT."""
    rng = np.random.default_rng(seed)
    return (
        mu + rng.standard_normal(n_ref),
        rng.standard_normal(n_ref),
        mu + rng.standard_normal(n_judged),
        rng.standard_normal(n_judged),
    )


def test_only_the_fixed_remainder_with_one_record_canary_is_the_pair_design():
    record = {"n": 1, "kind": "record"}
    assert applies(FIXED_REMAINDER, record)
    assert not applies(INDEPENDENT, record)
    assert not applies(FIXED_REMAINDER, {"n": 1, "kind": "unseen"})  # existing audits keep their summary.json
    assert not applies(FIXED_REMAINDER, None)


def test_the_attack_and_threshold_are_chosen_on_the_references_only():
    # seed 0: a strong attack (μ 2) and a weak one (μ 0.3), 400 reference and 400 judged runs a side
    samples = {
        "weak": gaussian_samples(0.3, n_ref=400, n_judged=400, seed=0),
        "strong": gaussian_samples(2.0, n_ref=400, n_judged=400, seed=1),
    }
    entry = pair_entry(samples, confidence=0.95, delta=1e-2)
    assert entry["attack"] == "strong" and entry["sign"] == 1
    # the judged scores permuted between IN and OUT (every coin's score moved), reversed, or replaced
    rng = np.random.default_rng(2)
    for attack in samples:
        ref_in, ref_out, judged_in, judged_out = samples[attack]
        pooled = rng.permutation(np.concatenate([judged_in, judged_out]))
        samples[attack] = (ref_in, ref_out, pooled[:400], pooled[400:])
    permuted = pair_entry(samples, confidence=0.95, delta=1e-2)
    chosen = ("attack", "sign", "threshold", "predicted_mu")
    assert {k: permuted[k] for k in chosen} == {k: entry[k] for k in chosen}
    # the counts moved: at a threshold the strong references chose, permuted scores are at chance
    assert permuted["mu_lower"] == 0.0 < entry["mu_lower"]
    assert (permuted["tp"], permuted["fp"]) != (entry["tp"], entry["fp"])


def test_the_judged_counts_of_coins_enter_the_choice_but_not_their_scores():
    # the prediction is at the judged runs' IN and OUT counts (their coins' number), never their scores
    a = {"x": gaussian_samples(1.0, n_ref=300, n_judged=200, seed=3)}
    b = {"x": (*a["x"][:2], a["x"][2] + 5.0, a["x"][3] - 5.0)}  # the same counts, other scores
    assert choose_attack(a, confidence=0.9, delta=0.0) == choose_attack(b, confidence=0.9, delta=0.0)


def test_against_the_claim_the_exact_epsilon_and_the_gaussian_mu():
    # a strong attack (μ 3) against the claim (1, 1e-2): its exact ε bound exceeds 1, its μ bound the 0.5325
    # of a Gaussian mechanism that is exactly (1, 1e-2)-DP (Dong, Roth & Su, Corollary 2.13)
    samples = {"strong": gaussian_samples(3.0, n_ref=500, n_judged=500, seed=4)}
    entry = pair_entry(samples, confidence=0.95, delta=1e-2, claim=Claim(epsilon=1.0, delta=1e-2))
    assert entry["claim"]["mu_gaussian"] == pytest.approx(0.5325, abs=1e-4)
    assert entry["epsilon_lower"] > 1.0 and entry["claim"]["epsilon_exceeded"] is True
    assert entry["mu_lower"] > 2.0 and entry["claim"]["mu_gaussian_exceeded"] is True
    # the exact test's bounds are at least the Clopper–Pearson baseline's here (docs/results/threshold.md)
    assert entry["mu_lower"] >= entry["mu_lower_baseline"] - 0.02


def test_no_attack_scoring_both_sides_gives_a_note():
    entry = pair_entry({}, confidence=0.95, delta=0.0)
    assert entry["attack"] is None and "no attack" in entry["note"]


def test_a_declared_attack_is_the_only_candidate_its_threshold_still_chosen_on_the_references():
    # the same two attacks as above: the references would choose "strong"; declared, "weak" is judged, with the
    # direction and threshold its own references choose (the same as "weak" alone), and a declared attack that
    # scored no side is a note, not another attack
    samples = {
        "weak": gaussian_samples(0.3, n_ref=400, n_judged=400, seed=0),
        "strong": gaussian_samples(2.0, n_ref=400, n_judged=400, seed=1),
    }
    assert pair_entry(samples, confidence=0.95, delta=1e-2)["chosen_by"] == "references"
    declared = pair_entry(samples, confidence=0.95, delta=1e-2, declared="weak")
    alone = pair_entry({"weak": samples["weak"]}, confidence=0.95, delta=1e-2)
    assert declared["attack"] == "weak" and declared["chosen_by"] == "declared"
    assert {k: declared[k] for k in ("sign", "threshold", "tp", "fp", "mu_lower")} == {
        k: alone[k] for k in ("sign", "threshold", "tp", "fp", "mu_lower")
    }
    missing = pair_entry(samples, confidence=0.95, delta=1e-2, declared="pairs")
    assert missing["attack"] is None and missing["note"].startswith("the declared attack pairs never scored")
