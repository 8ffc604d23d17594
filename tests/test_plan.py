import numpy as np
import pytest

from shadow_runs.plan import membership_matrix, n_pairs, run_seed, shadow_mask, target_runs


LABELS = np.repeat(np.arange(3), [7, 6, 5])  # odd and even class sizes


def test_every_example_is_in_exactly_half_of_an_even_number_of_runs():
    keep = membership_matrix(LABELS, n_runs=8, master_seed=3)
    assert keep.shape == (8, 18) and keep.dtype == bool
    assert (keep.sum(0) == 4).all()


def test_runs_are_stratified_complementary_pairs():
    keep = membership_matrix(LABELS, n_runs=6, master_seed=0)
    assert (keep[0::2] == ~keep[1::2]).all()
    for row in keep:
        # Class sizes 7, 6, 5 -> members per class 3 or 4, exactly 3, 2 or 3.
        counts = np.bincount(LABELS[row], minlength=3)
        assert counts[0] in (3, 4) and counts[1] == 3 and counts[2] in (2, 3)


def test_plan_for_fewer_runs_is_a_prefix_of_the_plan_for_more():
    small = membership_matrix(LABELS, n_runs=5, master_seed=1)
    large = membership_matrix(LABELS, n_runs=12, master_seed=1)
    assert np.array_equal(small, large[:5])


def test_plan_and_seeds_depend_on_the_master_seed():
    assert not np.array_equal(membership_matrix(LABELS, n_runs=4, master_seed=0),
                              membership_matrix(LABELS, n_runs=4, master_seed=1))
    seeds = [run_seed(master_seed=0, run=r) for r in range(100)]
    assert len(set(seeds)) == 100 and all(0 <= s < 2**31 for s in seeds)
    assert run_seed(master_seed=0, run=7) == run_seed(master_seed=0, run=7) != run_seed(master_seed=1, run=7)


def test_shadow_mask_leaves_out_the_target_and_its_partner():
    mask = shadow_mask(5, [0, 3, 4])
    # Target 0: partner 1. Target 3: partner 2. Target 4: partner 5 does not exist.
    expected = np.array([[0, 0, 1, 1, 1], [1, 1, 0, 0, 1], [1, 1, 1, 1, 0]], dtype=bool)
    assert np.array_equal(mask, expected)


def test_shadow_counts_do_not_depend_on_the_targets_membership():
    keep = membership_matrix(LABELS, n_runs=10, master_seed=2)
    mask = shadow_mask(10, range(10))
    in_counts = mask.astype(int) @ keep.astype(int)  # [T, n]
    assert (in_counts == 4).all()  # 4 complete shadow pairs, one IN per pair, for every example


def test_shadow_mask_rejects_targets_outside_the_runs():
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        shadow_mask(4, [4])


def test_one_target_per_pair():
    assert [n_pairs(r) for r in (2, 3, 64)] == [1, 2, 32]
    assert target_runs(64, 16).tolist() == list(range(0, 32, 2))
    assert target_runs(5, 3).tolist() == [0, 2, 4]  # the odd last run is a pair of its own
    with pytest.raises(ValueError, match="--n-targets 3 must be between 1 and the 2 run pairs of --n-shadow 4"):
        target_runs(4, 3)
