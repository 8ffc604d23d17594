"""Tests for audit.stats.sequential (the looks of a sequential audit and the error each spends) and
audit.selftest.sequential (its check on exact mechanisms)."""

from dataclasses import replace

import numpy as np
import pytest

from audit.selftest import sequential as selftest_sequential
from audit.selftest.designs import Design, clopper_pearson, gaussian_design, rr_labels, whitebox_designs
from audit.selftest.mechanisms import gaussian_mechanism, randomised_response
from audit.selftest.sequential import (
    BOTH_TESTS,
    combined_designs,
    combined_row,
    fixed_combined_designs,
    fixed_schedule,
    look_values,
    sequential_row,
)
from audit.stats.guesses import best_count, tune, verdict_levels
from audit.stats.sequential import (
    BUDGET_SPENT,
    GO_ON,
    NOT_TESTABLE,
    VIOLATED,
    Look,
    Schedule,
    decide,
    schedule,
)


def test_each_look_spends_the_error_in_proportion_to_the_runs_it_adds():
    # looks after 1, 2, 4 and 8 runs at 95%: α = 0.05 split 1/8, 1/8, 2/8, 4/8
    looks = Schedule((1, 2, 4, 8), 0.95)
    assert looks.alphas == pytest.approx((0.00625, 0.00625, 0.0125, 0.025))
    assert sum(looks.alphas) == pytest.approx(0.05)
    assert looks.confidence_at(3) == pytest.approx(0.975) and looks.budget == 8 and looks.looks == 4
    # one look: the fixed design itself
    assert Schedule((64,), 0.95).alphas == pytest.approx((0.05,))
    # two tests a look (the ε verdict and the own curve): each at half the look's share, 1 - 0.025/2
    two = Schedule((1, 2, 4, 8), 0.95, tests=2)
    assert two.alphas == looks.alphas and two.confidence_at(3) == pytest.approx(0.9875)
    with pytest.raises(ValueError, match="a look runs 1 or 2 tests, got 3"):
        Schedule((4,), 0.95, tests=3)


def test_schedules_double_from_the_first_look_or_space_a_number_of_looks_geometrically():
    assert schedule(256, first=16, confidence=0.95).runs == (16, 32, 64, 128, 256)
    assert schedule(100, first=16, confidence=0.95).runs == (16, 32, 64, 100)  # the budget is the last look
    assert schedule(16, first=16, confidence=0.95).runs == (16,)
    # 5 looks from 16 to 256: ratio (256/16)^(1/4) = 2
    assert schedule(256, first=16, confidence=0.95, looks=5).runs == (16, 32, 64, 128, 256)
    # 10 looks from 1 to 10: round(10^(k/9)) = 1, 1, 2, 2, 3, 4, 5, 6, 8, 10 (duplicates dropped)
    assert schedule(10, first=1, confidence=0.95, looks=10).runs == (1, 2, 3, 4, 5, 6, 8, 10)


@pytest.mark.parametrize(
    "runs, match",
    [((), "positive run counts"), ((0, 4), "positive run counts"), ((4, 4), "grow strictly"), ((2.5,), "positive")],
)
def test_a_bad_schedule_is_refused(runs, match):
    with pytest.raises(ValueError, match=match):
        Schedule(runs, 0.95)
    with pytest.raises(ValueError, match="confidence"):
        Schedule((4,), 1.0)
    with pytest.raises(ValueError, match="first look"):
        schedule(8, first=16, confidence=0.95)


def test_the_audit_stops_at_the_first_rejection_at_futility_or_when_the_budget_is_spent():
    looks = Schedule((16, 32, 64), 0.95)
    quiet = Look(16, looks.confidence_at(0), rejected=False, final_ceiling=3.0)
    assert decide(looks, [], claimed_epsilon=1.0) == GO_ON
    assert decide(looks, [quiet], claimed_epsilon=1.0) == GO_ON
    assert decide(looks, [quiet, Look(32, looks.confidence_at(1), rejected=True)], claimed_epsilon=1.0) == VIOLATED
    # the final look could certify at most 3.0: a claim of 4 cannot be violated within the budget
    assert decide(looks, [quiet], claimed_epsilon=4.0) == NOT_TESTABLE
    # without a claim there is nothing to violate, and the looks run to the budget
    done = [quiet, Look(32, 0.99, False), Look(64, 0.97, False)]
    assert decide(looks, done, claimed_epsilon=None) == BUDGET_SPENT
    with pytest.raises(ValueError, match="planned 32"):
        decide(looks, [quiet, Look(40, 0.99, False)], claimed_epsilon=1.0)


def test_the_looks_of_a_repetition_see_more_runs_and_keep_most_of_the_fixed_design_s_power():
    # randomised response at ε0 = 2, 4 target runs of 1,250 canaries: the fixed design (one look) and 4 looks.
    # Measured over master seeds 0-4: fixed 1.65-1.95, every look of the four 1.60-1.90 (the first look sees
    # 1,250 canaries at a quarter of α, the last 5,000). Asserted for seed 7 with a margin: above 1.3, at most 2.
    design = Design("randomised response", "independent", 2.0, randomised_response, rr_labels(), 4)
    fixed = look_values(design, Schedule((4,), 0.95), 7, analysis="fdp")
    looked = look_values(design, Schedule((1, 2, 3, 4), 0.95), 7, analysis="fdp")
    assert fixed.shape == (1,) and looked.shape == (4,)
    assert 1.3 < fixed[0] <= 2.0 and np.all((1.3 < looked) & (looked <= 2.0))
    with pytest.raises(ValueError, match="has 4 targets"):
        look_values(design, Schedule((8,), 0.95), 0, analysis="fdp")


def test_spending_keeps_randomised_response_valid_where_reading_each_look_at_full_confidence_does_not():
    # randomised response at its true ε0 = 1 (tight), 10 looks of 1,250 canaries each, 60 repetitions.
    # Spent (each look at its share): bench/sequential.py measured 200 repetitions (see docs/results/sequential.md);
    # here at most 7 of 60 (11.7%: the 5% level plus a binomial margin, P[X >= 8] = 1.1% at p = 0.05).
    design = Design("randomised response", "independent", 1.0, randomised_response, rr_labels(), 10)
    spent = sequential_row(design, Schedule(tuple(range(1, 11)), 0.95), analysis="fdp", repetitions=60, seed=0)
    assert spent.alarms <= 7
    assert spent.looks == 10 and len(spent.first_alarm_runs) == spent.alarms


def test_a_claim_of_twice_the_real_noise_is_found_within_a_few_looks():
    # the self-test's σ-halved white-box row (claim 4, real noise half the claimed), 10 looks of 1,000 canaries:
    # its own curve is rejected in every repetition, at the first or second target run
    design = replace(whitebox_designs()[2], n_targets=10)
    found = sequential_row(design, Schedule(tuple(range(1, 11)), 0.95), analysis="mechanism", repetitions=3, seed=0)
    assert found.alarms == 3 and max(found.first_alarm_runs) <= 3


def leaky_gaussian(keep: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The Gaussian mechanism at ε0 = 2 whatever ε it is told: its claim of 1 is false."""
    return gaussian_mechanism(keep, 2.0, rng)


@pytest.mark.parametrize("verdict_truth", [0.765, 0.89])
def test_the_combined_row_alarms_where_either_test_alarms_each_against_its_own_truth(verdict_truth):
    # a Gaussian mechanism at ε0 = 2 claiming 1 (its own curve: G_μ of ε 1, truth 1.0), 4 looks of 500 canaries,
    # master seeds 0-11. The ε verdict's truth is set apart (the design's ε) so that the two tests' alarms
    # differ: measured, at 0.765 the ε verdict alarms on seeds 2, 5, 7, 10 and the own curve on 2, 7, 10 (seed 5
    # by the ε verdict alone); at 0.89 the ε verdict on seed 2 at run 3 only, the own curve on 2 (at run 2), 7, 10.
    design = replace(
        gaussian_design(1.0, 4), epsilon=verdict_truth, mechanism=leaky_gaussian, labels=np.zeros(500, dtype=np.int64)
    )
    looks = Schedule((1, 2, 3, 4), 0.95, tests=2)
    both = combined_row(design, looks, repetitions=12, seed=0)
    each = {a: sequential_row(design, looks, analysis=a, repetitions=12, seed=0) for a in BOTH_TESTS}
    first = {a: dict(zip(row.alarmed, row.first_alarm_runs)) for a, row in each.items()}
    # the union over the same repetitions, and not either test's alarms alone
    union = sorted(set(first["fdp"]) | set(first["mechanism"]))
    assert list(both.alarmed) == union and both.alarms == len(union)
    assert set(first["fdp"]) != set(union) or set(first["mechanism"]) != set(union)
    assert both.interval == clopper_pearson(len(union), 12) and both.analysis == "fdp+mechanism"
    for seed, runs, by in zip(both.alarmed, both.first_alarm_runs, both.stopped_by):
        # the audit stops at the earlier of the two tests' first alarms, and names the test(s) that rejected there
        at = {a: first[a].get(seed) for a in BOTH_TESTS}
        assert runs == min(r for r in at.values() if r is not None)
        assert by == "+".join(a for a in BOTH_TESTS if at[a] == runs)


def test_each_test_of_a_combined_look_runs_at_half_the_look_s_share(monkeypatch):
    # looks after 1, 2 and 4 runs at 95%: α_k = 0.05 x (1/4, 1/4, 2/4) = 0.0125, 0.0125, 0.025, each of the two
    # tests at half: 0.00625, 0.00625, 0.0125 (Schedule.confidence_at), for the tuning and the bound alike
    seen = []

    def spy_tune(pseudo, **kwargs):
        seen.append(("tune", kwargs["analysis"], round(1.0 - kwargs["confidence"], 12)))
        return tune(pseudo, **kwargs)

    def spy_best_count(ranked, counts, **kwargs):
        seen.append(("bound", kwargs["analysis"], round(kwargs["alpha"], 12)))
        return best_count(ranked, counts, **kwargs)

    monkeypatch.setattr(selftest_sequential, "tune", spy_tune)
    monkeypatch.setattr(selftest_sequential, "best_count", spy_best_count)
    design = replace(gaussian_design(1.0, 4), labels=np.zeros(100, dtype=np.int64))
    found = combined_row(design, Schedule((1, 2, 4), 0.95, tests=2), repetitions=1, seed=0)
    assert found.alarms == 0  # a true claim, 100 canaries a run: no look comes near ε 1
    assert seen == [
        (step, analysis, alpha)
        for alpha in (0.00625, 0.00625, 0.0125)
        for analysis in BOTH_TESTS
        for step in ("tune", "bound")
    ]
    with pytest.raises(ValueError, match="splits each look among 1 tests, 2 were given"):
        combined_row(design, Schedule((1, 2, 4), 0.95), repetitions=1, seed=0)
    # the self-test's combined rows: the sequential designs that record a mechanism (randomised response does not)
    assert [d.name.split(" (")[0] for d in combined_designs()] == [
        "gaussian mechanism",
        "white-box subsampled gaussian",
        "white-box, sigma halved",
    ]


def test_a_fixed_design_is_one_look_of_both_tests_at_the_levels_an_audit_uses():
    # the self-test's fixed-design rows of the one decision: one look at all the target runs, each test at
    # 1 - 0.05 / 2 = 97.5%, exactly the levels `verdict_levels` gives an audit whose runs record the mechanism
    designs = fixed_combined_designs()
    assert [d.name.split(" (")[0] for d in designs] == [
        "gaussian mechanism",
        "marginal counts",
        "marginal counts",
        "marginal counts, sigma halved",
    ]
    for design in designs:
        looks = fixed_schedule(design, 0.95)
        assert looks.runs == (design.n_targets,) and looks.tests == 2
        assert verdict_levels(design.claimed, design.delta, 0.95) == {
            "eps_verdict": looks.confidence_at(0),
            "own_curve": looks.confidence_at(0),
        }
    # on the exact marginal counts (claim 1, 8 targets x 1,000 canaries) no alarm in 3 repetitions; their claim
    # of 4 whose noise is really halved is detected every time, by both tests (measured: seeds 0-2)
    exact, halved = designs[1], designs[3]
    assert combined_row(exact, fixed_schedule(exact, 0.95), repetitions=3, seed=0).alarms == 0
    found = combined_row(halved, fixed_schedule(halved, 0.95), repetitions=3, seed=0)
    assert found.alarms == 3 and set(found.stopped_by) == {"fdp+mechanism"} and found.first_alarm_runs == (16,) * 3
