"""The tabular synthesizers `ctgan` and `mst` (victims/pipelines/ctgan.py, mst.py): MST's budget by
hand, its selection, the mechanism each selection records, CTGAN's clipping into the schema; the
contract (tests/contracts/test_tabular_victims.py) covers determinism, members only and the RNGs."""

import math
import sys

import numpy as np
import pandas as pd
import pytest

from audit.stats.mechanism import SubsampledGaussian, blow_up_inverse
from shadow_runs.plan import membership_matrix
from victims import load_pool
from victims.pipelines import ctgan, mst
from victims.tabular.schema import cell_counts

# ε = 1, δ = 1e-5: L = ln(1/δ) = 5 ln 10 = 11.512925464970229. Since (√(L+1) - √L)(√(L+1) + √L) = 1,
# ρ = (√(L+1) - √L)² = 1 / (√12.5129... + √11.5129...)² = 1 / (3.5373614 + 3.3930702)² = 1 / 48.030866
RHO = 0.0208199383395355
K = 9  # fair: 8 features and the label


def test_the_zcdp_conversion_by_hand():
    assert mst.zcdp_rho(1.0, 1e-5) == pytest.approx(RHO, rel=1e-12)
    assert 1.0 / (math.sqrt(12.512925464970229) + math.sqrt(11.512925464970229)) ** 2 == pytest.approx(RHO, rel=1e-12)
    assert mst.zcdp_epsilon(RHO, 1e-5) == pytest.approx(1.0, rel=1e-12)  # ρ + 2√(ρ L) = 1
    assert mst.zcdp_epsilon(0.5, 1e-5) == pytest.approx(0.5 + 2 * math.sqrt(0.5 * 11.512925464970229), rel=1e-12)


def test_the_private_budget_spends_rho_in_thirds():
    budget = mst.mst_budget(RHO, K, "private")
    assert budget.one_way_sigma == pytest.approx(math.sqrt(27 / (2 * RHO)), rel=1e-12)  # 25.464031...
    assert budget.one_way_sigma == pytest.approx(25.46403161, rel=1e-9)
    assert budget.two_way_sigma == pytest.approx(math.sqrt(24 / (2 * RHO)), rel=1e-12)  # 24.007719...
    assert budget.two_way_sigma == pytest.approx(24.00771924, rel=1e-9)
    assert budget.selection_epsilon == pytest.approx(math.sqrt(8 * RHO / 24), rel=1e-12)  # 0.0833065...
    assert K / (2 * budget.one_way_sigma**2) == pytest.approx(RHO / 3, rel=1e-12)
    assert (K - 1) * budget.selection_epsilon**2 / 8 == pytest.approx(RHO / 3, rel=1e-12)
    assert budget.rho == pytest.approx(RHO, rel=1e-12)


def test_the_public_budget_is_seventeen_equal_gaussians():
    budget = mst.mst_budget(RHO, K, "public")
    assert budget.one_way_sigma == budget.two_way_sigma == pytest.approx(math.sqrt(17 / (2 * RHO)), rel=1e-12)
    assert budget.one_way_sigma == pytest.approx(20.20550658, rel=1e-9)
    assert budget.selection_epsilon is None and budget.rho == pytest.approx(RHO, rel=1e-12)


def test_project_to_simplex():
    assert np.allclose(mst.project_to_simplex(np.array([3.0, 1.0, -2.0]), 4.0), [3.0, 1.0, 0.0])
    assert np.allclose(mst.project_to_simplex(np.array([5.0, 5.0, -4.0]), 4.0), [2.0, 2.0, 0.0])
    found = mst.project_to_simplex(np.random.default_rng(0).normal(size=20), 7.0)
    assert found.min() >= 0 and found.sum() == pytest.approx(7.0)


def test_the_selection_is_a_spanning_tree_led_by_the_strongest_pair():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, size=(2000, 4))
    codes[:, 2] = codes[:, 0]  # columns 0 and 2 are one column: the pair the independent model explains worst
    sizes = (3, 3, 3, 3)
    estimate = mst.independent_estimate([cell_counts(codes, sizes, (c,)) for c in range(4)], sigma=1.0)
    edges = mst.spanning_tree(codes, sizes, estimate, draw=50.0, rng=rng)
    assert len(edges) == 3 and edges[0] == (0, 2)
    joined = {0}
    for _ in range(3):  # the three edges join every column
        joined |= {c for edge in edges if set(edge) & joined for c in edge}
    assert joined == {0, 1, 2, 3}


@pytest.fixture(scope="module")
def keep(table):
    return membership_matrix(table.y, n_runs=2, master_seed=0)[0]


def test_the_public_selection_records_its_gaussian_mechanism(table, keep):
    released = mst.MST(selection="public", rows=200, iterations=100).release(table, keep, 3, inclusion_rate=0.5)
    sigma = math.sqrt(17 / (2 * RHO))
    assert released.extra["mechanism"] == pytest.approx({"noise_multiplier": sigma, "sample_rate": 1.0, "steps": 17})
    assert released.extra["formal_epsilon"] == pytest.approx(1.0, rel=1e-12) and released.extra["delta"] == 1e-5
    claimed = SubsampledGaussian.of(released.extra["mechanism"])
    assert claimed.mu == pytest.approx(math.sqrt(2 * RHO))  # 17 Gaussians: μ² = Σ 1/σ² = 2ρ
    assert 0.0 < blow_up_inverse(claimed)(0.5) < 0.5  # the own-curve test takes sample_rate 1.0
    table.schema.check_rows(released.x, released.y, where="mst's release")
    assert len(released.y) == 200


@pytest.mark.slow
def test_the_private_selection_records_no_mechanism_and_is_seeded():
    # on the three binary columns of the worst-case pair: the same selection code as on fair, where JAX
    # compiles programs for each of the tree's 8 edges over 9 columns, here 2 (the test took 13.0 CPU-s
    # against 28.5 on fair, pytest's start included, /usr/bin/time python -m pytest on this test alone)
    table = load_pool("pair-3bin")
    keep = membership_matrix(table.y, n_runs=2, master_seed=0)[0]
    victim = mst.MST(rows=200, iterations=100)
    released = victim.release(table, keep, 3, inclusion_rate=0.5)
    assert "mechanism" not in released.extra
    assert released.extra["formal_epsilon"] == pytest.approx(1.0, rel=1e-12)
    table.schema.check_rows(released.x, released.y, where="mst's release")
    again = victim.release(table, keep, 3, inclusion_rate=0.5)
    assert np.array_equal(again.x, released.x) and np.array_equal(again.y, released.y)


def test_mst_refuses_a_bad_target_or_selection():
    with pytest.raises(ValueError, match="--epsilon must be a positive number, got 0"):
        mst.MST(epsilon=0.0)
    with pytest.raises(ValueError, match="--selection must be one of"):
        mst.MST(selection="greedy")


def test_ctgan_samples_are_clipped_into_the_public_bounds(table):
    schema = table.schema
    affairs = next(c for c in schema.features if c.name == "affairs")
    frame = schema.decode(table.x[:3], table.y[:3])
    frame["affairs"] = [-3.5, 1.25, affairs.upper + 10.0]
    clipped = ctgan.clip_to_schema(frame, schema)
    assert clipped["affairs"].tolist() == [affairs.lower, 1.25, affairs.upper]
    x, _ = schema.encode(clipped, where="test")
    assert x[:, [c.name for c in schema.features].index("affairs")].tolist() == [affairs.lower, 1.25, affairs.upper]
    assert clipped.drop(columns="affairs").equals(frame.drop(columns="affairs"))
    assert isinstance(clipped, pd.DataFrame)


def test_ctgan_missing_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctgan", None)
    with pytest.raises(ImportError, match=r'^--victim ctgan needs the ctgan package: pip install -e "\.\[ctgan\]"$'):
        ctgan._ctgan_class()


def test_ctgan_refuses_a_batch_that_pac_does_not_divide():
    with pytest.raises(ValueError, match="--batch-size must be a multiple of --pac 10, got 505"):
        ctgan.CTGANRelease(batch_size=505)
