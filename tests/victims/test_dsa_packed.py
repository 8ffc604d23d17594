"""DSA/DC's packed condensation (`DSAVictim.condense_packed`): K runs condensed as one computation
give each run what it condenses alone, within float tolerance, and leave each run's generator and
global-RNG stream where it leaves them alone."""

import numpy as np
import pytest
import torch

from shadow_runs.plan import membership_matrix
from victims import get_victim
from victims.base import seeded_runs
from victims.condensation.condense import CondensationVictim, Members
from victims.nets import NetConfig

SHORT = {"ipc": 2, "iterations": 2, "outer": 2, "inner": 1, "batch_real": 8, "net": NetConfig(width=8)}
#: the largest difference to the runs alone measured here: 1.7e-6 (float sums in another order)
TOLERANCE = 1e-5


def condensed(victim, pool, keeps, *, packed: bool, labels=None):
    """(the K condensed sets, each run's next draws from its generator and global-RNG stream after)."""
    members = [Members.of(pool, keep, device="cpu") for keep in keeps]
    if labels is None:
        labels = torch.arange(pool.n_classes).repeat_interleave(victim.ipc)
    with seeded_runs([3 + k for k in range(len(keeps))]) as runs:
        images = torch.stack([torch.randn((len(labels), *pool.image_shape), generator=g) for g in runs.generators])
        condense = victim.condense_packed if packed else CondensationVictim.condense_packed.__get__(victim)
        out = condense(images, labels, members, pool=pool, runs=runs)
        after = [torch.rand(4, generator=g) for g in runs.generators]
        for k in range(len(keeps)):
            with runs.global_rng(k):
                after.append(torch.rand(4))
    return out, after


def assert_as_alone(victim, pool, keeps, **kwargs):
    packed, packed_after = condensed(victim, pool, keeps, packed=True, **kwargs)
    alone, alone_after = condensed(victim, pool, keeps, packed=False, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(packed_after, alone_after))  # the same draws, in number
    assert not torch.equal(alone[0], alone[1])
    difference = (packed - alone).abs().max().item()
    print(f"largest difference {difference:.2e}")
    assert difference <= TOLERANCE, difference


@pytest.fixture(scope="module")
def keeps(pool):
    return membership_matrix(pool.y, n_runs=3, master_seed=0)


@pytest.mark.parametrize("name", ["dsa", "dc"])
def test_packed_condensation_equals_each_run_alone(pool, keeps, name):
    assert_as_alone(get_victim(name)(**SHORT), pool, keeps)


def test_short_classes_are_padded_and_weighted(pool, keeps):
    # 72 real images per class: some runs have fewer members of a class than that, in numbers that differ
    victim = get_victim("dsa")(**{**SHORT, "batch_real": 72, "iterations": 1})
    batches = np.minimum([np.bincount(pool.y[keep], minlength=pool.n_classes) for keep in keeps], 72)
    assert np.any(np.ptp(batches, axis=0) > 0) and np.any(np.ptp(batches, axis=0) == 0)  # padded, and not
    assert_as_alone(victim, pool, keeps)


def test_synthetic_images_in_any_class_order(pool, keeps):
    victim = get_victim("dsa")(**{**SHORT, "iterations": 1})
    assert_as_alone(victim, pool, keeps, labels=torch.arange(pool.n_classes).repeat(2))


def test_unequal_classes_are_condensed_in_turn_as_alone(pool, keeps):
    victim = get_victim("dc")(**{**SHORT, "iterations": 1})
    labels = torch.cat([torch.arange(pool.n_classes), torch.tensor([0])])  # class 0 has two images
    packed, _ = condensed(victim, pool, keeps, packed=True, labels=labels)
    alone, _ = condensed(victim, pool, keeps, packed=False, labels=labels)
    assert torch.equal(packed, alone)
