"""`dpkernel`: the mechanism's noise, its accounting, that it learns, and its refusals."""

import math

import numpy as np
import pytest
import torch

from audit import lira
from victims import get_victim
from victims.pipelines.dpkernel import (
    SENSITIVITY,
    DPKernelVictim,
    RandomFourierFeatures,
    class_embedding_sum,
    noisy_embedding_sum,
    noisy_mean_embedding,
)
from victims.train import TrainConfig

#: tiny reconstruction settings: the GAN-Leaks losses are not under test here
NO_RECON = {"fbb_samples": 5, "pbb_examples": 0, "pbb_starts": 1, "wb_steps": 1}


def test_random_fourier_features_have_unit_norm_so_one_record_moves_the_sum_by_one():
    g = torch.Generator().manual_seed(0)
    rff = RandomFourierFeatures(64, 50, 2.0, generator=g)
    x = torch.rand(30, 1, 8, 8, generator=g) * torch.tensor([1.0, 100.0]).repeat(15).view(30, 1, 1, 1)
    phi = rff(x)
    assert phi.shape == (30, 100)
    assert torch.allclose(phi.norm(dim=1), torch.ones(30), atol=1e-5)
    # add/remove one record: the class-block sum changes by phi(x) e_y^T, of Frobenius norm exactly 1
    labels = torch.arange(30) % 10
    with_all = class_embedding_sum(phi, labels, n_classes=10)
    without_last = class_embedding_sum(phi[:-1], labels[:-1], n_classes=10)
    assert math.isclose(float((with_all - without_last).norm()), SENSITIVITY, rel_tol=1e-5)
    # ...and phi^T phi approximates the Gaussian kernel exp(-|x - x'|^2 / (2 h^2))
    big = RandomFourierFeatures(64, 20000, 2.0, generator=g)
    a, b = torch.rand(2, 64, generator=g) * 0.5
    exact = math.exp(-float((a - b).pow(2).sum()) / (2 * 2.0**2))
    assert abs(float(big(a[None]) @ big(b[None]).T) - exact) < 0.03


def test_the_released_sum_carries_gaussian_noise_of_std_sigma_times_sensitivity():
    g = torch.Generator().manual_seed(1)
    features = torch.nn.functional.normalize(torch.randn(40, 8, generator=g), dim=1)
    labels = torch.arange(40) % 5
    exact = class_embedding_sum(features, labels, n_classes=5)
    sigma, draws = 2.5, 4000
    noise = torch.stack(
        [
            noisy_embedding_sum(features, labels, n_classes=5, noise_multiplier=sigma, generator=g) - exact
            for _ in range(draws)
        ]
    ).double()  # [draws, 5 classes, 8]
    n = noise.numel()  # 160,000 noise values
    # pooled: std within 3 standard errors (SE of a sample std ~ std / sqrt(2n), 0.18% here), mean ~ 0
    assert abs(float(noise.std()) / (sigma * SENSITIVITY) - 1) < 3 / math.sqrt(2 * n)
    assert abs(float(noise.mean())) < 3 * sigma / math.sqrt(n)
    # per coordinate (classes without a record included): each of the 40 stds within 4.5 SE (1.6%)
    per_coordinate = noise.flatten(1).std(dim=0) / sigma
    assert float((per_coordinate - 1).abs().max()) < 4.5 / math.sqrt(2 * draws)
    # coordinates are independent: correlations ~ N(0, 1/draws)
    corr = torch.corrcoef(noise.flatten(1).T)
    assert float((corr - torch.eye(40, dtype=corr.dtype)).abs().max()) < 5 / math.sqrt(draws)
    # the release divides the noisy sum by the expected batch size B; sigma = 0 adds nothing
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    released = noisy_mean_embedding(
        features, labels, n_classes=5, noise_multiplier=sigma, expected_batch_size=32, generator=g1
    )
    assert torch.allclose(
        released * 32, noisy_embedding_sum(features, labels, n_classes=5, noise_multiplier=sigma, generator=g2)
    )
    assert torch.equal(noisy_embedding_sum(features, labels, n_classes=5, noise_multiplier=0.0, generator=g1), exact)
    # an empty batch releases pure noise
    empty = noisy_embedding_sum(features[:0], labels[:0], n_classes=5, noise_multiplier=sigma, generator=g1)
    assert empty.shape == (5, 8) and float(empty.abs().sum()) > 0


def _independent_epsilon(sigma, rate, steps, delta):
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    for _ in range(steps):
        accountant.step(noise_multiplier=sigma, sample_rate=rate)
    return accountant.get_epsilon(delta=delta)


@pytest.mark.parametrize("epsilon,steps", [(1.0, 400), (10.0, 30)])
def test_sigma_and_recorded_epsilon_agree_with_opacus_rdp_accountant(pool, epsilon, steps):
    victim = DPKernelVictim(epsilon=epsilon, steps=steps)
    sigma, rate = victim.calibration(pool)
    assert rate == 150 / 750  # B / (q n_pool)
    independent = _independent_epsilon(sigma, rate, steps, 1e-5)
    recorded = victim.privacy_spent(pool)
    assert recorded["delta"] == 1e-5
    assert math.isclose(recorded["formal_epsilon"], independent, rel_tol=0.01)
    # sigma spends the target: opacus's search stops within 0.01 below it
    assert epsilon - 0.01 <= independent <= epsilon * 1.0001


def test_a_run_records_the_accountants_epsilon_for_its_steps(pool, keep):
    victim = DPKernelVictim(
        epsilon=1.0, steps=5, batch_size=16, features=16, ipc=1, train=TrainConfig(steps=5), **NO_RECON
    )
    obs = victim.run(pool, keep, 0)
    sigma, rate = victim.calibration(pool)
    assert obs.delta == 1e-5 and obs.formal_epsilon <= 1.0
    assert math.isclose(obs.formal_epsilon, _independent_epsilon(sigma, rate, 5, 1e-5), rel_tol=0.01)
    # the non-private version: sigma = 0, nothing recorded
    quiet = DPKernelVictim(
        noise=False, steps=5, batch_size=16, features=16, ipc=1, train=TrainConfig(steps=5), **NO_RECON
    )
    assert quiet.calibration(pool) == (0.0, 16 / 750)
    obs = quiet.run(pool, keep, 0)
    assert obs.formal_epsilon is None and obs.delta is None


def test_the_noiseless_version_learns(pool, keep):
    # 50 releases (150 before: 0.896, 0.889, 0.882 at seeds 0-2): test accuracy over run seeds 0-4
    # mean 0.762, sd 0.059, min 0.690 (seed 0: 0.714), so 0.5 sits 4 sd below the mean; chance is 0.1
    # (2026-11-29; `DPKernelVictim(noise=False, steps=50, **NO_RECON).run(pool, keep, seed)`, one thread).
    obs = DPKernelVictim(noise=False, steps=50, **NO_RECON).run(pool, keep, 0)
    assert obs.test_accuracy > 0.5, obs.test_accuracy
    assert obs.release_x.shape == (100, 1, 8, 8) and np.array_equal(np.bincount(obs.release_y), np.full(10, 10))
    assert obs.release_x.min() >= 0 and obs.release_x.max() <= 1
    assert set(obs.recon_loss) == {"fbb", "pbb", "wb"} and np.isnan(obs.recon_loss["pbb"]).all()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"epsilon": 0.0}, "--epsilon must be a positive number, got 0.0"),
        ({"delta": 1.0}, r"--delta must be in \(0, 1\), got 1.0"),
        ({"features": 0}, "--features must be >= 1, got 0"),
        ({"bandwidth": 0.0}, "--bandwidth must be > 0, got 0.0"),
        ({"bandwidth": float("nan")}, "--bandwidth must be > 0, got nan"),
        ({"lr": -1.0}, "--lr must be > 0, got -1.0"),
        ({"steps": 0}, "--steps must be >= 1, got 0"),
        ({"batch_size": 0}, "--batch-size must be >= 1, got 0"),
        ({"fake_per_class": 0}, "--fake-per-class must be >= 1, got 0"),
        ({"accountant": "gdp"}, "--accountant must be one of"),
    ],
)
def test_bad_values_raise_naming_the_flag(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_victim("dpkernel")(**kwargs)


@pytest.mark.parametrize(
    "image_shape,bandwidth,expected",
    [
        # h = 2 sqrt(d / 64): digits d = 64 -> 2; 28x28 d = 784 -> 2 sqrt(12.25) = 7;
        # CIFAR-10 d = 3 * 32 * 32 = 3072 -> 2 sqrt(48) = 8 sqrt(3)
        ((1, 8, 8), None, 2.0),
        ((1, 28, 28), None, 7.0),
        ((3, 32, 32), None, 8 * math.sqrt(3)),
        ((1, 28, 28), 3.0, 3.0),  # --bandwidth wins
    ],
)
def test_the_default_bandwidth_grows_with_the_square_root_of_the_image_size(image_shape, bandwidth, expected):
    pool = type("ShapeOnly", (), {"image_shape": image_shape})()
    assert math.isclose(DPKernelVictim(bandwidth=bandwidth).kernel_bandwidth(pool), expected, rel_tol=1e-12)


def test_a_batch_above_the_expected_members_is_refused(pool):
    with pytest.raises(ValueError, match="--batch-size 751 exceeds the 750 members a run has on average"):
        DPKernelVictim(batch_size=751).check(pool)
    DPKernelVictim(batch_size=750).check(pool)


def test_the_cli_exits_2_with_one_line_on_a_bad_value(tmp_path, capsys):
    for flags, named in [
        (["--batch-size", "100000"], "--batch-size 100000 exceeds"),
        (["--bandwidth", "-1"], "--bandwidth must be > 0, got -1.0"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            lira.main(["--runs-dir", str(tmp_path / "runs"), "--victim", "dpkernel", "--n-shadow", "4", *flags])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()
