"""The one white-box hook, in every DP victim's Gaussian mechanism (victims.dp.whitebox_canaries): with zero
canaries it changes nothing, and with gradient canaries every DP victim observes them."""

import dataclasses

import numpy as np
import pytest

from test_victims import FAST
from victims import get_victim
from victims.canaries import CanaryConfig, add_canaries
from victims.dp.whitebox_canaries import WhiteBoxSpec, with_white_box

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


def test_packed_psg_keeps_the_hook_contract(pool):
    # packed PSG: zero canaries leave both runs' releases bit for bit; with 20 gradient canaries,
    # each packed run observes what it observes alone (its own Poisson draws of the canaries, the
    # same noise), within the float tolerance of packed releases (1e-5: tests/contracts/test_victims.py)
    victim = get_victim("psg")(**FAST["psg"])
    keeps = np.stack([np.arange(pool.n_pool) % 2 == 0, np.arange(pool.n_pool) % 3 == 0])
    plain = victim.run_packed(pool, keeps, [7, 8])
    probed_pool = dataclasses.replace(pool, white_box=WhiteBoxSpec(first_row=pool.n_pool, n=0, kind="gradient", seed=0))
    probed = victim.run_packed(probed_pool, keeps, [7, 8])
    for a, b in zip(plain, probed):
        assert np.array_equal(a.release_x, b.release_x) and np.array_equal(a.logits, b.logits)
        assert b.whitebox.shape == (victim.noisy_steps, 0)
    config = CanaryConfig(n=20, kind="gradient", seed=0)
    white = with_white_box(add_canaries(pool, config), victim, config, threat_model="white-box", n_natural=pool.n_pool)
    keeps = np.stack([np.resize(row, white.n_pool) for row in keeps])
    keeps[:, pool.n_pool :] = [[True, False] * 10, [False, True] * 10]
    for together, keep, seed in zip(victim.run_packed(white, keeps, [3, 4]), keeps, [3, 4]):
        alone = victim.run(white, keep, seed)
        assert together.whitebox.shape == alone.whitebox.shape == (victim.noisy_steps, 20)
        np.testing.assert_allclose(together.whitebox, alone.whitebox, rtol=0, atol=1e-4)
        np.testing.assert_allclose(together.release_x, alone.release_x, rtol=0, atol=1e-5)
        assert together.whitebox_mechanism == alone.whitebox_mechanism
