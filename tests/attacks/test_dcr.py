"""The distance-to-closest-record attack on a released synthetic set."""

import numpy as np
import pytest

from attacks import dcr_scores
from attacks.dcr import nearest_distances


def test_distances_by_hand():
    x = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    release = np.array([[0.0, 0.0], [6.0, 8.0]])
    # (0,0): 0 to the first; (3,4): 5 to either; (1,1): sqrt(2) to the first.
    assert np.allclose(nearest_distances(x, release), [0.0, 5.0, np.sqrt(2)])
    # Chunks of one row give the same answer as one chunk.
    assert np.array_equal(nearest_distances(x, release, chunk=1), nearest_distances(x, release))


def test_only_released_images_of_the_same_class_count():
    x = np.array([[0.0], [10.0], [10.0]])[:, :, None, None]  # three 1-pixel images
    y = np.array([0, 0, 1])
    release_x, release_y = np.array([[1.0], [10.0]])[:, :, None, None], np.array([0, 1])
    # Class 0 images see only the released 1.0: distances 1 and 9; the class 1 image is released.
    assert np.allclose(dcr_scores(x, y, release_x, release_y), [-1.0, -9.0, 0.0])


def test_a_class_missing_from_the_release_falls_back_to_all_released_images():
    x, y = np.array([[2.0]]), np.array([3])
    assert np.allclose(dcr_scores(x, y, np.array([[0.0], [5.0]]), np.array([0, 1])), [-2.0])


def test_a_released_member_scores_highest(pool):
    rng = np.random.default_rng(0)
    released = rng.choice(pool.n_pool, size=20, replace=False)
    scores = dcr_scores(pool.x, pool.y, pool.x[released], pool.y[released])
    assert np.all(scores[released] == 0.0) and np.all(scores <= 0.0)
    others = np.setdiff1d(np.arange(pool.n_pool), released)
    # digits has no exact duplicates of a released image among the others in this draw.
    assert scores[others].max() < 0


def test_bad_releases_are_refused():
    with pytest.raises(ValueError, match="empty"):
        dcr_scores(np.zeros((2, 4)), np.zeros(2, int), np.zeros((0, 4)), np.zeros(0, int))
    with pytest.raises(ValueError, match="pool images have 4 values, released images 3"):
        dcr_scores(np.zeros((2, 4)), np.zeros(2, int), np.zeros((1, 3)), np.zeros(1, int))


def test_calibrated_dcr_beats_the_raw_distance_when_examples_differ_in_difficulty():
    from audit.evaluate import StoredRuns, attack_scores
    from audit.stats.metrics import auc
    from shadow_runs.plan import membership_matrix

    rng = np.random.default_rng(0)
    n, runs = 400, 16
    keep = membership_matrix(np.zeros(n, dtype=np.int64), n_runs=runs, master_seed=0)
    # Each example has its own typical distance to the release (sd 2 across examples, as outliers
    # and typical images do); membership brings it 0.5 closer, with run-to-run noise of sd 0.2.
    base = rng.normal(-5, 2, size=n)
    dcr = base + 0.5 * keep + rng.normal(0, 0.2, size=(runs, n))
    stored = StoredRuns(
        keep=keep,
        confidence=np.zeros((runs, n, 1)),
        loss=np.zeros((runs, n)),
        init_mask=np.zeros((runs, n), dtype=bool),
        meta=({},) * runs,
        dcr=dcr,
    )
    targets = np.arange(0, runs, 2)
    member = keep[targets]
    raw = attack_scores(stored, "dcr", targets, variance="per-example")
    calibrated = attack_scores(stored, "dcr_lira", targets, variance="per-example")
    # Raw: a 0.5 shift under a spread of 2 -> AUC ~ Phi(0.5 / (2 sqrt 2)) ~ 0.57. Calibrated on
    # the 7 OUT shadows of each example: a shift of 2.5 noise sd -> AUC ~ Phi(2.5 / sqrt 2) ~ 0.96.
    assert auc(raw[member], raw[~member]) < 0.65
    assert auc(calibrated[member], calibrated[~member]) > 0.9
