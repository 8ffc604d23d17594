"""White-box canaries (victims.dp.whitebox_canaries): the probe's arithmetic, the one hook in every DP victim,
and the refusals (every DP victim's hook: tests/contracts/test_whitebox_hook.py)."""

import dataclasses

import numpy as np
import pytest
import torch

from victims import get_victim, load_pool
from victims.canaries import CanaryConfig, add_canaries
from victims.dp.privacy import gaussian_release
from victims.dp.whitebox_canaries import CanaryProbe, WhiteBoxSpec, directions, training_keep, with_white_box


def test_directions_are_distinct_signed_coordinates_from_the_seed_alone():
    spec = WhiteBoxSpec(first_row=10, n=50, kind="gradient", seed=3)
    coordinates, signs = directions(spec, 60)
    assert len(set(coordinates.tolist())) == 50 and coordinates.max() < 60
    assert set(signs.tolist()) <= {-1.0, 1.0}
    again = directions(spec, 60)
    assert (again[0] == coordinates).all() and (again[1] == signs).all()
    assert not (directions(dataclasses.replace(spec, seed=4), 60)[0] == coordinates).all()


def test_more_gradient_canaries_than_coordinates_is_refused():
    with pytest.raises(ValueError, match="--canaries 61: the victim's release has 60 coordinates"):
        directions(WhiteBoxSpec(first_row=0, n=61, kind="gradient", seed=0), 60)


def test_probe_adds_exactly_delta_for_sampled_in_canaries_and_observes_projections():
    # 3 canaries at rate 1: the IN ones (0 and 2) add Delta s_j at their coordinates; the observation
    # of a noiseless sum is then s_j R[k_j] / Delta: 1 for the IN canaries, 0 for the OUT one
    spec = WhiteBoxSpec(first_row=2, n=3, kind="gradient", seed=1)
    keep = np.array([True, False, True, False, True])  # rows 2, 3, 4 are the canaries: IN, OUT, IN
    probe = CanaryProbe(spec, keep, run_seed=5, sample_rate=1.0, sensitivity=2.0)
    sums = [torch.zeros(2, 3), torch.zeros(4)]
    released = gaussian_release(sums, std=0.0, generator=torch.Generator().manual_seed(0), probe=probe)
    flat = torch.cat([r.reshape(-1) for r in released])
    coordinates, signs = directions(spec, 10)
    assert flat[coordinates].tolist() == [2.0 * signs[0], 0.0, 2.0 * signs[2]]
    assert float(flat.abs().sum()) == 4.0
    assert probe.observations().tolist() == [[1.0, 0.0, 1.0]]


def test_before_clipping_the_canaries_are_dirac_rows_of_ten_deltas_and_not_added_again():
    # all 3 canaries IN at rate 1, Delta = 2: rows [3, 2, 3] and [3, 4] per parameter, canary j's
    # only non-zero entry 10 x 2 x s_j at its coordinate; contribute() then leaves the sums alone
    spec = WhiteBoxSpec(first_row=0, n=3, kind="gradient", seed=1)
    probe = CanaryProbe(spec, np.ones(3, dtype=bool), run_seed=0, sample_rate=1.0, sensitivity=2.0)
    rows = probe.per_example_rows([torch.Size([2, 3]), torch.Size([4])], device="cpu", dtype=torch.float32)
    flat = torch.cat([r.reshape(3, -1) for r in rows], dim=1)
    coordinates, signs = directions(spec, 10)
    assert flat.shape == (3, 10) and flat.norm(dim=1).tolist() == [20.0, 20.0, 20.0]
    assert [float(flat[j, coordinates[j]]) for j in range(3)] == [20.0 * float(x) for x in signs]
    sums = [torch.zeros(2, 3), torch.zeros(4)]
    assert all(torch.equal(a, b) for a, b in zip(probe.contribute(sums), sums))
    probe.observe(sums)
    assert probe.observations().tolist() == [[0.0, 0.0, 0.0]]


def test_probe_samples_each_in_canary_at_the_rate():
    spec = WhiteBoxSpec(first_row=0, n=400, kind="gradient", seed=0)
    probe = CanaryProbe(spec, np.ones(400, dtype=bool), run_seed=0, sample_rate=0.25, sensitivity=1.0)
    for _ in range(50):
        gaussian_release([torch.zeros(1000)], std=0.0, generator=torch.Generator(), probe=probe)
    rate = probe.observations().mean()
    assert abs(rate - 0.25) < 0.01  # 20,000 Bernoulli(1/4) draws: sd 0.003


def test_training_keep_drops_gradient_canary_rows_only():
    pool = load_pool("digits")
    spec = WhiteBoxSpec(first_row=1400, n=100, kind="gradient", seed=0)
    keep = np.ones(pool.n_pool, dtype=bool)
    assert training_keep(dataclasses.replace(pool, white_box=spec), keep).sum() == 1400
    assert training_keep(pool, keep) is keep
    record = dataclasses.replace(spec, kind="mislabeled")
    assert training_keep(dataclasses.replace(pool, white_box=record), keep) is keep


def test_the_refusals_name_what_cannot_be_audited(pool):
    dpsgd, real = get_victim("dpsgd")(), get_victim("real")()
    gradient = CanaryConfig(n=10, kind="gradient", seed=0)
    rows = add_canaries(pool, gradient)
    with pytest.raises(ValueError, match="--canary-kind gradient needs --threat-model white-box"):
        with_white_box(rows, dpsgd, gradient, threat_model="black-box", n_natural=pool.n_pool)
    with pytest.raises(ValueError, match="victim real has no Gaussian mechanism"):
        with_white_box(rows, real, gradient, threat_model="white-box", n_natural=pool.n_pool)
    with pytest.raises(ValueError, match="needs --canaries N"):
        with_white_box(pool, dpsgd, None, threat_model="white-box", n_natural=pool.n_pool)
    outlier = CanaryConfig(n=10, kind="outlier", seed=0)
    with pytest.raises(ValueError, match="victim psg observes gradient canaries only"):
        with_white_box(
            add_canaries(pool, outlier), get_victim("psg")(), outlier, threat_model="white-box", n_natural=pool.n_pool
        )
    assert with_white_box(rows, dpsgd, gradient, threat_model="white-box", n_natural=pool.n_pool).white_box.n == 10
