"""The one white-box hook, in every DP victim's Gaussian mechanism (victims.whitebox_canaries): with zero
canaries it changes nothing, and with gradient canaries every DP victim observes them."""

import dataclasses

import numpy as np
import pytest

from test_victims import FAST
from victims import get_victim
from victims.canaries import CanaryConfig, add_canaries
from victims.whitebox_canaries import WhiteBoxSpec, with_white_box

DP_VICTIMS = ("dpsgd", "psg", "dpcgan", "dpkernel", "datalens")


@pytest.mark.parametrize("name", DP_VICTIMS)
def test_the_hook_with_zero_canaries_leaves_each_release_unchanged_bit_for_bit(name, pool, keep):
    # the same run through the probe (zero gradient canaries: contribute and observe on every noisy
    # sum) and without one: every observation identical, and one observation row per noisy step
    victim = get_victim(name)(**FAST[name])
    plain = victim.run(pool, keep, 7)
    probed_pool = dataclasses.replace(pool, white_box=WhiteBoxSpec(first_row=pool.n_pool, n=0, kind="gradient", seed=0))
    probed = victim.run(probed_pool, keep, 7)
    assert np.array_equal(plain.logits, probed.logits)
    for field in ("release_x", "release_y"):
        a, b = getattr(plain, field), getattr(probed, field)
        assert (a is None and b is None) or np.array_equal(a, b)
    for kind in plain.recon_loss or {}:
        assert np.array_equal(plain.recon_loss[kind], probed.recon_loss[kind], equal_nan=True)
    assert plain.whitebox is None and probed.whitebox.shape[1] == 0 and probed.whitebox.shape[0] >= 1
    assert probed.whitebox_mechanism["sample_rate"] > 0


@pytest.mark.parametrize("name", DP_VICTIMS)
def test_every_dp_victim_observes_its_gradient_canaries(name, pool):
    # 20 gradient canaries, all IN: every victim stores [steps, 20] observations and its public sigma
    victim = get_victim(name)(**FAST[name])
    config = CanaryConfig(n=20, kind="gradient", seed=0)
    with_rows = add_canaries(pool, config)
    white = with_white_box(with_rows, victim, config, threat_model="white-box", n_natural=pool.n_pool)
    keep = np.ones(white.n_pool, dtype=bool)
    keep[: pool.n_pool : 2] = False
    obs = victim.run(white, keep, 3)
    assert obs.whitebox.shape[1] == 20 and obs.whitebox.shape[0] >= 1 and np.isfinite(obs.whitebox).all()
    assert obs.whitebox_mechanism["noise_multiplier"] > 0
