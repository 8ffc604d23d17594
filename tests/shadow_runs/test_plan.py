import numpy as np
import pytest

from shadow_runs.plan import default_targets, membership_matrix, membership_row, run_seed, shadow_mask, target_runs


LABELS = np.repeat(np.arange(3), [7, 6, 5])


def test_cells_are_independent_fair_coins():
    keep = membership_matrix(np.zeros(2000, dtype=np.int64), n_runs=50, master_seed=3)
    assert keep.shape == (50, 2000) and keep.dtype == bool
    # 100,000 fair coins: mean 0.5 with sd 0.0016, so 0.5 +- 0.006 holds at ~3.8 sd.
    assert abs(keep.mean() - 0.5) < 0.006
    # no balancing: member counts per run vary like Binomial(2000, 1/2) (sd 22.4) ...
    counts = keep.sum(1)
    assert counts.std() > 10 and len(set(counts.tolist())) > 10
    # ... and the coins of two runs, or of two examples, are uncorrelated (|r| < 4 / sqrt(n))
    assert abs(np.corrcoef(keep[0], keep[1])[0, 1]) < 4 / np.sqrt(2000)
    assert abs(np.corrcoef(keep[:, 0], keep[:, 1])[0, 1]) < 4 / np.sqrt(50) + 0.1
    # no complementary pairs any more
    assert not (keep[0] == ~keep[1]).all()


def test_inclusion_rate_sets_the_coin_probability():
    keep = membership_matrix(np.zeros(5000, dtype=np.int64), n_runs=20, master_seed=0, inclusion_rate=0.2)
    # 100,000 coins at 0.2: sd 0.00126, so 0.2 +- 0.006 is ~4.7 sd
    assert abs(keep.mean() - 0.2) < 0.006
    for rate in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="--inclusion-rate"):
            membership_matrix(LABELS, n_runs=2, master_seed=0, inclusion_rate=rate)


def test_a_run_depends_only_on_the_master_seed_and_its_index():
    row = membership_row(len(LABELS), master_seed=4, run=3)
    assert np.array_equal(row, membership_matrix(LABELS, n_runs=6, master_seed=4)[3])


def test_plan_for_fewer_runs_is_a_prefix_of_the_plan_for_more():
    small = membership_matrix(LABELS, n_runs=5, master_seed=1)
    large = membership_matrix(LABELS, n_runs=12, master_seed=1)
    assert np.array_equal(small, large[:5])


def test_plan_and_seeds_depend_on_the_master_seed():
    assert not np.array_equal(
        membership_matrix(LABELS, n_runs=4, master_seed=0), membership_matrix(LABELS, n_runs=4, master_seed=1)
    )
    seeds = [run_seed(master_seed=0, run=r) for r in range(100)]
    assert len(set(seeds)) == 100 and all(0 <= s < 2**31 for s in seeds)
    assert run_seed(master_seed=0, run=7) == run_seed(master_seed=0, run=7) != run_seed(master_seed=1, run=7)


def test_targets_are_the_first_runs_and_the_rest_are_references():
    assert target_runs(64, 16).tolist() == list(range(16))
    assert [default_targets(r) for r in (2, 3, 8, 32, 64, 256)] == [1, 1, 4, 16, 32, 128]
    with pytest.raises(ValueError, match="--n-targets 4 must be between 1 and 3"):
        target_runs(4, 4)  # no reference run would be left


def test_shadows_are_the_reference_runs_only():
    mask = shadow_mask(5, [0, 1])
    expected = np.array([[0, 0, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=bool)
    assert np.array_equal(mask, expected)  # no target is another target's shadow
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        shadow_mask(4, [4])
    with pytest.raises(ValueError, match="no reference run"):
        shadow_mask(2, [0, 1])


def test_shadow_counts_do_not_depend_on_the_targets_membership():
    # With independent coins, the number of IN shadows of an example is independent of its coin in
    # the target. Over 16 targets x 3,000 examples and 16 reference runs, the mean IN-shadow count
    # of the target's members and of its non-members agree (both 8 in expectation; the standard
    # error of their difference is about 2 / sqrt(48,000 / 2) ~ 0.013, so 0.06 is ~4.6 se).
    n_runs, n_targets = 32, 16
    keep = membership_matrix(np.zeros(3000, dtype=np.int64), n_runs=n_runs, master_seed=2)
    targets = target_runs(n_runs, n_targets)
    in_counts = shadow_mask(n_runs, targets).astype(int) @ keep.astype(int)  # [T, n]
    member = keep[targets]
    assert abs(in_counts[member].mean() - in_counts[~member].mean()) < 0.06
    # and no target serves as a shadow: its coins are among those being judged
    assert not shadow_mask(n_runs, targets)[:, targets].any()
