"""The contract every tabular victim keeps (test_victims.py's, for releases of a table): a new
tabular victim adds a FAST entry."""

import dataclasses

import numpy as np
import pytest
import torch

from shadow_runs.plan import membership_matrix
from victims import get_victim, victim_names
from victims.base import check_pool_kind

FAST = {  # a quick configuration of each tabular victim
    "tabular-subset": {"rows": 300, "classifier_iterations": 10},
    "tabular-real": {"classifier_iterations": 10},
    "ctgan": {"rows": 300, "classifier_iterations": 10, "epochs": 2},
    "mst": {"rows": 300, "classifier_iterations": 10, "iterations": 100, "selection": "public"},
    "marginals": {"rows": 300, "classifier_iterations": 10},
}


@pytest.fixture(scope="module")
def keep(table):
    return membership_matrix(table.y, n_runs=2, master_seed=0)[0]


@pytest.fixture(scope="module", params=sorted(FAST))
def victim(request):
    return get_victim(request.param)(**FAST[request.param])


@pytest.fixture(scope="module")
def observed(victim, table, keep):
    return victim.run(table, keep, 7)


def test_every_tabular_victim_is_covered_by_the_contract():
    """`command` (`tabular` None: either kind) has a test of its own, tests/victims/test_command_victim.py."""
    assert {name for name in victim_names() if getattr(get_victim(name), "tabular", False) is True} == set(FAST)


def test_observations_have_the_documented_shapes(victim, table, keep, observed):
    assert observed.logits.shape == (table.n_pool, 1, table.n_classes)
    assert observed.logits.dtype == np.float32 and np.isfinite(observed.logits).all()
    np.testing.assert_allclose(np.exp(observed.logits).sum(-1), 1.0, atol=1e-5)  # log-probabilities
    assert 0.0 <= observed.test_accuracy <= 1.0
    assert set(observed.utility) == {"test_auroc", "marginal_tv_1way", "marginal_tv_2way"}
    assert all(0.0 <= v <= 1.0 for v in observed.utility.values())
    assert observed.init_idx.dtype == np.int64 and keep[observed.init_idx].all()
    assert observed.release_x.shape[1] == table.x.shape[1] and len(observed.release_y) == len(observed.release_x)
    table.schema.check_rows(observed.release_x, observed.release_y, where="the release")  # inside the schema


def test_same_seed_same_observations(victim, table, keep, observed):
    again = victim.run(table, keep, 7)
    assert np.array_equal(again.logits, observed.logits) and again.test_accuracy == observed.test_accuracy
    assert np.array_equal(again.release_x, observed.release_x) and np.array_equal(again.release_y, observed.release_y)
    assert again.formal_epsilon == observed.formal_epsilon


def test_another_seed_another_release(victim, table, keep, observed):
    other = victim.run(table, keep, 8)
    if victim.name == "tabular-real":  # every member, whatever the seed; the classifier's seed differs
        assert np.array_equal(other.release_x, observed.release_x)
    else:
        assert not np.array_equal(other.release_x, observed.release_x)


def test_members_are_the_only_real_data_it_touches(victim, table, keep, observed):
    """Every non-member replaced by another record of the schema: the release and the downstream model's
    view of the members stay exactly the same."""
    shuffled = table.x[np.random.default_rng(0).permutation(table.n_pool)]
    altered = dataclasses.replace(table, x=np.where(keep[:, None], table.x, shuffled))
    other = victim.run(altered, keep, 7)
    assert np.array_equal(other.release_x, observed.release_x)
    assert np.array_equal(other.logits[keep], observed.logits[keep])
    assert other.test_accuracy == observed.test_accuracy


def test_a_run_leaves_the_global_rng_alone(victim, table, keep):
    torch.manual_seed(123)
    expected, state = torch.rand(3), np.random.get_state()
    torch.manual_seed(123)
    np.random.set_state(state)
    victim.run(table, keep, 7)
    assert torch.equal(torch.rand(3), expected)


def test_a_tabular_victim_refuses_images_and_an_image_victim_a_table(table, pool):
    with pytest.raises(ValueError, match="--victim tabular-subset releases a table, and --dataset digits holds images"):
        check_pool_kind(get_victim("tabular-subset")(), pool)
    with pytest.raises(ValueError, match="--victim real releases images, and --dataset fair is a table"):
        check_pool_kind(get_victim("real")(), table)


def test_the_subset_releases_rows_members_and_the_real_release_every_member(table, keep):
    subset = get_victim("tabular-subset")(rows=300, classifier_iterations=5).run(table, keep, 1)
    assert len(subset.init_idx) == 300 and len(set(subset.init_idx.tolist())) == 300
    assert np.array_equal(subset.release_x, table.x[subset.init_idx])
    real = get_victim("tabular-real")(classifier_iterations=5).run(table, keep, 1)
    assert np.array_equal(real.init_idx, np.flatnonzero(keep))
