"""The dataset-condensation victims (dm, dsa, dc), their shared frame and differentiable siamese
augmentation. The contract every victim keeps is in test_victims.py."""

import numpy as np
import pytest
import torch

from victims.condensation import augment as dsa_ops
from victims import get_victim
from victims.condensation.condense import Members, assured_members_per_class, check_ipc, initial_set
from victims.base import seeded, seeded_runs
from victims.nets import NetConfig, build_net
from victims.packed import GroupedNets
from victims.pipelines.dm import class_means
from victims.train import TrainConfig, to_model_space

SHORT = TrainConfig(steps=60, net=NetConfig(width=16))


# -- differentiable siamese augmentation ---------------------------------------------------------
def test_the_strategy_leaves_flips_out_where_they_change_the_label():
    assert dsa_ops.strategy(flip_ok=False) == ("color", "crop", "cutout", "scale", "rotate")
    assert dsa_ops.strategy(flip_ok=True) == ("color", "crop", "cutout", "flip", "scale", "rotate")


@pytest.mark.parametrize("op", sorted(dsa_ops.OPS))
def test_each_operation_is_siamese_and_differentiable(op):
    x = torch.randn(6, 1, 8, 8, requires_grad=True)
    twin = x.detach().clone()
    out = dsa_ops.augment(x, seed=11, ops=(op,))
    # The same seed on the same images gives the same transformation, example by example.
    assert torch.equal(out.detach(), dsa_ops.augment(twin, seed=11, ops=(op,)))
    assert out.shape == x.shape
    (grad,) = torch.autograd.grad(out.pow(2).sum(), x)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_one_seed_picks_one_operation_for_both_sides():
    ops = dsa_ops.strategy(flip_ok=True)
    real, synthetic = torch.randn(32, 1, 8, 8), torch.randn(4, 1, 8, 8)
    for seed in range(20):
        # Augmenting the concatenation equals augmenting each part when the parts share the
        # operation and the first examples share their parameters: check the shared prefix.
        both = dsa_ops.augment(torch.cat([synthetic, real[4:]]), seed=seed, ops=ops)
        assert torch.allclose(both[:4], dsa_ops.augment(synthetic, seed=seed, ops=ops), atol=1e-6)


def test_runs_augmented_together_get_what_each_gets_alone():
    ops = dsa_ops.strategy(flip_ok=True)
    counts, seeds = [5, 0, 7, 3, 6, 4], [3, 4, 5, 6, 7, 5]  # the run of seed 4 has no examples; two share seed 5
    # seeds 3, 5, 6, 7 draw scale, rotate, cutout, flip: four groups of runs, put back in run order
    assert [dsa_ops.draw(s, 1, ops=ops)[0] for s in (3, 5, 6, 7)] == ["scale", "rotate", "cutout", "flip"]
    x = torch.randn(sum(counts), 1, 8, 8, requires_grad=True)
    together = dsa_ops.augment_runs(x, counts=counts, seeds=seeds, ops=ops)
    alone = [dsa_ops.augment(part, seed=s, ops=ops) for part, s in zip(x.split(counts), seeds) if len(part)]
    # every operation acts on each example alone: the same numbers, bit for bit, and the same gradient
    assert torch.equal(together, torch.cat(alone))
    (grad_together,) = torch.autograd.grad(together.pow(2).sum(), x)
    (grad_alone,) = torch.autograd.grad(torch.cat(alone).pow(2).sum(), x)
    assert torch.equal(grad_together, grad_alone)
    with pytest.raises(ValueError, match="counts"):
        dsa_ops.augment_runs(x, counts=[5, 5], seeds=[1, 2], ops=ops)


def test_crop_translates_by_whole_pixels_and_fills_with_zeros():
    x = torch.arange(64.0).view(1, 1, 8, 8).repeat(50, 1, 1, 1)
    out = dsa_ops.crop(x, torch.rand(50, 2, generator=torch.Generator().manual_seed(0)))
    for image in out[:, 0]:
        # An 8-pixel side pads by int(8 * 0.125 + 0.5) = 1: every output is the input shifted by
        # (dr, dc) in {-1, 0, 1}^2, with zeros where the shift uncovers the border.
        matches = []
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                expected = torch.zeros(8, 8)
                src = x[0, 0, max(0, -dr) : 8 - max(0, dr), max(0, -dc) : 8 - max(0, dc)]
                expected[max(0, dr) : 8 - max(0, -dr), max(0, dc) : 8 - max(0, -dc)] = src
                matches.append(torch.allclose(image, expected, atol=1e-4))
        assert any(matches)


def test_cutout_zeroes_a_square_of_half_the_side():
    out = dsa_ops.cutout(torch.ones(200, 1, 8, 8), torch.rand(200, 2, generator=torch.Generator().manual_seed(0)))
    zeros = (out == 0).sum(dim=(1, 2, 3))
    # A 4x4 square, clipped where its centre lies near the border: 4 to 16 zeroed pixels.
    assert zeros.max() == 16 and zeros.min() >= 4 and set(out.unique().tolist()) <= {0.0, 1.0}


# -- the shared frame ---------------------------------------------------------------------------
def test_real_initialisation_takes_ipc_distinct_members_of_each_class(pool, keep):
    members = Members.of(pool, keep, device="cpu")
    images, labels, init_idx = initial_set(
        pool, keep, members, ipc=3, init="real", generator=torch.Generator().manual_seed(0)
    )
    assert np.array_equal(labels.numpy(), np.repeat(np.arange(10), 3))
    assert len(set(init_idx.tolist())) == 30 and keep[init_idx].all()
    assert np.array_equal(pool.y[init_idx], labels.numpy())
    assert torch.equal(images, to_model_space(pool.x[init_idx], mean=pool.mean, std=pool.std))


def test_random_initialisation_touches_no_real_image(pool, keep):
    members = Members.of(pool, keep, device="cpu")
    images, labels, init_idx = initial_set(
        pool, keep, members, ipc=2, init="random", generator=torch.Generator().manual_seed(0)
    )
    assert images.shape == (20, 1, 8, 8) and init_idx.size == 0


def test_class_means_by_hand():
    embeddings = torch.tensor([[1.0, 2.0], [3.0, 4.0], [10.0, 0.0]])
    # class 0: mean of rows 0 and 1 = (2, 3); class 1: row 2; class 2 absent: zeros.
    expected = torch.tensor([[2.0, 3.0], [10.0, 0.0], [0.0, 0.0]])
    assert torch.equal(class_means(embeddings, torch.tensor([0, 0, 1]), 3), expected)


def test_class_means_of_runs_at_once_are_each_runs_own_exactly():
    # three runs' rows with padding (label 4) in between: each run's means are those of its rows alone
    g = torch.Generator().manual_seed(0)
    embeddings = torch.randn(3, 9, 5, generator=g)
    labels = torch.randint(4, (3, 9), generator=g)
    labels[1, 6:] = labels[2, ::2] = 4
    together = class_means(embeddings, labels, 4)
    assert together.shape == (3, 4, 5)
    for run in range(3):
        mine = labels[run] < 4
        assert torch.equal(together[run], class_means(embeddings[run][mine], labels[run][mine], 4))


@pytest.mark.parametrize("arch", ["convnet", "mlp"])
def test_grouped_embed_is_each_nets_embed(arch):
    torch.manual_seed(0)
    nets = [build_net(NetConfig(arch=arch, width=8), image_shape=(1, 8, 8), n_classes=10) for _ in range(3)]
    x = torch.randn(3, 5, 1, 8, 8)
    grouped = GroupedNets(nets)
    embedded = grouped.embed(x)
    assert embedded.shape == (3, 5, nets[0].embed_dim)
    for k, net in enumerate(nets):
        torch.testing.assert_close(embedded[k], net.embed(x[k]), rtol=0, atol=1e-6)
    torch.testing.assert_close(grouped(x), grouped.classifier(embedded), rtol=0, atol=0)


@pytest.mark.parametrize("dsa", [True, False], ids=["dsa", "no-dsa"])
@pytest.mark.parametrize("short", [False, True], ids=["even", "a-short-class"])
def test_dm_condenses_a_pack_as_each_run_alone(pool, dsa, short):
    """`DMVictim.condense_packed` gives each run the images `condense` gives it alone, within float
    tolerance (the grouped convolutions sum in another order; measured ~2e-6 on images of scale ~5).
    With a short class, run 1 has 5 members of class 3 against a real batch of 8 per class: its
    real batch is smaller than the others' and is padded."""
    from shadow_runs.plan import membership_matrix

    keeps = membership_matrix(pool.y, n_runs=3, master_seed=0)
    if short:
        keeps[1][np.flatnonzero(keeps[1] & (pool.y == 3))[5:]] = False
    victim = get_victim("dm")(ipc=2, iterations=3, batch_real=8, dsa=dsa, net=NetConfig(width=8))
    seeds = [7, 8, 9]
    alone = []
    for keep, seed in zip(keeps, seeds):
        with seeded(seed, "cpu") as generator:
            members = Members.of(pool, keep, device="cpu")
            images, labels, _ = initial_set(pool, keep, members, ipc=2, init="real", generator=generator)
            alone.append(victim.condense(images, labels, members, pool=pool, generator=generator))
    members = [Members.of(pool, keep, device="cpu") for keep in keeps]
    with seeded_runs(seeds, "cpu") as runs:
        initial = [
            initial_set(pool, keep, m, ipc=2, init="real", generator=g)
            for keep, m, g in zip(keeps, members, runs.generators)
        ]
        start = torch.stack([images for images, _, _ in initial])
        packed = victim.condense_packed(start, initial[0][1], members, pool=pool, runs=runs)
    assert packed.shape == (3, 20, 1, 8, 8)
    for k in range(3):
        assert not torch.equal(packed[k], start[k])  # the images moved
        torch.testing.assert_close(packed[k], alone[k], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("dm", {"iterations": 40}),
        ("dsa", {"iterations": 2, "outer": 3, "inner": 2}),
        ("dc", {"iterations": 2, "outer": 3, "inner": 2}),
    ],
)
def test_condensation_from_noise_learns_the_classes(pool, keep, name, kwargs):
    # From Gaussian noise, with 1 image per class: a few dozen updates take the downstream
    # ConvNet from chance (10%; 9-12% measured with 0 updates) to above 50% on digits. Measured:
    # dm 40 iterations 0.73, dsa and dc 2x3 updates ~0.6 (seed 3).
    victim = get_victim(name)(ipc=1, init="random", train=SHORT, **kwargs)
    untrained = get_victim(name)(ipc=1, init="random", train=SHORT, iterations=0)
    assert untrained.run(pool, keep, 3).test_accuracy < 0.2
    obs = victim.run(pool, keep, 3)
    assert obs.test_accuracy > 0.5 and obs.init_idx.size == 0
    assert obs.release_x.shape == (10, 1, 8, 8) and np.array_equal(obs.release_y, np.arange(10))


def test_real_initialisation_is_recorded_and_the_release_starts_from_it(pool, keep):
    victim = get_victim("dm")(ipc=2, init="real", iterations=0, train=SHORT)
    obs = victim.run(pool, keep, 5)
    # No update: the release is exactly the chosen member images.
    assert np.allclose(obs.release_x, pool.x[obs.init_idx], atol=1e-6)
    assert keep[obs.init_idx].all() and np.array_equal(pool.y[obs.init_idx], obs.release_y)


@pytest.mark.parametrize(
    "name,kwargs,message",
    [
        ("dm", {"init": "zeros"}, r"--init must be one of \('real', 'random'\), got 'zeros'"),
        ("dm", {"ipc": 0}, "--ipc must be >= 1, got 0"),
        ("dm", {"lr_images": 0.0}, "--lr-images must be > 0, got 0.0"),
        ("dsa", {"outer": 0}, "--outer must be >= 1, got 0"),
        ("dc", {"momentum": 1.0}, r"--momentum must be in \[0, 1\), got 1.0"),
    ],
)
def test_bad_values_name_the_flag(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_victim(name)(**kwargs)


def test_ipc_above_the_members_a_run_has_is_refused(pool):
    # The digits pool's smallest class (class 8) has 145 images: a run has Binomial(145, 1/2) of
    # them, 72.5 expected with sd 6.02, so it can count on floor(72.5 - 4 * 6.02) = 48.
    assert assured_members_per_class(pool) == (48, 8)
    get_victim("dsa")(ipc=48).check(pool)
    with pytest.raises(
        ValueError, match=r"--ipc 49 exceeds the 48 members per class a run can count on \(class 8: 145"
    ):
        get_victim("dsa")(ipc=49).check(pool)
    with pytest.raises(ValueError, match="--ipc 100 exceeds the 48 members per class"):
        get_victim("dsa")(ipc=100).check(pool)
    # A lower inclusion rate expects fewer members: 0.2 * 145 = 29, sd 4.8 -> 9.
    check_ipc(9, pool, 0.2)
    with pytest.raises(ValueError, match="--ipc 10 exceeds the 9 members per class"):
        get_victim("dm")(ipc=10).check(pool, inclusion_rate=0.2)


def test_the_check_bounds_the_chance_of_a_short_class(pool):
    # Against the plan itself: at the largest ipc the check accepts, no run of 400 comes up short.
    from shadow_runs.plan import membership_matrix

    assured, _ = assured_members_per_class(pool)
    keep = membership_matrix(pool.y, n_runs=400, master_seed=1)
    counts = np.stack([np.bincount(pool.y[row], minlength=10) for row in keep])
    assert counts.min() >= assured


@pytest.mark.parametrize("name", ["subset", "dm"])
def test_a_run_short_of_ipc_members_of_a_class_names_the_class(pool, keep, name):
    short = keep.copy()
    short[np.flatnonzero(keep & (pool.y == 3))[2:]] = False  # two members of class 3 left
    victim = get_victim(name)(ipc=3, train=TrainConfig(steps=1, net=NetConfig(width=8)))
    with pytest.raises(ValueError, match=r"--ipc 3 exceeds the 2 members of class 3 in this run \(of 153 images"):
        victim.run(pool, short, 0)


def test_random_initialisation_runs_with_a_short_class(pool, keep):
    short = keep.copy()
    short[np.flatnonzero(keep & (pool.y == 3))[2:]] = False
    members = Members.of(pool, short, device="cpu")
    images, labels, init_idx = initial_set(
        pool, short, members, ipc=3, init="random", generator=torch.Generator().manual_seed(0)
    )
    assert images.shape == (30, 1, 8, 8) and init_idx.size == 0


def test_the_paper_preset_carries_the_reference_values_and_flags_override_it():
    from victims import victim_config

    dm = get_victim("dm")(preset="paper")
    assert (dm.iterations, dm.lr_images, dm.batch_real, dm.momentum) == (20000, 1.0, 256, 0.5)
    assert get_victim("dm")(preset="paper", iterations=200).iterations == 200  # a given flag wins
    # DC/DSA: (outer, inner) by images per class as the reference's get_loops; 15 per class takes 10's
    for ipc, loops in ((1, (1, 1)), (10, (10, 50)), (15, (10, 50)), (50, (50, 10))):
        dsa = get_victim("dsa")(preset="paper", ipc=ipc)
        assert (dsa.outer, dsa.inner) == loops and (dsa.iterations, dsa.lr_images, dsa.batch_real) == (1000, 0.1, 256)
    # the digits preset is the configuration stores were made with: no `preset` key, the same values
    assert "preset" not in victim_config(get_victim("dm")())
    assert victim_config(get_victim("dm")(preset="paper"))["preset"] == "paper"
    assert (get_victim("dm")().iterations, get_victim("dsa")().outer) == (100, 4)
    # KIP: the reference colab's FC1 kernel, Adam lr 0.04, target batches of 5,000, 1,000 steps;
    # its digits preset keeps the values kip's stores were made with (no `preset` key)
    kip = get_victim("kip")(preset="paper")
    assert (kip.iterations, kip.lr, kip.batch_size, kip.depth, kip.reg) == (1000, 0.04, 5000, 1, 1e-6)
    assert get_victim("kip")(preset="paper", depth=3).depth == 3
    digits_kip = get_victim("kip")()
    assert (digits_kip.iterations, digits_kip.lr, digits_kip.batch_size, digits_kip.depth) == (200, 0.1, 128, 3)
    assert "preset" not in victim_config(digits_kip)
    with pytest.raises(ValueError, match=r"^--preset faithful is not available for kip \(choose from digits, paper\)$"):
        get_victim("kip")(preset="faithful")
