"""One decision in the verdict line: where the runs record a mechanism, the ε test (f_{ε,δ}) and the
own curve's test each run at half the error and the claim is violated if either rejects
(`audit.stats.guesses.verdict_levels`, `audit.reporting.verdict.one_decision`); the verdict names the
test that rejected. Without a mechanism nothing changes."""

import numpy as np
import pytest

from audit.claim import Claim
from audit.result import AuditResult
from audit.reporting.verdict import (
    EPSILON_CONSISTENT,
    EPSILON_NOT_TESTABLE,
    EPSILON_VIOLATED,
    audit_verdict,
    count,
)
from audit.stats.bounds import VERDICT_BOUND
from audit.stats.guesses import canaries_needed, ceiling, verdict_levels, verdict_bound
from audit.stats.mechanism import SubsampledGaussian
from audit.summary import EvaluationSettings, verdict_entry

MECHANISM = SubsampledGaussian(10.0, 1.0, 4)


def test_two_tests_each_at_half_the_error_only_where_the_own_curve_is_tested():
    assert verdict_levels(None, 1e-5, 0.95) == {"eps_verdict": 0.95}
    assert verdict_levels(MECHANISM, 1e-5, 0.95) == {"eps_verdict": 0.975, "own_curve": 0.975}
    # at δ = 0 a Gaussian mechanism has no pure ε: no own-curve test, the ε test at the full level
    assert verdict_levels(MECHANISM, 0.0, 0.95) == {"eps_verdict": 0.95}
    assert verdict_levels(MECHANISM, 1e-5, 0.9) == {
        "eps_verdict": pytest.approx(0.95),
        "own_curve": pytest.approx(0.95),
    }


def summary(bound: float, eps_ceiling: float, own_rejected: bool | None, *, level: float = 0.975) -> AuditResult:
    """The result of an audit as summary.json holds it: one target run of 400 canaries, the ε test's bound and
    ceiling (tuned, loss) at `level`, and the own curve's test (rejected or not; None: no mechanism)."""
    own = None
    if own_rejected is not None:
        own = {"rejected": own_rejected, "confidence": level, "attack": "whitebox", "eps_lower": 14.6 * own_rejected}
    verdict = {
        "rule": "tuned",
        "attack": "loss",
        "bounds": {"loss": bound},
        "ceilings": {"loss": eps_ceiling},
        "confidence": level,
        "delta": 1e-5,
        "mechanism": own,
    }
    return AuditResult.from_json({"target_runs": [0], "evaluation": {"n_canaries": 400}, "verdict": verdict})


CLAIM = Claim(2.7, 1e-5, source="formal")


@pytest.mark.parametrize(
    "bound, eps_ceiling, own_rejected, kind, text, rejected_by",
    [
        (3.0, 5.0, True, EPSILON_VIOLATED, "claimed ε violated at 95% confidence, by the f_{ε,δ} test and the own "
         "curve's test", ("eps_verdict", "own_curve")),
        (3.0, 5.0, False, EPSILON_VIOLATED, "claimed ε violated at 95% confidence, by the f_{ε,δ} test",
         ("eps_verdict",)),
        # the case of issue 55: the ε test finds no violation, the own curve rejects: one decision, violated
        (1.0, 5.0, True, EPSILON_VIOLATED, "claim violated at 95% confidence, by the own curve's test", ("own_curve",)),
        # the ε test cannot test the claim (at or above its ceiling at 97.5%), the own curve rejects: violated
        (1.0, 2.0, True, EPSILON_VIOLATED, "claim violated at 95% confidence, by the own curve's test", ("own_curve",)),
        (1.0, 5.0, False, EPSILON_CONSISTENT, "leakage consistent with the claimed ε", ()),
        (1.0, 2.0, False, EPSILON_NOT_TESTABLE, "not testable with this design", ()),
    ],
)  # fmt: skip
def test_the_claim_is_violated_if_either_test_rejects_and_the_verdict_names_which(
    bound, eps_ceiling, own_rejected, kind, text, rejected_by
):
    verdict = audit_verdict(summary(bound, eps_ceiling, own_rejected), CLAIM)
    assert (verdict.kind, verdict.text, verdict.rejected_by) == (kind, text, rejected_by)
    assert verdict.checked == "formal ε = 2.7 at δ = 1e-05"
    assert "the f_{ε,δ} test at 97.5% and the own curve's at 97.5%, violated if either rejects: 95% together" in (
        verdict.reason
    )
    if "own_curve" in rejected_by:
        assert "whitebox" in verdict.evidence and "ε ≥ 14.60 relative to its family" in verdict.reason
    if rejected_by == ("own_curve",):  # the ε test's own outcome is still said, as it is
        assert "the f_{ε,δ} test: " + ("leakage consistent" if eps_ceiling > 2.7 else "not testable") in verdict.reason
    if not rejected_by:
        assert "the own curve's test does not reject the claimed mechanism" in verdict.reason
    # the ε test's words state its own level: 97.5%, half the error
    if "eps_verdict" in rejected_by or kind == EPSILON_CONSISTENT:
        assert "its one bound holds at 97.5%" in verdict.reason


def test_without_a_mechanism_the_verdict_is_the_epsilon_test_alone_at_the_full_level():
    verdict = audit_verdict(summary(3.0, 5.0, None, level=0.95), CLAIM)
    assert verdict.kind == EPSILON_VIOLATED and verdict.text == "claimed ε violated at 95% confidence"
    assert verdict.rejected_by == ("eps_verdict",) and "own curve" not in verdict.reason
    assert "its one bound holds at 95%" in verdict.reason
    consistent = audit_verdict(summary(1.0, 5.0, None, level=0.95), CLAIM)
    assert consistent.kind == EPSILON_CONSISTENT and consistent.rejected_by == ()


def test_an_untestable_claim_says_what_would_test_it_at_the_epsilon_tests_own_level():
    # a claim of 9 at δ = 1e-5 above the ceiling: the canaries that would test it are those of the ε test
    # at 97.5%, the level it ran at, not at the decision's 95%
    verdict = audit_verdict(summary(1.0, 4.9, False), Claim(9.0, 1e-5))
    needed = canaries_needed(9.0, rule="tuned", delta=1e-5, confidence=0.975)
    assert verdict.kind == EPSILON_NOT_TESTABLE and f"About {count(needed, 'canary', 'canaries')}" in verdict.reason


def test_the_verdict_entry_runs_both_tests_at_half_the_error():
    # one target run of 400 canaries, the first 200 IN, which loss separates perfectly; no reference
    # choice, so both tests go to the grid, at 97.5% each (one attack)
    membership = np.r_[np.ones(200, bool), np.zeros(200, bool)][None]
    scores = {"loss": membership.astype(float)}
    settings = EvaluationSettings(seed=0, confidence=0.95, inclusion_rate=0.5)
    entry = verdict_entry(scores, membership, np.arange(400), {}, delta=1e-5, settings=settings, mechanism=MECHANISM)
    assert entry["levels"] == {"eps_verdict": 0.975, "own_curve": 0.975}
    assert entry["confidence"] == entry["mechanism"]["confidence"] == 0.975
    # exactly the ε test on its own at 97.5%: its bound, and its ceiling at that level
    alone = verdict_bound(
        {"loss": (np.ones(200), np.zeros(200))},
        chosen=None,
        guesses=None,
        delta=1e-5,
        confidence=0.975,
        rng_of=lambda a: np.random.default_rng(0),
    )
    assert entry["eps_lower"] == pytest.approx(alone["eps_lower"]) and entry["eps_lower"] > 2.7
    assert entry["eps_ceiling"] == pytest.approx(
        ceiling(400, analysis=VERDICT_BOUND.name, rule="grid", delta=1e-5, confidence=0.975)
    )
    assert entry["mechanism"]["rejected"]  # 400 right of 400: G_0.2 rejected
    without = verdict_entry(scores, membership, np.arange(400), {}, delta=1e-5, settings=settings)
    assert without["levels"] == {"eps_verdict": 0.95} and without["confidence"] == 0.95
    assert without["mechanism"] is None and without["eps_lower"] > entry["eps_lower"]
