"""Released counts calibrated per record against its own OUT reference runs (`support_cal`,
`queries_cal`; attacks/tabular/calibrated.py): the score on a hand-built example, and a leaking
record un-buried among noisy ones."""

import numpy as np

from attacks.registry import TABLE, get_attack
from attacks.tabular import calibrated_counts
from audit.evaluate import StoredRuns, attack_scores


def anscombe(c: float) -> float:
    return 2.0 * np.sqrt(c + 0.375)


def test_a_count_is_scored_against_the_record_s_own_out_runs_the_largest_over_its_views():
    # 4 runs, 2 records, 2 views; the targets are runs 0 and 1, each with the references 2 and 3.
    # Record 0 is IN in run 0 and OUT in runs 1, 2, 3; record 1 is IN in every run (no OUT reference).
    keep = np.array([[True, True], [False, True], [False, True], [False, True]])
    counts = np.zeros((4, 2, 2), dtype=np.int32)
    counts[:, 0, 0] = [1, 0, 0, 0]  # record 0, view 0: a cell its OUT references never reach
    counts[:, 0, 1] = [5, 2, 2, 8]  # record 0, view 1: a noisy cell
    counts[:, 1] = 7  # record 1: any count; it has no OUT reference, so it scores 0
    shadows = np.array([[False, False, True, True], [False, False, True, True]])
    # Record 0's k = 2 OUT references (runs 2, 3). View 0: A(0) twice, mean A(0), S = 0, v = (0 + 1) / 2:
    # target 0 (count 1) scores (A(1) - A(0)) / sqrt(1/2) = 1.5846; target 1 (count 0) scores 0.
    # View 1: A(2) and A(8), mean m = (A(2) + A(8)) / 2, S = (A(8) - A(2))^2 / 2, v = (S + 1) / 2:
    # target 0 (count 5) scores (A(5) - m) / sqrt(v) = 0.1321; target 1 (count 2) (A(2) - m) / sqrt(v) < 0.
    m, s = (anscombe(2) + anscombe(8)) / 2, (anscombe(8) - anscombe(2)) ** 2 / 2
    view_1 = (anscombe(5) - m) / np.sqrt((s + 1) / 2)
    leak = (anscombe(1) - anscombe(0)) * np.sqrt(2)
    assert 0.13 < view_1 < leak < 1.59 and anscombe(2) < m
    found = calibrated_counts(counts, keep, np.array([0, 1]), shadows=shadows)
    np.testing.assert_allclose(
        found, [[max(leak, view_1), 0.0], [max(0.0, (anscombe(2) - m) / np.sqrt((s + 1) / 2)), 0.0]]
    )
    assert found[1, 0] == 0.0  # target 1's 0 in view 0 ties its OUT runs; view 1 is below their mean


def test_a_leaking_record_is_un_buried_among_records_whose_noise_is_larger():
    """4 records, each alone in one column, 64 runs (32 targets, 32 references), seed 0: record 0's
    column leaks (0 released records in every OUT run, Poisson(3) IN), the other three columns are
    public, their noise releasing Poisson(λ) records OUT and Poisson(λ + 1) IN, λ = 2, 8, 20 (the noise
    of a marginal-based release). Ranked raw (`support`), the leak is buried: at most 5 IN coins score
    above every OUT coin (1 at this seed; 0-5 at seeds 0-4). Calibrated per record (`support_cal`),
    every target run where the leak released something (18 here) scores above every OUT coin."""
    rng = np.random.default_rng(0)
    n_runs, targets = 64, np.arange(32)
    keep = rng.random((n_runs, 4)) < 0.5
    noise = np.array([0.0, 2.0, 8.0, 20.0])
    support = rng.poisson(np.where(np.arange(4) == 0, 3.0 * keep, noise + keep))[..., None].astype(np.float64)
    runs = StoredRuns(
        keep=keep,
        confidence=np.zeros((n_runs, 4, 1)),
        loss=np.zeros((n_runs, 4)),
        init_mask=np.zeros((n_runs, 4), dtype=bool),
        meta=tuple({} for _ in range(n_runs)),
        release_density=np.zeros((n_runs, 4)),
        release_counts=np.zeros((n_runs, 4, 1), dtype=np.int32),
        release_support=support,  # [R, n, 1]: each record alone in one column
        release_pair_support=np.zeros((n_runs, 4)),
    )
    coins = keep[targets]
    leaked = coins[:, 0] & (support[targets, 0, 0] > 0)  # the target runs where the leak released something
    assert leaked.sum() == 18

    def above_every_out(name):
        scores = attack_scores(runs, name, targets, variance="fixed")
        return scores, scores > scores[~coins].max()

    _, raw = above_every_out("support")
    assert raw.sum() <= 5
    calibrated, found = above_every_out("support_cal")
    assert found[:, 0][leaked].all() and not found[~coins].any()
    assert (calibrated[:, 0][coins[:, 0]] >= 0).all()  # an IN run that released nothing ties its OUT runs at 0
    spec = get_attack("support_cal")
    assert spec.needs == TABLE and spec.calibrated and spec.min_runs == 4
