"""Tests for audit.stats.significance by hand: Holm's adjustment, the bootstrap difference's and
Welch's degenerate cases, the prediction test's closed form at 2 degrees of freedom, and what
`compare` tests. (Calibration on simulated experiments and the command line: tests/audit/test_compare.py.)"""

import math
from pathlib import Path

import numpy as np
import pytest

from audit.result import AuditResult
from audit.results import Experiment
from audit.stats.bootstrap import summarise_experiment
from audit.stats.significance import (
    bootstrap_difference,
    compare,
    compare_experiments,
    holm,
    prediction_test,
    welch_test,
)


def test_holm_steps_down_and_keeps_the_input_order():
    # sorted 0.01, 0.02, 0.04, 0.5 (m = 4): x4, x3, x2, x1 -> 0.04, 0.06, 0.08, 0.5, each at least
    # the one before; back in the input order
    assert holm([0.04, 0.5, 0.01, 0.02]).tolist() == pytest.approx([0.08, 0.5, 0.04, 0.06], abs=1e-15)
    # a large p early makes the later ones at least as large; and never above 1
    assert holm([0.3, 0.01, 0.011]).tolist() == pytest.approx([0.3, 0.03, 0.03], abs=1e-15)
    assert holm([0.6, 0.9]).tolist() == [1.0, 1.0]


def test_prediction_test_at_two_degrees_of_freedom_by_hand():
    # value 0.5 against (0, 1, 2): mean 1, s = 1, t = -0.5 / sqrt(1 + 1/3) = -√3/4 = -0.433013.
    # Student's t with 2 df has the closed-form cdf F(t) = 1/2 + t / (2 sqrt(2 + t²)):
    # F = 1/2 - 0.433013 / (2 sqrt(2.1875)) = 1/2 - 0.433013 / 2.958040 = 0.353615
    t, p_less, p_more = prediction_test(0.5, [0.0, 1.0, 2.0])
    assert t == pytest.approx(-math.sqrt(3) / 4, abs=1e-12)
    assert p_less == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert p_less == pytest.approx(0.353615, abs=1e-6) and p_less + p_more == pytest.approx(1.0, abs=1e-12)
    assert prediction_test(3.0, [1.0, 1.0]) == (math.inf, 1.0, 0.0)


def test_bootstrap_difference_drops_nan_pairs_and_needs_two():
    # pairs (1 - 0, 3 - 1, nan, 2 - nan): differences 1 and 2, sd √0.5; d = 0.5, p = 2 Φ(-0.5/√0.5)
    # = 2 Φ(-0.707107) = 0.479500
    interval, p = bootstrap_difference(1.0, [1.0, 3.0, np.nan, 2.0], 0.5, [0.0, 1.0, 0.0, np.nan])
    assert p == pytest.approx(0.479500, abs=1e-6)
    assert (interval.point, interval.low, interval.high) == (0.5, pytest.approx(1.025), pytest.approx(1.975))
    assert bootstrap_difference(1.0, [1.0, np.nan], 0.0, [0.0, 0.0])[1] == 1.0  # one usable pair: no test
    assert bootstrap_difference(1.0, [2.0, 2.0], 0.0, [1.0, 1.0])[1] == 0.0  # no spread, a difference: certain


def test_welch_test_with_one_value_a_side_has_no_variance_estimate():
    interval, p = welch_test([0.9], [0.8, 0.7])
    assert interval.point == pytest.approx(0.15, abs=1e-15) and math.isnan(interval.low) and p == 1.0


def experiment(name: str, dataset: str = "digits", *, n_targets: int = 2, shift: float = 0.0) -> Experiment:
    """n_targets targets of 4 examples, members at columns 0 and 1, members scored `shift` higher."""
    membership = np.array([[True, True, False, False]] * n_targets)
    scores = np.tile([1.0, 3.0, 2.0, 4.0], (n_targets, 1)) + shift * membership
    return Experiment(
        path=Path(name),
        result=AuditResult.from_json(
            {"victim": name, "dataset": dataset, "config": {}, "evaluation": {"confidence": 0.95}}
        ),
        membership=membership,
        init=np.zeros_like(membership),
        scores={"loss": scores},
        test_accuracy=[0.8, 0.9],
    )


def test_compare_tests_accuracy_and_every_resampled_metric_holm_adjusted_together():
    victim = summarise_experiment(experiment("dm", shift=10.0), n_boot=20, rng=0)
    baseline = summarise_experiment(experiment("subset"), n_boot=20, rng=1)
    found = compare(victim, baseline)
    # test accuracy and AUC, TPR at 1% and 0.1% of loss on `all` (eps_lower not resampled)
    assert [(t.metric, t.attack, t.group) for t in found.tests] == [
        ("test_accuracy", None, None),
        ("auc", "loss", "all"),
        ("tpr_at_fpr_0.01", "loss", "all"),
        ("tpr_at_fpr_0.001", "loss", "all"),
    ]
    # every target identical: the victim's AUC is 1 in every replicate, the baseline's 1/4 (members
    # 1, 3 against non-members 2, 4: one win of four), so the difference 3/4 has no spread: p = 0
    auc = found.get("auc", "loss", "all")
    assert auc.difference.point == pytest.approx(0.75, abs=1e-15) and auc.p_value == 0.0 and auc.significant
    assert found.get("test_accuracy").p_value == 1.0  # the same accuracies
    with pytest.raises(KeyError):
        found.get("eps_lower", "loss", "all")
    lone = summarise_experiment(experiment("one", n_targets=1), n_boot=5, rng=0)
    with pytest.raises(ValueError, match="1 target run; a comparison needs at least 2 per side"):
        compare(lone, baseline)


def test_compare_experiments_leaves_the_baseline_out_and_refuses_another_dataset():
    baseline = experiment("subset")
    report = compare_experiments([baseline, experiment("dm")], baseline, n_boot=5)
    assert [s.label for s in report.experiments] == ["dm"]
    with pytest.raises(ValueError, match="dataset 'cifar' differs from the baseline's 'digits'"):
        compare_experiments([experiment("dm", "cifar")], baseline, n_boot=5)
