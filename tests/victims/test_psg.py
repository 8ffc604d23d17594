"""PSG: the layer-wise distance, the Gaussian mechanism on real gradients, its accounting, presets."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from opacus.accountants import RDPAccountant

from victims import get_victim
from victims.condensation.matching import gradient_distance, layer_distance
from victims.nets import ConditionalGenerator, NetConfig, build_net
from victims.dp.privacy import (
    _layer_factors,
    _patches,
    conv_geometry,
    clip_per_example,
    clipped_gradient_sum,
    gaussian_release,
    gaussian_release_packed,
    grouped_clipped_gradient_sums,
    per_example_gradients,
    poisson_sample,
)
from victims.packed import GroupedNets
from victims.pipelines.psg import PSGVictim, noisy_mean_gradient, paper_values
from victims.train import TrainConfig

TINY = dict(
    restarts=2,
    outer=2,
    batches=2,
    inner=1,
    batch_size=64,
    spc=2,
    net=NetConfig(width=8),
    train=TrainConfig(steps=10, net=NetConfig(width=8)),
)


@pytest.fixture(scope="module")
def batch(pool):
    x = torch.tensor((pool.x[:40] - pool.mean[0]) / pool.std[0])
    return x, torch.tensor(pool.y[:40])


def _net(pool, width=8):
    torch.manual_seed(0)
    net = build_net(NetConfig(width=width), image_shape=pool.image_shape, n_classes=pool.n_classes)
    return net, {name: p for name, p in net.named_parameters() if p.ndim > 1}


# -- the distance (PSG supplement B) -----------------------------------------------------------
def test_layer_distance_by_hand():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]])
    b = torch.tensor([[2.0, 0.0], [1.0, 0.0], [-3.0, -4.0]])
    # rows: cos 1 -> 0; cos 0 -> 1; cos -1 -> 2; sum 3 (up to the 1e-6 floor on the norms)
    assert layer_distance(a, b).item() == pytest.approx(3.0, abs=1e-5)


def test_conv_gradients_are_compared_per_output_channel():
    # [out=2, in=1, 1, 2]: channel 0 identical (0), channel 1 orthogonal (1)
    a = torch.tensor([[[[1.0, 1.0]]], [[[1.0, 0.0]]]])
    b = torch.tensor([[[[2.0, 2.0]]], [[[0.0, 5.0]]]])
    assert layer_distance(a, b).item() == pytest.approx(1.0, abs=1e-5)


def test_one_dimensional_parameters_are_left_out():
    weight_a, weight_b = torch.eye(2), torch.eye(2)
    bias_a, bias_b = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0])  # opposite, yet ignored
    assert gradient_distance([weight_a, bias_a], [weight_b, bias_b]).item() == pytest.approx(0.0, abs=1e-5)


def test_distance_refuses_mismatched_gradients():
    with pytest.raises(ValueError, match="shapes differ"):
        layer_distance(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="1 gradients against 2"):
        gradient_distance([torch.zeros(2, 2)], [torch.zeros(2, 2), torch.zeros(2, 2)])


# -- the Gaussian mechanism on real gradients --------------------------------------------------
def test_per_example_gradients_match_a_loop(pool, batch):
    net, matched = _net(pool)
    x, y = batch[0][:5], batch[1][:5]
    vectorised = per_example_gradients(net, matched, x, y)
    for i in range(5):
        expected = torch.autograd.grad(F.cross_entropy(net(x[i : i + 1]), y[i : i + 1]), list(matched.values()))
        for name, g in zip(matched, expected):
            torch.testing.assert_close(vectorised[name][i], g, rtol=1e-4, atol=1e-6)


#: nets whose clipped sums are checked: width 32 takes every branch of the norms (formed gradients,
#: ghost norms, the T = 1 product), depth 3 a third convolution, the MLP linear layers only
CLIPPED_NETS = pytest.mark.parametrize(
    "config",
    [NetConfig(width=32), NetConfig(width=8, depth=3), NetConfig(arch="mlp", width=16)],
    ids=["conv-w32", "conv-w8-d3", "mlp"],
)


def _relative_error(a, b):
    return float((a - b).norm() / b.norm())


@CLIPPED_NETS
def test_clipped_gradient_sum_equals_the_torch_func_path(pool, config):
    # A random batch; width 32 takes every branch of the norms: formed gradients (first conv),
    # ghost norms (second conv: T (p + o) = 16 x 320 < p o = 288 x 32), the T = 1 product (linear).
    torch.manual_seed(1)
    net = build_net(config, image_shape=pool.image_shape, n_classes=pool.n_classes)
    matched = {name: p for name, p in net.named_parameters() if p.ndim > 1}
    x, y = torch.randn(48, *pool.image_shape), torch.randint(0, pool.n_classes, (48,))
    reference = per_example_gradients(net, matched, x, y)
    factors = _layer_factors(net, matched, x, y)
    for name, p in matched.items():  # the per-example gradients the factors stand for
        assert _relative_error(factors[name].per_example().reshape(48, *p.shape), reference[name]) < 1e-5
        norms = reference[name].flatten(1).pow(2).sum(1)
        torch.testing.assert_close(factors[name].squared_norms(), norms, rtol=1e-5, atol=1e-12)
    squares = sum(g.flatten(1).pow(2).sum(1) for g in reference.values())
    limit = float(squares.sqrt().median())  # half the examples clipped
    clipped = clip_per_example(reference, limit)
    for name, g in zip(matched, clipped_gradient_sum(net, matched, x, y, max_norm=limit)):
        assert _relative_error(g, clipped[name].sum(0)) < 1e-5


def test_clipped_gradient_sum_falls_back_to_torch_func_for_other_parameters(pool, batch):
    net, _ = _net(pool)
    params = {"features.0.weight": net.features[0].weight, "features.1.weight": net.features[1].weight}  # a norm scale
    assert _layer_factors(net, params, *batch) is None
    clipped = clip_per_example(per_example_gradients(net, params, *batch), 0.05)
    for name, g in zip(params, clipped_gradient_sum(net, params, *batch, max_norm=0.05)):
        torch.testing.assert_close(g, clipped[name].sum(0))


@CLIPPED_NETS
def test_grouped_clipped_sums_are_each_runs_own_sum_over_its_batch(pool, config):
    # 3 runs, 12 candidate slots each, run k's batch the slots of weight 1 (5, 12 and 0 of them):
    # each run's sum is `clipped_gradient_sum` over its batch alone (float order aside), and an
    # empty batch gives exact zeros
    torch.manual_seed(2)
    nets = [build_net(config, image_shape=pool.image_shape, n_classes=pool.n_classes) for _ in range(3)]
    x, y = torch.randn(3, 12, *pool.image_shape), torch.randint(0, pool.n_classes, (3, 12))
    weights = torch.zeros(3, 12)
    weights[0, [1, 3, 4, 8, 11]] = 1
    weights[1] = 1
    grouped = GroupedNets(nets)
    limit = 0.5
    sums = grouped_clipped_gradient_sums(grouped, x, y, weights, max_norm=limit)
    assert [tuple(s.shape) for s in sums] == [(3, *grouped.run_shape(w)) for w in grouped.matched_weights()]
    for k, net in enumerate(nets):
        matched = {name: p for name, p in net.named_parameters() if p.ndim > 1}
        batch = weights[k].bool()
        if not batch.any():
            assert all(torch.equal(s[k], torch.zeros_like(s[k])) for s in sums)
            continue
        for s, alone in zip(sums, clipped_gradient_sum(net, matched, x[k][batch], y[k][batch], max_norm=limit)):
            assert _relative_error(s[k], alone) < 1e-5
    # a weight-0 slot adds exactly nothing: another image there leaves every sum bit for bit
    x[0, 0] = 100 * torch.randn(*pool.image_shape)
    for s, again in zip(sums, grouped_clipped_gradient_sums(grouped, x, y, weights, max_norm=limit)):
        assert torch.equal(s, again)


def test_packed_noise_is_each_runs_own_draw():
    # each run's noise is what `gaussian_release` draws from its generator alone, bit for bit
    sums = [torch.randn(3, 4, 2, 3, 3), torch.randn(3, 10, 36)]
    generators = [torch.Generator().manual_seed(seed) for seed in (5, 6, 7)]
    packed = gaussian_release_packed(sums, std=0.7, generators=generators)
    for k, seed in enumerate((5, 6, 7)):
        alone = gaussian_release([s[k] for s in sums], std=0.7, generator=torch.Generator().manual_seed(seed))
        assert all(torch.equal(p[k], a) for p, a in zip(packed, alone))


@pytest.mark.parametrize(
    "kernel,dilation,padding,stride", [(3, 1, 1, 1), (3, 2, 2, 1), ((3, 2), (1, 2), (0, 1), (2, 1)), (4, 1, 1, 2)]
)
def test_patches_are_unfold(kernel, dilation, padding, stride):
    conv = torch.nn.Conv2d(3, 5, kernel, dilation=dilation, padding=padding, stride=stride)
    x = torch.randn(4, 3, 9, 8)
    expected = F.unfold(x, conv.kernel_size, dilation=conv.dilation, padding=conv.padding, stride=conv.stride)
    assert torch.equal(_patches(x, conv_geometry(conv)), expected.transpose(1, 2))


def test_a_noisy_step_leaves_no_gradients_hooks_or_attributes(pool, batch):
    net, matched = _net(pool)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    noisy_mean_gradient(
        net,
        matched,
        *batch,
        max_grad_norm=0.1,
        noise_multiplier=1.0,
        expected_batch_size=40,
        generator=torch.Generator().manual_seed(0),
    )
    for name, p in net.named_parameters():
        assert p.grad is None and p.requires_grad, name
        assert not [
            a for a in ("grad_sample", "_forward_counter", "_current_grad_sample", "_norm_sample") if hasattr(p, a)
        ]
        assert torch.equal(p, before[name])
    for module in net.modules():
        assert not (
            module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
        ), module
        assert not hasattr(module, "activations")
    # the synthetic-set step differentiates through the same net right after (create_graph=True)
    images = torch.randn(20, *pool.image_shape, requires_grad=True)
    loss = F.cross_entropy(net(images), torch.arange(20) % 10)
    grads = torch.autograd.grad(loss, list(matched.values()), create_graph=True)
    assert images.grad is None and sum(g.sum() for g in grads).requires_grad


def test_clipping_bounds_each_examples_norm_and_keeps_small_ones(pool, batch):
    net, matched = _net(pool)
    grads = per_example_gradients(net, matched, *batch)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    limit = float(norms.median())  # half the examples above the limit, half below
    clipped = clip_per_example(grads, limit)
    clipped_norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in clipped.values()))
    assert (clipped_norms <= limit * (1 + 1e-5)).all()
    above = norms > limit
    torch.testing.assert_close(clipped_norms[above], torch.full_like(clipped_norms[above], limit))
    for name in grads:  # below the limit: untouched
        torch.testing.assert_close(clipped[name][~above], grads[name][~above])


def test_noiseless_mechanism_is_the_clipped_sum_over_the_expected_batch(pool, batch):
    net, matched = _net(pool)
    out = noisy_mean_gradient(
        net,
        matched,
        *batch,
        max_grad_norm=0.1,
        noise_multiplier=0.0,
        expected_batch_size=50,
        generator=torch.Generator().manual_seed(0),
    )
    clipped = clip_per_example(per_example_gradients(net, matched, *batch), 0.1)
    for name, g in zip(matched, out):
        torch.testing.assert_close(g, clipped[name].sum(0) / 50)


def test_noise_has_standard_deviation_sigma_times_c(pool, batch):
    net, matched = _net(pool, width=16)
    sigma, clip, expected = 1.7, 0.1, 50
    kwargs = dict(max_grad_norm=clip, expected_batch_size=expected)
    clean = noisy_mean_gradient(net, matched, *batch, noise_multiplier=0.0, generator=torch.Generator(), **kwargs)
    noisy = noisy_mean_gradient(
        net, matched, *batch, noise_multiplier=sigma, generator=torch.Generator().manual_seed(3), **kwargs
    )
    noise = torch.cat([(n - c).flatten() for n, c in zip(noisy, clean)]) * expected
    # n = 3,088 matched weights (conv 16x1x3x3, conv 16x16x3x3, linear 10x64), each N(0, (sigma C)^2):
    # the sample std is within 3 standard errors (se = std / sqrt(2n), 1.3%) of sigma*C = 0.17, and
    # the mean within 3 standard errors (sigma C / sqrt(n)) of 0.
    n = noise.numel()
    assert n == 144 + 2304 + 640
    assert noise.std().item() == pytest.approx(sigma * clip, rel=3 / np.sqrt(2 * n))
    assert abs(noise.mean().item()) < 3 * sigma * clip / np.sqrt(n)


def test_an_empty_batch_releases_pure_noise(pool, batch):
    net, matched = _net(pool)
    out = noisy_mean_gradient(
        net,
        matched,
        batch[0][:0],
        batch[1][:0],
        max_grad_norm=1.0,
        noise_multiplier=1.0,
        expected_batch_size=1,
        generator=torch.Generator().manual_seed(0),
    )
    assert [g.shape for g in out] == [p.shape for p in matched.values()]
    assert all(g.abs().sum() > 0 for g in out)


def test_poisson_sample_rate():
    n, rate = 100_000, 0.3
    size = len(poisson_sample(n, rate, generator=torch.Generator().manual_seed(0)))
    # Binomial(n, rate): sd = sqrt(n rate (1-rate)) = 145; allow 4 sd
    assert abs(size - n * rate) < 4 * np.sqrt(n * rate * (1 - rate))


# -- accounting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_sigma_and_recorded_epsilon_agree_with_opacus(pool, keep, epsilon):
    victim = PSGVictim(epsilon=epsilon, **TINY)
    sigma, rate, spent = victim.privacy(pool)  # N = 0.5 * 1500 expected members, not the run's keep.sum()
    assert rate == 64 / 750 and victim.noisy_steps == 2 * 2 * 2
    accountant = RDPAccountant()
    accountant.history = [(sigma, rate, victim.noisy_steps)]
    assert spent == pytest.approx(accountant.get_epsilon(delta=1e-5), rel=0.01)
    assert spent == pytest.approx(epsilon, rel=0.01)  # calibrated to the target
    obs = victim.run(pool, keep, 3)
    assert obs.formal_epsilon == pytest.approx(spent) and obs.delta == 1e-5


# -- the victim -----------------------------------------------------------------------------------
def test_same_seed_same_synthetic_set_and_balanced_labels(pool, keep):
    victim = PSGVictim(**TINY)
    a, b, c = victim.run(pool, keep, 5), victim.run(pool, keep, 5), victim.run(pool, keep, 6)
    assert a.release_x.shape == (20, *pool.image_shape)
    assert np.array_equal(a.release_x, b.release_x) and np.array_equal(a.logits, b.logits)
    assert not np.array_equal(a.release_x, c.release_x)
    assert np.array_equal(a.release_y, np.repeat(np.arange(10), 2))
    assert a.init_idx.size == 0  # initialised from noise: no real image behind the release


def test_the_synthetic_set_learns_from_the_members(pool, keep):
    # Without noise, 40 matching steps must move the set towards the members: the downstream
    # model beats chance (10%) by far; measured 74% with 5 restarts.
    victim = PSGVictim(epsilon=1e9, spc=10)
    assert victim.run(pool, keep, 1).test_accuracy > 0.5


def test_generator_prior_releases_generated_images(pool, keep):
    victim = PSGVictim(prior=True, **TINY)
    a, b = victim.run(pool, keep, 5), victim.run(pool, keep, 5)
    assert np.array_equal(a.release_x, b.release_x)
    assert a.release_x.min() >= 0 and a.release_x.max() <= 1  # sigmoid pixels
    assert len(np.unique(a.release_x.reshape(len(a.release_x), -1), axis=0)) == len(a.release_x)


def test_generator_output_shape_and_refusal():
    g = ConditionalGenerator(latent_dim=4, n_classes=3, image_shape=(1, 28, 28), width=4)
    assert g(torch.zeros(5, 4), torch.arange(5) % 3).shape == (5, 1, 28, 28)
    with pytest.raises(ValueError, match="divisible by 4, got 30x30"):
        ConditionalGenerator(latent_dim=4, n_classes=3, image_shape=(1, 30, 30))


def test_presets_fill_only_what_is_not_given():
    paper = PSGVictim(preset="paper", spc=10, epsilon=10.0, restarts=7)
    assert (paper.restarts, paper.outer, paper.inner, paper.batches) == (7, 10, 50, 10)
    assert (paper.batch_size, paper.max_grad_norm, paper.lr_images, paper.lr_net, paper.momentum) == (
        256,
        0.1,
        0.1,
        0.01,
        0.5,
    )
    assert paper_values(epsilon=1.0, spc=1)["restarts"] == 200
    assert paper_values(epsilon=10.0, spc=20)["outer"] == 20 and paper_values(epsilon=10.0, spc=60)["inner"] == 10
    digits = PSGVictim()
    assert digits.noisy_steps == 4 * 4 * 2


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"spc": 0}, "--spc must be >= 1, got 0"),
        ({"preset": "cifar"}, "--preset must be one of"),
        ({"restarts": 0}, "--restarts must be >= 1, got 0"),
        ({"max_grad_norm": 0.0}, "--max-grad-norm must be > 0, got 0.0"),
        ({"momentum": 1.0}, r"--momentum must be in \[0, 1\), got 1.0"),
    ],
)
def test_bad_configurations_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_victim("psg")(**kwargs)


def test_a_batch_larger_than_the_members_is_refused(pool):
    with pytest.raises(ValueError, match="--batch-size 800 exceeds the 750 members"):
        PSGVictim(batch_size=800).check(pool)
