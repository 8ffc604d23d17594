"""Tests for audit.stats.sequential (the looks of a sequential audit and the error each spends) and
audit.selftest.sequential (its check on exact mechanisms)."""

from dataclasses import replace

import numpy as np
import pytest

from audit.selftest.designs import Design, rr_labels, whitebox_designs
from audit.selftest.mechanisms import randomised_response
from audit.selftest.sequential import look_values, sequential_row
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
