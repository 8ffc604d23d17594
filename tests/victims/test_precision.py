"""--precision on the CPU: bf16 autocast reaches the training forward passes, while the DP mechanism
(per-example gradients, their norms and clipping, the noise) stays float32 bit for bit."""

import numpy as np
import pytest
import torch

from audit.executor import RunTask, run_victims
from shadow_runs.plan import membership_matrix, run_seed
from victims.dp.privacy import (
    clip_per_example,
    clipped_gradient_sum,
    gaussian_release,
    gaussian_release_packed,
    grouped_clipped_gradient_sums,
    per_example_gradients,
)
from victims.nets import NetConfig, build_net
from victims.packed import GroupedNets
from victims.pipelines.psg import PSGVictim
from victims.precision import exact_float32, precision, training_autocast
from victims.train import TrainConfig


def _net(pool, seed=0):
    torch.manual_seed(seed)
    net = build_net(NetConfig(width=8), image_shape=pool.image_shape, n_classes=pool.n_classes)
    return net, {name: p for name, p in net.named_parameters() if p.ndim > 1}


def test_bf16_reaches_the_training_forward_pass_and_not_the_dp_parts(pool):
    net, _ = _net(pool)
    x = torch.randn(4, *pool.image_shape)
    with precision("bf16"):
        with training_autocast("cpu"):
            assert net(x).dtype == torch.bfloat16
            with exact_float32():
                assert net(x).dtype == torch.float32
    with precision("fp32"), training_autocast("cpu"):
        assert net(x).dtype == torch.float32
    with pytest.raises(ValueError, match="--precision must be one of"):
        with precision("fp16"):
            pass


def test_clipping_and_noise_are_the_same_float32_numbers_at_bf16(pool):
    net, matched = _net(pool)
    x, y = torch.randn(24, *pool.image_shape) * 5, torch.randint(0, pool.n_classes, (24,))
    limit = 0.05  # far below these examples' gradient norms: every example is clipped
    fp32 = clipped_gradient_sum(net, matched, x, y, max_norm=limit)
    with precision("bf16"), training_autocast("cpu"):  # as PSG calls it: inside a bf16 training step
        bf16 = clipped_gradient_sum(net, matched, x, y, max_norm=limit)
        one = [clipped_gradient_sum(net, matched, x[i : i + 1], y[i : i + 1], max_norm=limit) for i in range(24)]
        noisy = gaussian_release(fp32, std=1.7 * limit, generator=torch.Generator().manual_seed(3))
    assert all(a.dtype == torch.float32 and torch.equal(a, b) for a, b in zip(fp32, bf16))
    # a batch of one is that example's clipped gradient: its norm never exceeds C
    norms = torch.tensor([torch.sqrt(sum(g.pow(2).sum() for g in grads)) for grads in one])
    assert (norms <= limit * (1 + 1e-6)).all() and norms.min() > 0.99 * limit
    unclipped = per_example_gradients(net, matched, x, y)
    reference = clip_per_example(unclipped, limit)
    for name, g in zip(matched, bf16):
        torch.testing.assert_close(g, reference[name].sum(0))
    # sigma unchanged: the noise is the fp32 draw of the same generator, bit for bit
    alone = gaussian_release(fp32, std=1.7 * limit, generator=torch.Generator().manual_seed(3))
    assert all(a.dtype == torch.float32 and torch.equal(a, b) for a, b in zip(noisy, alone))


def test_packed_clipping_and_noise_are_float32_at_bf16(pool):
    nets = [_net(pool, seed)[0] for seed in (1, 2)]
    grouped = GroupedNets(nets)
    x, y = torch.randn(2, 10, *pool.image_shape), torch.randint(0, pool.n_classes, (2, 10))
    weights = torch.ones(2, 10)
    fp32 = grouped_clipped_gradient_sums(grouped, x, y, weights, max_norm=0.1)
    with precision("bf16"), training_autocast("cpu"):
        bf16 = grouped_clipped_gradient_sums(grouped, x, y, weights, max_norm=0.1)
        noisy = gaussian_release_packed(bf16, std=0.2, generators=[torch.Generator().manual_seed(s) for s in (1, 2)])
    assert all(a.dtype == torch.float32 and torch.equal(a, b) for a, b in zip(fp32, bf16))
    again = gaussian_release_packed(fp32, std=0.2, generators=[torch.Generator().manual_seed(s) for s in (1, 2)])
    assert all(torch.equal(a, b) for a, b in zip(noisy, again))


def test_a_psg_pack_trains_at_bf16_and_records_it(pool):
    # 4 packed runs at bf16 and at fp32: the same formal epsilon (the mechanism is the same) and release
    # shape; bf16's mean test accuracy within 0.05 of fp32's (measured 0.210 against 0.217, seeds 0-3,
    # no noise: epsilon 1e9); the metadata says bf16, and only there
    victim = PSGVictim(
        epsilon=1e9,
        restarts=1,
        outer=2,
        batches=2,
        inner=1,
        batch_size=64,
        spc=10,
        net=NetConfig(width=8),
        train=TrainConfig(steps=30, net=NetConfig(width=8)),
    )
    keep = membership_matrix(pool.y, n_runs=4, master_seed=0)
    tasks = [RunTask(run=r, seed=run_seed(master_seed=0, run=r), keep=keep[r]) for r in range(4)]
    low = run_victims(victim, pool, tasks, device="cpu", precision="bf16")
    full = run_victims(victim, pool, tasks, device="cpu")
    for (a, meta_a), (b, meta_b) in zip(low, full):
        assert meta_a["precision"] == "bf16" and "precision" not in meta_b
        assert a.formal_epsilon == b.formal_epsilon and a.release_x.shape == b.release_x.shape
        assert a.logits.dtype == np.float32 and np.isfinite(a.logits).all()
    accuracy = [np.mean([obs.test_accuracy for obs, _ in runs]) for runs in (low, full)]
    assert abs(accuracy[0] - accuracy[1]) < 0.05
