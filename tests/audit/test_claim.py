"""The ε claim (`audit.claim`): one value, refused where it is made when it is not a claim, and one
rule for which claim an audit checks, shared by the terminal and the report."""

import math

import pytest

from audit import outputs
from audit.claim import Claim, checked_claim, delta_argument, epsilon_argument, verdict_delta
from audit.cli import report_command
from audit.reporting.build import Settings
from audit.reporting.verdict import summary_verdict
from audit.api import reread
from audit.result import AuditResult


def resolve_claim(summary, given=None):
    """The claim a summary.json's content is checked against (`AuditResult.checked_claim`)."""
    return AuditResult.from_json(summary).checked_claim(given)


def test_the_claim_checked_is_the_given_one_then_the_recorded_one_then_the_formal_one():
    formal = {"formal_epsilon": 8.0, "delta": 1e-5}
    assert resolve_claim(formal) == Claim(epsilon=8.0, delta=1e-5, source="formal")
    # a given ε takes the audit's δ; a given δ alone applies to the formal ε too
    assert resolve_claim(formal, Claim(epsilon=2.0)) == Claim(epsilon=2.0, delta=1e-5, source="claimed")
    assert resolve_claim(formal, Claim(delta=1e-3)) == Claim(epsilon=8.0, delta=1e-3, source="formal")
    # the audit commands record their claim: it comes before the formal ε, with its recorded δ
    recorded = {**formal, "claimed_epsilon": 3.0, "claimed_delta": 0.0}
    assert resolve_claim(recorded) == Claim(epsilon=3.0, delta=0.0, source="claimed")
    assert resolve_claim(recorded, Claim(epsilon=5.0)) == Claim(epsilon=5.0, delta=0.0, source="claimed")
    assert resolve_claim({"formal_epsilon": None, "delta": None}) is None
    # only a δ was claimed (`--claimed-delta` alone): the formal ε, at that δ, where the verdict was taken
    assert resolve_claim({**formal, "claimed_epsilon": None, "claimed_delta": 1e-6}) == Claim(8.0, 1e-6, "formal")


def test_the_claim_checked_is_the_claimed_epsilon_else_the_formal_one_at_the_delta_given():
    # what the audit commands check when they make the summary, from the claim they were given
    assert checked_claim(2.0, 1e-6, formal_epsilon=8.0) == Claim(epsilon=2.0, delta=1e-6, source="claimed")
    assert checked_claim(None, 1e-5, formal_epsilon=8.0) == Claim(epsilon=8.0, delta=1e-5, source="formal")
    assert checked_claim(None, 0.0, formal_epsilon=None) is None
    with pytest.raises(ValueError, match="formal epsilon must be a finite number > 0, got inf"):
        checked_claim(None, 0.0, formal_epsilon=math.inf)


def test_the_verdict_is_taken_at_the_claims_delta_else_the_audits_own():
    assert verdict_delta(None, 1e-5) == 1e-5
    assert verdict_delta(Claim(epsilon=2.0), 1e-5) == 1e-5  # a claimed ε without δ: the audit's
    assert verdict_delta(Claim(epsilon=2.0, delta=1e-6), 1e-5) == 1e-6
    assert verdict_delta(Claim(delta=0.0), 1e-5) == 0.0  # a pure ε-DP claim


def test_a_claim_on_a_victim_without_delta_is_pure_dp():
    # a non-DP victim records delta null: a claimed ε is checked at δ = 0, and δ = 0 may be given
    assert resolve_claim({"formal_epsilon": None, "delta": None}, Claim(epsilon=2.0)).delta == 0.0
    assert Claim(epsilon=2.0, delta=0.0).delta == 0.0
    assert delta_argument("0") == 0.0


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan])
def test_an_epsilon_that_is_not_finite_and_positive_is_refused_where_it_is_made(epsilon):
    with pytest.raises(ValueError, match="^claimed epsilon must be a finite number > 0, got"):
        Claim(epsilon=epsilon)
    with pytest.raises(ValueError, match="^formal epsilon must be a finite number > 0, got"):
        resolve_claim({"formal_epsilon": epsilon, "delta": 1e-5})
    with pytest.raises(Exception, match="must be a finite number > 0"):
        epsilon_argument(str(epsilon))


@pytest.mark.parametrize("delta", [1.0, -1e-9, math.nan])
def test_a_delta_outside_0_1_is_refused_where_it_is_made(delta):
    with pytest.raises(ValueError, match=r"^claimed delta must be a number in \[0, 1\), got"):
        Claim(epsilon=1.0, delta=delta)
    with pytest.raises(Exception, match=r"must be a number in \[0, 1\)"):
        delta_argument(str(delta))


def test_the_report_flags_make_one_claim_or_none():
    parse = report_command.build_parser().parse_args
    assert report_command.settings_from(parse(["dir"])).claim is None
    assert report_command.settings_from(parse(["dir", "--claimed-epsilon", "2"])).claim == Claim(epsilon=2.0)
    assert report_command.settings_from(parse(["dir", "--claimed-delta", "0"])).claim == Claim(delta=0.0)
    assert Settings(claim=Claim(epsilon=1.0, delta=1e-5)).claim.epsilon == 1.0


def test_the_terminal_states_the_recorded_claim_the_report_would_check():
    summary = {
        "claimed_epsilon": 2.0,
        "claimed_delta": 1e-6,
        "formal_epsilon": 4.0,
        "delta": 1e-5,
        "target_runs": [0],
        "evaluation": {"n_canaries": 1000},
        "attacks": {"loss": {"reference_choice": None}},
        "verdict": {
            "rule": "grid",
            "attack": "loss",
            "eps_lower": 2.5,
            "eps_ceiling": 6.0,
            "confidence": 0.95,
            "per_attack_confidence": 0.95,
            "delta": 1e-5,
            "bounds": {"loss": 2.5},
            "ceilings": {"loss": 6.0},
            "candidates": ["loss"],
        },
    }
    line = outputs.verdict_line(reread(summary))
    # the claim is the recorded one, stated at the δ of the bounds summary.json holds (the audit's own)
    assert line.startswith("  verdict: claimed ε = 2 at δ = 1e-05: claimed ε violated at 95% confidence")
    assert summary_verdict(summary).kind == "epsilon_violated"
    assert resolve_claim(summary) == Claim(epsilon=2.0, delta=1e-6, source="claimed")
