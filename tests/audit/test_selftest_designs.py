"""Tests for audit.selftest.designs by hand: the retired pairs plan, the Clopper-Pearson
interval's closed forms, what a bound is judged against, and the pass rule's boundary. (The
designs' validity and power, and the command line: tests/audit/test_selftest.py.)"""

import math

import numpy as np
import pytest

from audit.stats.guesses import RULES
from audit.selftest.designs import (
    KEYS,
    Design,
    clopper_pearson,
    complement_pair_plan,
    false_alarms,
    judged_rows,
    old_plan,
    truth,
    verdict,
)
from audit.selftest.mechanisms import null_scores


def test_the_pairs_plan_halves_every_class_rounding_down_and_complements():
    # class 0 has 3 records: run 0 takes 3 // 2 = 1, run 1 the other 2; class 1 has 2: one each
    labels = np.array([0, 0, 0, 1, 1])
    keep = complement_pair_plan(labels, 2, seed=0)
    assert (keep[0] ^ keep[1]).all()
    assert np.bincount(labels[keep[0]], minlength=2).tolist() == [1, 1]
    with pytest.raises(ValueError, match="n_runs must be even and >= 2, got 3"):
        complement_pair_plan(labels, 3, seed=0)
    # an odd count takes the first runs of one more pair, and the first runs do not depend on the count
    np.testing.assert_array_equal(old_plan(labels, 3, 5)[:2], old_plan(labels, 2, 5))
    assert old_plan(labels, 3, 5).shape == (3, 5)


def test_clopper_pearson_closed_forms():
    # 0 of 10: upper limit solves (1 - p)^10 = 0.025, p = 1 - 0.025^(1/10) = 0.308497;
    # 10 of 10: lower limit solves p^10 = 0.025, p = 0.691503
    assert clopper_pearson(0, 10) == (0.0, pytest.approx(1 - 0.025**0.1, abs=1e-12))
    assert clopper_pearson(10, 10) == (pytest.approx(0.025**0.1, abs=1e-12), 1.0)
    assert 1 - 0.025**0.1 == pytest.approx(0.308497, abs=1e-6)


def null_design(**fields) -> Design:
    return Design("null", "independent", 0.0, null_scores, np.zeros(10, dtype=np.int64), 2, mu=0.0, **fields)


def alarms(reps: int, count: int) -> np.ndarray:
    """[repetition, rule, key]: 0 everywhere but the grid's eps_lower, 0.1 (> 0: an alarm on the
    null) in the first `count` repetitions."""
    found = np.zeros((reps, len(RULES), len(KEYS)))
    found[:count, RULES.index("grid"), KEYS.index("eps_lower")] = 0.1
    return found


def test_the_null_is_judged_against_zero_and_the_own_curve_not_without_a_claim():
    design = null_design()
    assert (design.m, design.n_runs, design.judged) == (20, 4, True)
    assert truth(design, "steinke") == 0.0 and truth(design, "gaussian") == 0.0
    assert truth(design, "mechanism") is None
    assert false_alarms(design, alarms(20, 3)) == 3
    assert false_alarms(design, alarms(20, 3), "tuned") == 0
    assert false_alarms(design, alarms(20, 3), "grid", "mechanism") is None


def test_the_pass_rule_s_boundary_by_hand():
    # the null design's judged rows: 2 rules x 3 analyses (no claimed mechanism) = 6, each failing
    # when P[Binomial(20, 0.05) >= alarms] < 0.05 / 6 = 0.00833. P[X = k] for k = 0..4:
    # 0.358486, 0.377354, 0.188677, 0.059582, 0.013328, so P[X >= 4] = 0.015902 (passes) and
    # P[X >= 5] = 0.002574 (fails).
    assert len(judged_rows([(null_design(), alarms(20, 0))])) == 6
    passed, line = verdict([(null_design(), alarms(20, 4))])
    assert passed and "largest: 4/20 = 20.0%, grid steinke, null eps0 0" in line
    passed, line = verdict([(null_design(), alarms(20, 5))])
    assert not passed and "grid steinke, null eps0 0: 5/20 alarms = 25.0%" in line
    (row,) = [r for r in judged_rows([(null_design(), alarms(20, 5))]) if r.alarms]
    assert row.p_value == pytest.approx(0.002574, abs=1e-6)
    assert math.isclose(row.rate, 0.25)
