"""The own curve's attack is chosen on the reference runs apart from the ε verdict's
(`audit.evaluate.mechanism_attack`): by its own prediction, the Gaussian family's μ at the count
tuned for that test."""

import numpy as np

from audit.evaluate import (
    PREDICTED_MECHANISM_KEY,
    ReferenceChoice,
    fixed_attack,
    mechanism_attack,
    untold,
    verdict_attack,
)
from audit.stats.epsilon import Guesses
from audit.stats.mechanism import SubsampledGaussian
from audit.summary import EvaluationSettings, verdict_entry


def choice(predicted, z, mechanism_predicted=None, mechanism_z=None, *, fdp=Guesses(1, 0), own=Guesses(1, 0)):
    tuned = {"fdp": fdp} if mechanism_predicted is None else {"fdp": fdp, "mechanism": own}
    return ReferenceChoice("all", tuned, predicted, z, 4, mechanism_predicted, mechanism_z)


def test_the_own_curve_takes_the_attack_with_the_largest_own_prediction_not_the_verdicts():
    # whitebox_sum predicts the larger f_{ε,δ} bound (2.17 > 1.99, as on a 64-run store whose
    # tiny count won there), whitebox the larger μ at its own-curve count (0.592 > 0.578).
    choices = {
        "whitebox": choice(1.99, 3.0, 0.592, 10.0),
        "whitebox_sum": choice(2.17, 2.0, 0.578, 12.0),
    }
    assert verdict_attack(choices) == "whitebox_sum"
    assert mechanism_attack(choices) == "whitebox"


def test_ties_go_to_the_pseudo_targets_distance_above_chance_then_to_registry_order():
    tied_z = {"a": choice(1.0, 0.0, 0.5, 1.0), "b": choice(1.0, 0.0, 0.5, 2.0)}
    assert mechanism_attack(tied_z) == "b"  # same μ: the larger z
    tied = {"a": choice(1.0, 0.0, 0.5, 1.0), "b": choice(1.0, 0.0, 0.5, 1.0)}
    assert mechanism_attack(tied) == "a"  # same μ and z: the first in registry order


def test_no_attack_without_an_own_curve_prediction():
    assert mechanism_attack({"loss": choice(1.0, 1.0), "dcr": None}) is None
    assert mechanism_attack({}) is None


def test_reference_choice_records_the_own_curve_prediction_only_where_there_is_one():
    assert choice(1.0, 0.0, 0.25, 1.0).to_json()[PREDICTED_MECHANISM_KEY] == 0.25
    assert PREDICTED_MECHANISM_KEY not in choice(1.0, 0.0).to_json()


def separated_entry(choices: dict, *, declared: str | None = None) -> dict:
    """The verdict entry of one target run of 400 canaries, the first 200 IN, which "loss" separates
    perfectly (IN 1, OUT 0) and "dcr" reversed (IN 0, OUT 1), under `choices`; δ 1e-5, 95%, a
    claimed mechanism of σ 10, q 1, 4 steps; `declared`: `--verdict-attack`."""
    membership = np.r_[np.ones(200, bool), np.zeros(200, bool)][None]
    scores = {"loss": membership.astype(float), "dcr": (~membership).astype(float)}
    settings = EvaluationSettings(seed=0, confidence=0.95, inclusion_rate=0.5, verdict_attack=declared)
    return verdict_entry(
        scores,
        membership,
        np.arange(400),
        choices,
        delta=1e-5,
        settings=settings,
        mechanism=SubsampledGaussian(10.0, 1.0, 4),
    )


def test_the_verdict_entry_tests_the_own_curve_on_its_own_attack_and_count():
    # One target run of 400 canaries, the first 200 IN. "loss" separates them perfectly (IN 1, OUT
    # 0); "dcr" is the reverse (IN 0, OUT 1). The reference runs (by hand) chose dcr for the ε
    # verdict (predicted 3.0 > 2.0), with 10 IN guesses, and loss for the own curve (μ 0.9 > 0.1),
    # with 100 IN and 100 OUT guesses. So the ε verdict is dcr's: its top 10 scores are OUT (ties
    # broken at random among the 200 at 1), 0 right; the own curve is loss's: the top 100 are IN and
    # the bottom 100 OUT, 200 right of 200, tested once. The runs record a mechanism, so the verdict is one
    # decision of the two tests, each at half the error: 97.5% (`verdict_levels`).
    choices = {
        "loss": choice(2.0, 1.0, 0.9, 1.0, fdp=Guesses(10, 0), own=Guesses(100, 100)),
        "dcr": choice(3.0, 1.0, 0.1, 1.0, fdp=Guesses(10, 0), own=Guesses(100, 100)),
    }
    entry = separated_entry(choices)
    assert entry["attack"] == "dcr" and entry["guesses"] == {"k_in": 10, "k_out": 0, "correct": 0}
    own = entry["mechanism"]
    assert own["attack"] == "loss" and own["rule"] == "tuned" and own["per_attack_confidence"] == 0.975
    assert entry["levels"] == {"eps_verdict": 0.975, "own_curve": 0.975} and entry["confidence"] == 0.975
    assert own["guesses"] == {"k_in": 100, "k_out": 100, "correct": 200}


def test_when_every_prediction_is_zero_the_verdict_takes_the_loss_at_the_fixed_count():
    # The same 400 canaries. The reference runs predicted 0 for both attacks (dcr further above
    # chance, z 5 > 1, which a tie-break would have taken). They cannot tell the attacks apart, so
    # the ε verdict takes the attack and count fixed before any run: loss, fixed_count(400) = the
    # half-IN candidate nearest 4·20 = 80 (r = round(400/2^(5/2)) = 71 -> (36, 35), or
    # round(400/2^2) = 100 -> (50, 50): 71 is nearer) = (36, 35); loss separates perfectly: 71 right.
    # The own curve predicted μ 0 for both too: the same fixed attack and count.
    choices = {"dcr": choice(0.0, 5.0, 0.0, 5.0), "loss": choice(0.0, 1.0, 0.0, 1.0)}
    entry = separated_entry(choices)
    assert entry["attack"] == "loss" and entry["chosen_by"] == "fixed" and entry["rule"] == "tuned"
    assert entry["guesses"] == {"k_in": 36, "k_out": 35, "correct": 71} and entry["eps_lower"] > 0
    own = entry["mechanism"]
    assert own["attack"] == "loss" and own["chosen_by"] == "fixed"
    assert own["guesses"] == {"k_in": 36, "k_out": 35, "correct": 71}


def test_a_choice_the_references_could_make_is_theirs():
    assert not untold({"loss": choice(0.5, 1.0)}, "loss") and untold({"loss": choice(0.0, 1.0)}, "loss")
    assert untold({"loss": choice(1.0, 1.0, 0.0, 1.0)}, "loss", own_curve=True)
    assert not untold({}, None)
    assert fixed_attack({"dcr": None, "loss": None}) == "loss" and fixed_attack({"dcr": None, "rmia": None}) == "dcr"


def test_a_declared_attack_is_the_verdict_s_and_the_own_curve_s_whatever_the_references_prefer():
    # The choices of the first test above: the references prefer dcr for the ε verdict (3.0 > 2.0) and
    # loss for the own curve. With loss declared (--verdict-attack loss), both rest on loss at the counts
    # the references tuned for it: 10 IN guesses, all right, for the ε verdict; 100 IN and 100 OUT, all
    # 200 right, for the own curve; chosen_by "declared".
    choices = {
        "loss": choice(2.0, 1.0, 0.9, 1.0, fdp=Guesses(10, 0), own=Guesses(100, 100)),
        "dcr": choice(3.0, 1.0, 0.1, 1.0, fdp=Guesses(10, 0), own=Guesses(100, 100)),
    }
    entry = separated_entry(choices, declared="loss")
    assert entry["attack"] == "loss" and entry["chosen_by"] == "declared" and entry["candidates"] == ["loss"]
    assert entry["guesses"] == {"k_in": 10, "k_out": 0, "correct": 10}
    assert entry["rule"] == "tuned" and entry["per_attack_confidence"] == 0.975  # half the error: two tests
    own = entry["mechanism"]
    assert own["attack"] == "loss" and own["chosen_by"] == "declared"
    assert own["guesses"] == {"k_in": 100, "k_out": 100, "correct": 200}
    # declared dcr, which the references rate 0: its count is then the fixed one, (36, 35), all wrong
    untold_choices = {"loss": choice(2.0, 1.0, 0.9, 1.0), "dcr": choice(0.0, 1.0, 0.0, 1.0)}
    entry = separated_entry(untold_choices, declared="dcr")
    assert entry["attack"] == "dcr" and entry["chosen_by"] == "fixed" and entry["eps_lower"] == 0.0
    assert entry["guesses"] == {"k_in": 36, "k_out": 35, "correct": 0}


def test_a_declared_attack_that_scored_no_canary_is_refused_not_replaced():
    # "whitebox" was declared but these runs scored only loss and dcr: no silent fallback to the references' choice
    import pytest

    from audit.summary import DeclaredAttackError

    with pytest.raises(DeclaredAttackError, match="^--verdict-attack whitebox scored no canary of these runs"):
        separated_entry({"loss": choice(2.0, 1.0), "dcr": choice(3.0, 1.0)}, declared="whitebox")
