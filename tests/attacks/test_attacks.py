import math

import numpy as np
import pytest
from scipy.stats import norm

from attacks import cross_entropy, lira_offline, lira_online, logit_confidence, loss_scores
from attacks.lira import PER_EXAMPLE_FROM, variance_for
from audit.stats.metrics import auc
from shadow_runs.plan import membership_matrix, shadow_mask


def test_logit_confidence_by_hand():
    # logits (2, 0, 0), label 0: p = e^2 / (e^2 + 2), so log(p / (1 - p)) = log(e^2 / 2) = 2 - ln 2.
    # label 1: p = 1 / (e^2 + 2), 1 - p = (e^2 + 1) / (e^2 + 2): log(p / (1 - p)) = -ln(e^2 + 1).
    logits = np.array([[[2.0, 0.0, 0.0]], [[2.0, 0.0, 0.0]]])
    phi = logit_confidence(logits, np.array([0, 1]))
    assert phi.shape == (2, 1)
    assert phi[0, 0] == pytest.approx(2 - math.log(2), abs=1e-12)
    assert phi[1, 0] == pytest.approx(-math.log(math.e**2 + 1), abs=1e-12)


def test_logit_confidence_is_stable_for_confident_models():
    logits = np.array([[[400.0, 0.0]]])  # p_y rounds to 1 in floating point; phi = 400 exactly
    assert logit_confidence(logits, np.array([0]))[0, 0] == pytest.approx(400.0)


def test_loss_is_the_cross_entropy_of_the_image_itself():
    # Query 0 logits (0, 0): CE = ln 2; the other query must be ignored.
    logits = np.array([[[0.0, 0.0], [9.0, -9.0]]])
    assert cross_entropy(logits[:, 0], np.array([1]))[0] == pytest.approx(math.log(2))
    assert loss_scores(logits, np.array([1]))[0] == pytest.approx(-math.log(2))


def _signal_stats(rng, *, n_runs=24, n=400, q=3, effect=1.0):
    labels = np.arange(n) % 2
    keep = membership_matrix(labels, n_runs=n_runs, master_seed=0)
    base = rng.normal(0, 2, size=(1, n, 1))  # per-example difficulty
    spread = rng.uniform(0.5, 2, size=(1, n, 1))  # per-example variance
    stats = base + effect * keep[..., None] + spread * rng.normal(size=(n_runs, n, q))
    return stats, keep


def naive_online(stats, keep, shadows, target):
    """Reference: loops over examples and queries with numpy's mean/var(ddof=1)."""
    n, q = stats.shape[1:]
    out = np.zeros(n)
    for i in range(n):
        total = 0.0
        for j in range(q):
            ins = stats[shadows & keep[:, i], i, j]
            outs = stats[shadows & ~keep[:, i], i, j]
            x = stats[target, i, j]
            total += norm.logpdf(x, ins.mean(), ins.std(ddof=1)) - norm.logpdf(x, outs.mean(), outs.std(ddof=1))
        out[i] = total / q
    return out


def test_vectorised_online_lira_matches_the_naive_reference():
    stats, keep = _signal_stats(np.random.default_rng(0), n=60)
    targets = [0, 5]
    shadows = shadow_mask(len(stats), targets)
    # the naive reference needs two IN and two OUT shadows per example (22 reference runs: true here)
    in_shadows = keep[shadows[0]].sum(0)
    assert in_shadows.min() >= 2 and (shadows[0].sum() - in_shadows).min() >= 2
    fast = lira_online(stats, keep, targets, shadows=shadows)
    for row, t in enumerate(targets):
        np.testing.assert_allclose(fast[row], naive_online(stats, keep, shadows[row], t), rtol=1e-9, atol=1e-9)


def test_offline_lira_by_hand():
    # One example, 4 runs; target 0, shadows = the reference runs 1, 2, 3; the OUT ones are 2 and 3
    # with stats 1 and 3: mean 2, var (1 + 1) / 1 = 2. Target stat 2 + sqrt(2): z = 1, score = log Phi(1).
    stats = np.array([2 + math.sqrt(2), 0.0, 1.0, 3.0]).reshape(4, 1, 1)
    keep = np.array([[True], [True], [False], [False]])
    score = lira_offline(stats, keep, [0], shadows=shadow_mask(4, [0]))
    assert score[0, 0] == pytest.approx(norm.logcdf(1.0), abs=1e-12)


@pytest.mark.parametrize("attack", [lira_online, lira_offline])
@pytest.mark.parametrize("variance", ["per-example", "global", "fixed"])
def test_null_input_gives_chance_auc(attack, variance):
    rng = np.random.default_rng(1)
    stats, keep = _signal_stats(rng, effect=0.0)
    targets = np.arange(8)
    scores = attack(stats, keep, targets, shadows=shadow_mask(len(stats), targets), variance=variance)
    # 8 x 400 scores, half members: the AUC's standard error is ~ sqrt(1/(12*1600)+...) ~ 0.01.
    assert abs(auc(scores[keep[targets]], scores[~keep[targets]]) - 0.5) < 0.04


@pytest.mark.parametrize("variance", ["per-example", "global", "fixed"])
def test_online_lira_finds_a_shift_of_one_standard_deviation(variance):
    stats, keep = _signal_stats(np.random.default_rng(2), effect=1.0)
    targets = np.arange(8)
    online = lira_online(stats, keep, targets, shadows=shadow_mask(len(stats), targets), variance=variance)
    offline = lira_offline(stats, keep, targets, shadows=shadow_mask(len(stats), targets), variance=variance)
    member = keep[targets]
    # Per example the IN and OUT Gaussians differ by ~1/spread sd on each of 3 queries; the raw
    # stats (no calibration) are dominated by the per-example base (sd 2) and barely separate.
    raw = auc(stats[targets].mean(-1)[member], stats[targets].mean(-1)[~member])
    assert auc(online[member], online[~member]) > 0.75 > raw + 0.1
    assert auc(offline[member], offline[~member]) > 0.7


def test_fixed_variance_is_that_of_all_observations_by_hand():
    # Two examples, 4 runs; target 0, shadows 1..3. OUT observations: example 0 in runs 2, 3
    # (stats 1, 3), example 1 in run 1 (stat 5). The fixed variance is that of {1, 3, 5} around
    # their mean 3, as LiRA's public code takes np.std: (4 + 0 + 4) / 3 = 8/3. Example 0's OUT
    # mean is 2, so a target stat of 2 + sqrt(8/3) is z = 1: score log Phi(1).
    stats = np.array([[2 + math.sqrt(8 / 3), 0.0], [0.0, 5.0], [1.0, 0.0], [3.0, 0.0]]).reshape(4, 2, 1)
    keep = np.array([[True, True], [True, False], [False, True], [False, True]])
    score = lira_offline(stats, keep, [0], shadows=shadow_mask(4, [0]), variance="fixed")
    assert score[0, 0] == pytest.approx(norm.logcdf(1.0), abs=1e-12)
    # the pooled within-example ("global") variance is example 0's alone: ((1-2)^2 + (3-2)^2) / 1 = 2
    score = lira_offline(stats, keep, [0], shadows=shadow_mask(4, [0]), variance="global")
    assert score[0, 0] == pytest.approx(norm.logcdf(math.sqrt(8 / 3) / math.sqrt(2)), abs=1e-12)


def test_auto_variance_depends_on_the_reference_runs():
    assert variance_for("auto", PER_EXAMPLE_FROM - 1) == "fixed"
    assert variance_for("auto", PER_EXAMPLE_FROM) == "per-example"
    assert variance_for("global", 2) == "global"
    with pytest.raises(ValueError, match="'median'"):
        variance_for("median", 64)


def test_bad_arguments_name_the_value():
    stats, keep = _signal_stats(np.random.default_rng(3), n=10)
    with pytest.raises(ValueError, match="'median'"):
        lira_online(stats, keep, [0], shadows=shadow_mask(len(stats), [0]), variance="median")
    with pytest.raises(ValueError, match="shadow for every target"):
        lira_online(stats, keep, [0], shadows=np.zeros((1, len(stats)), dtype=bool))
