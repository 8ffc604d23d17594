"""Tests for audit.stats.bootstrap by hand: the draw counts, the resampled AUC and TPR of a
weighted pool of targets, the intervals and their degenerate cases, and one experiment's estimates.
(Exactness against audit.stats.metrics on random resamples and the bootstrap's calibration are in
tests/audit/test_compare.py.)"""

import math
from pathlib import Path

import numpy as np
import pytest

from audit.result import AuditResult
from audit.results import Experiment
from audit.stats.bootstrap import (
    Interval,
    percentile_interval,
    resampled_metrics,
    summarise_experiment,
    t_interval,
    target_weights,
)


def test_target_weights_count_each_target_s_draws():
    # row 0 drew targets 0, 0, 2; row 1 drew 1, 2, 2
    assert target_weights(np.array([[0, 0, 2], [1, 2, 2]]), 3).tolist() == [[2, 0, 1], [0, 1, 2]]


def test_resampled_auc_by_hand_with_a_tie_and_an_unused_column():
    # target 0: member 3, non-members 1 and 3; target 1: member 0, non-member 2 (its third column
    # is in neither mask: not scored). Member-against-non-member wins, ties 1/2:
    #   member of 0 vs non-members of 0: 1 (3 > 1) + 1/2 (3 = 3) = 1.5; vs those of 1: 1 (3 > 2)
    #   member of 1 vs anything: 0
    # weights (1, 1): 2.5 / (2 members x 3 non-members) = 5/12
    # weights (2, 0): 4 x 1.5 / (2 x 4) = 3/4; weights (0, 2): 0; weights (0, 0): no members, NaN
    scores = np.array([[3.0, 1.0, 3.0], [0.0, 2.0, 99.0]])
    member = np.array([[True, False, False], [True, False, False]])
    nonmember = np.array([[False, True, True], [False, True, False]])
    weights = np.array([[1, 1], [2, 0], [0, 2], [0, 0]], dtype=float)
    found = resampled_metrics(scores, member, nonmember, weights)["auc"]
    assert found[:3].tolist() == pytest.approx([5 / 12, 3 / 4, 0.0], abs=1e-15)
    assert math.isnan(found[3])


def test_resampled_tpr_by_hand():
    # target 0: member 3, non-member 1; target 1: member 0, non-member 2. At FPR <= 1% no
    # non-member may be flagged: threshold above the largest non-member drawn.
    # weights (1, 1): members {3, 0}, non-members {1, 2}: threshold 3 flags 1 of 2 members, 1/2
    # weights (2, 0): members {3, 3}, non-members {1, 1}: all, 1; weights (0, 2): members {0, 0}
    # below non-members {2, 2}: 0
    scores = np.array([[3.0, 1.0], [0.0, 2.0]])
    member = np.array([[True, False], [True, False]])
    weights = np.array([[1, 1], [2, 0], [0, 2]], dtype=float)
    found = resampled_metrics(scores, member, ~member, weights)
    assert found["tpr_at_fpr_0.01"].tolist() == [0.5, 1.0, 0.0]
    assert found["tpr_at_fpr_0.001"].tolist() == [0.5, 1.0, 0.0]


def test_percentile_interval_ignores_nan_and_has_nan_bounds_without_replicates():
    # 1..5 at confidence 0.5: numpy's linear quantiles at 0.25 and 0.75 are the 2nd and 4th values
    assert percentile_interval(3.5, [np.nan, 5, 1, 4, 2, 3], confidence=0.5) == Interval(3.5, 2.0, 4.0)
    empty = percentile_interval(1.0, [np.nan])
    assert empty.point == 1.0 and math.isnan(empty.low) and math.isnan(empty.high)
    assert empty.to_json() == {"point": 1.0, "low": None, "high": None}


def test_t_interval_by_hand():
    # (1, 2, 3): mean 2, s = 1, standard error 1/√3, t quantile 0.975 at 2 df = 4.302653:
    # 2 ± 4.302653 / √3 = 2 ± 2.484138
    found = t_interval([1.0, 2.0, 3.0])
    assert (found.point, found.low, found.high) == (
        2.0,
        pytest.approx(-0.484138, abs=1e-6),
        pytest.approx(4.484138, abs=1e-6),
    )
    assert t_interval([0.7, 0.7]) == Interval(0.7, 0.7, 0.7)  # no variance: the mean itself
    single = t_interval([0.9])
    assert single.point == 0.9 and math.isnan(single.low) and math.isnan(single.high)


def two_targets(**summary):
    """Two targets of 4 examples, members at columns 0 and 1: target 0's members score 4, 3 over
    non-members 2, 1 (AUC 1); target 1's members score 1, 2 under non-members 3, 4 (AUC 0)."""
    membership = np.array([[True, True, False, False]] * 2)
    scores = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    base = {"victim": "subset", "dataset": "digits", "config": {"ipc": 1}, "evaluation": {"confidence": 0.95}}
    return Experiment(
        path=Path("subset-digits-x"),
        result=AuditResult.from_json({**base, **summary}),
        membership=membership,
        init=np.zeros_like(membership),
        scores={"loss": scores},
        test_accuracy=[0.8, 0.9],
    )


def test_an_experiment_s_point_estimates_and_replicates_by_hand():
    # pooled: members {4, 3, 1, 2}, non-members {2, 1, 3, 4}: wins 3 + 2.5 + 0.5 + 1.5 = 8 of 16,
    # AUC 1/2. A replicate drawing target 0 twice has AUC 1, target 1 twice 0, one of each 1/2:
    # every AUC replicate is one of those three. eps_lower and its ceiling are summary.json's.
    summary = summarise_experiment(
        two_targets(attacks={"loss": {"eps_lower": 0.25, "eps_ceiling": 1.5}}), n_boot=50, rng=0, label="x"
    )
    estimate = summary.estimates[("loss", "all")]
    assert list(summary.estimates) == [("loss", "all")]  # no init members: no sub-groups
    assert estimate.metrics["auc"].point == 0.5
    assert set(estimate.replicates["auc"].tolist()) <= {0.0, 0.5, 1.0}
    assert (estimate.metrics["eps_lower"].point, estimate.eps_ceiling) == (0.25, 1.5)
    assert "eps_lower" not in estimate.replicates  # n_boot_eps = 0: not resampled
    assert summary.test_accuracy.point == pytest.approx(0.85, abs=1e-15)


def test_summarise_experiment_refuses_bad_arguments():
    exp = two_targets()
    with pytest.raises(ValueError, match="attack 'lira' is not in"):
        summarise_experiment(exp, attacks=["lira"])
    with pytest.raises(ValueError, match="unknown group 'bogus'"):
        summarise_experiment(exp, groups=["bogus"])
    with pytest.raises(ValueError, match="n_boot must be an integer >= 1, got 0"):
        summarise_experiment(exp, n_boot=0)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\), got 1.0"):
        summarise_experiment(exp, confidence=1.0)
