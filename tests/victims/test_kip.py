"""KIP: the FC-ReLU NTK by hand and against a naive reference, its gradients at theta = 0, the
kernel-ridge loss, the members-only ZCA, one short condensation, flag validation; the batched
kernel and loss of a pack against one run's, and a packed condensation against each run alone."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from victims.base import seeded, seeded_runs
from victims.condensation.condense import Members, initial_set
from victims.pipelines.kip import KIPVictim, Whitening, centered_one_hot, kip_loss, ntk
from victims.nets import NetConfig
from victims.train import TrainConfig


QUICK = {
    "ipc": 2,
    "iterations": 5,
    "batch_size": 64,
    "depth": 1,
    "train": TrainConfig(steps=10, net=NetConfig(width=8)),
}


def _k(x1, x2, **kw):
    return ntk(torch.tensor(x1, dtype=torch.float64), torch.tensor(x2, dtype=torch.float64), **kw)


# -- the kernel ---------------------------------------------------------------------------------
def test_depth_0_is_the_scaled_linear_kernel_by_hand():
    # Theta = Sigma^0 = w_var x.x'/d + b_var with d = 2:
    # (1,0).(0,1) = 0 -> 0.01;  (3,4).(3,4) = 25 -> 2*25/2 + 0.01 = 25.01;  (1,2).(3,-1) = 1 -> 1.01
    k = _k([[1.0, 0.0], [3.0, 4.0], [1.0, 2.0]], [[0.0, 1.0], [3.0, 4.0], [3.0, -1.0]], depth=0)
    assert k[0, 0].item() == pytest.approx(0.01, abs=1e-6)
    assert k[1, 1].item() == pytest.approx(25.01, abs=1e-6)
    assert k[2, 2].item() == pytest.approx(1.01, abs=1e-6)


def test_depth_1_orthogonal_and_opposite_inputs_by_hand():
    # b_var = 0, x = (1,0), x' = (0,1): Sigma^0(x,x) = Sigma^0(x',x') = 2*1/2 = 1, Sigma^0(x,x') = 0,
    # so cos theta = 0, theta = pi/2: Sigma_relu = 1*(sin(pi/2) + (pi/2)*0)/(2 pi) = 1/(2 pi),
    # Sigma_dot = (pi/2)/(2 pi) = 1/4; Sigma^1 = 2/(2 pi) = 1/pi; Theta^1 = 2*Theta^0*1/4 + Sigma^1 = 0 + 1/pi.
    k = _k([[1.0, 0.0]], [[0.0, 1.0]], depth=1, w_var=2.0, b_var=0.0)
    assert k.item() == pytest.approx(1 / math.pi, abs=1e-6)
    # x' = -x: Sigma^0(x,x') = -1, cos theta = -1, theta = pi: Sigma_relu = 0, Sigma_dot = 0 -> Theta^1 = 0.
    k = _k([[1.0, 0.0]], [[-1.0, 0.0]], depth=1, w_var=2.0, b_var=0.0)
    assert k.item() == pytest.approx(0.0, abs=1e-6)


def test_depth_1_identical_inputs_by_hand():
    # Defaults w_var = 2, b_var = 0.01, x = x' = (1,0): Sigma^0 = 2*1/2 + 0.01 = 1.01 = Theta^0;
    # theta = 0: Sigma_relu = 1.01*(0 + pi*1)/(2 pi) = 0.505, Sigma_dot = pi/(2 pi) = 1/2;
    # Sigma^1 = 2*0.505 + 0.01 = 1.02; Theta^1 = 2*1.01*1/2 + 1.02 = 2.03.
    assert _k([[1.0, 0.0]], [[1.0, 0.0]], depth=1).item() == pytest.approx(2.03, abs=1e-6)
    # Depth 2 on the same pair: Sigma^1 = 1.02, Theta^1 = 2.03 -> Sigma_relu = 0.51, Sigma_dot = 1/2,
    # Sigma^2 = 2*0.51 + 0.01 = 1.03, Theta^2 = 2*2.03/2 + 1.03 = 3.06.
    assert _k([[1.0, 0.0]], [[1.0, 0.0]], depth=2).item() == pytest.approx(3.06, abs=1e-6)


def _naive_ntk(x, y, *, depth, w_var=2.0, b_var=0.01):
    """One pair, plain floats: the recursion exactly as written in the docstring of `ntk`."""
    d = len(x)
    sxy = w_var * sum(a * b for a, b in zip(x, y)) / d + b_var
    sxx = w_var * sum(a * a for a in x) / d + b_var
    syy = w_var * sum(b * b for b in y) / d + b_var
    theta = sxy
    for _ in range(depth):
        c = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
        angle = math.acos(c)
        relu = math.sqrt(sxx * syy) * (math.sin(angle) + (math.pi - angle) * c) / (2 * math.pi)
        dot = (math.pi - angle) / (2 * math.pi)
        sxy = w_var * relu + b_var
        theta = w_var * theta * dot + sxy
        sxx, syy = w_var * sxx / 2 + b_var, w_var * syy / 2 + b_var
    return theta


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_kernel_matrix_equals_a_per_pair_double_loop(depth):
    rng = np.random.default_rng(depth)
    a, b = rng.normal(size=(5, 7)), rng.normal(size=(4, 7))
    b[0] = a[2]  # an identical pair (theta = 0)
    b[1] = -a[0]
    expected = [[_naive_ntk(x, y, depth=depth) for y in b] for x in a]
    # 1e-6, not float64 round-off: near theta = 0 the kernel has a cusp (theta ~ sqrt(2 (1 - c))),
    # so the matmul's and the loop's different roundings of c = 1 - O(1e-16) differ by ~1e-8.
    assert np.allclose(_k(a, b, depth=depth).numpy(), expected, rtol=0, atol=1e-6)


def test_kernel_matrix_is_symmetric_positive_semidefinite():
    x = torch.randn(40, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x[7] = x[3]  # a repeated point makes it singular, not indefinite
    k = ntk(x, x, depth=3)
    assert torch.allclose(k, k.T, rtol=0, atol=1e-12)
    eig = torch.linalg.eigvalsh(k)
    assert eig.min().item() >= -1e-10 * eig.max().item()


def test_custom_backward_matches_finite_differences_on_distinct_points():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, q: ntk(p, q, depth=2), (a, b))


def plain_ntk(x1, x2, depth, w_var=2.0, b_var=0.01):
    """The recursion of `ntk`'s docstring in plain torch ops, differentiated by autograd."""
    a, b = x1.flatten(1), x2.flatten(1)
    cross = w_var * (a @ b.T) / a.shape[1] + b_var
    var1, var2 = w_var * (a * a).sum(1) / a.shape[1] + b_var, w_var * (b * b).sum(1) / b.shape[1] + b_var
    theta = cross
    for _ in range(depth):
        norm = torch.sqrt(var1)[:, None] * torch.sqrt(var2)[None, :]
        angle = torch.arccos(cross / norm)
        relu = norm * (torch.sin(angle) + (math.pi - angle) * torch.cos(angle)) / (2 * math.pi)
        cross = w_var * relu + b_var
        theta = w_var * theta * (math.pi - angle) / (2 * math.pi) + cross
        var1, var2 = w_var * var1 / 2 + b_var, w_var * var2 / 2 + b_var
    return theta


@pytest.mark.parametrize("depth", [1, 3])
def test_the_custom_backward_equals_autograd_through_the_plain_recursion(depth):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(7, 16, generator=g, dtype=torch.float64)
    b = torch.randn(5, 16, generator=g, dtype=torch.float64)  # distinct points: arccos is differentiable
    weights = torch.randn(7, 5, generator=g, dtype=torch.float64)
    grads = []
    for kernel in (ntk, plain_ntk):
        x, y = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
        value = kernel(x, y, depth=depth)
        (value * weights).sum().backward()
        grads.append((value.detach(), x.grad, y.grad))
    for fused, plain in zip(*grads):  # float64: equal to round-off
        assert torch.allclose(fused, plain, rtol=1e-10, atol=1e-12)


def test_gradients_stay_finite_at_identical_support_points():
    g = torch.Generator().manual_seed(2)
    support = torch.randn(6, 64, generator=g)
    support[1] = support[0]  # theta = 0 off the diagonal too
    support.requires_grad_(True)
    target = torch.randn(10, 64, generator=g)
    support_y = centered_one_hot(torch.tensor([0, 0, 1, 1, 2, 2]), 3)
    target_y = centered_one_hot(torch.randint(0, 3, (10,), generator=g), 3)
    for depth in (1, 3):
        support.grad = None
        ntk(support, support, depth=depth).sum().backward()
        assert torch.isfinite(support.grad).all()
        support.grad = None
        kip_loss(support, support_y, target, target_y, depth=depth, reg=1e-6).backward()
        assert torch.isfinite(support.grad).all() and support.grad.abs().sum() > 0


# -- the loss -----------------------------------------------------------------------------------
def test_loss_is_zero_when_the_support_is_the_target():
    # Kernel ridge regression with lambda -> 0 interpolates its own training points.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, 64, generator=g)
    y = centered_one_hot(torch.arange(30) % 10, 10)
    assert kip_loss(x, y, x, y, depth=3, reg=1e-10).item() < 1e-10
    assert kip_loss(x, y, x, y, depth=3, reg=1.0).item() > 1e-3  # a real ridge does not


def test_centered_one_hot_rows_sum_to_zero():
    y = centered_one_hot(torch.tensor([0, 3]), 4)
    assert torch.allclose(
        y, torch.tensor([[0.75, -0.25, -0.25, -0.25], [-0.25, -0.25, -0.25, 0.75]], dtype=torch.float64)
    )


# -- ZCA ----------------------------------------------------------------------------------------
def test_whitened_full_rank_data_has_identity_covariance():
    g = torch.Generator().manual_seed(4)
    x = (
        torch.randn(2000, 6, generator=g, dtype=torch.float64) @ torch.randn(6, 6, generator=g, dtype=torch.float64)
        + 3.0
    )
    z = Whitening.fit(x, zca_reg=0.0)(x)
    cov = z.T @ z / len(z)
    assert z.mean(0).abs().max().item() < 1e-10
    assert torch.allclose(cov, torch.eye(6, dtype=torch.float64), rtol=0, atol=1e-8)  # exact up to round-off
    # With the regulariser, eigenvalue s maps to s / (s + reg): below 1, order kept.
    z = Whitening.fit(x, zca_reg=0.1)(x)
    eig = torch.linalg.eigvalsh(z.T @ z / len(z))
    assert eig.max().item() < 1.0 and eig.min().item() > 0.0


def test_zca_is_fitted_on_the_members_only(pool, keep, monkeypatch):
    fitted = []
    original = Whitening.fit.__func__

    def spy(cls, x, *, zca_reg):
        fitted.append(x.clone())
        return original(cls, x, zca_reg=zca_reg)

    monkeypatch.setattr(Whitening, "fit", classmethod(spy))
    victim = KIPVictim(**{**QUICK, "zca": True})
    obs = victim.run(pool, keep, 0)
    assert len(fitted) == 1
    assert torch.equal(fitted[0], Members.of(pool, keep, device="cpu").x)
    # Changing a non-member changes neither the whitening nor the release.
    altered = pool.x.copy()
    altered[np.flatnonzero(~keep)[0]] = 1.0 - altered[np.flatnonzero(~keep)[0]]
    other = victim.run(dataclasses.replace(pool, x=altered), keep, 0)
    assert torch.equal(fitted[1], fitted[0])
    assert np.array_equal(other.release_x, obs.release_x)


# -- condensation -------------------------------------------------------------------------------
def test_a_few_iterations_lower_the_loss_on_a_fixed_target_batch(pool, keep):
    members = Members.of(pool, keep, device="cpu")
    victim = KIPVictim(ipc=2, iterations=20, batch_size=128, depth=3, lr=0.1)
    g = torch.Generator().manual_seed(0)
    images, labels, _ = initial_set(pool, keep, members, ipc=2, init="random", generator=g)
    batch = torch.randperm(len(members.y), generator=torch.Generator().manual_seed(5))[:200]
    target_x, target_y = members.x[batch], centered_one_hot(members.y[batch], pool.n_classes)
    support_y = centered_one_hot(labels, pool.n_classes)

    def loss(x):
        return kip_loss(x.flatten(1), support_y, target_x.flatten(1), target_y, depth=3, reg=1e-6).item()

    learned = victim.condense(images, labels, members, pool=pool, generator=g)
    assert learned.shape == images.shape and learned.dtype == images.dtype
    assert loss(learned) < 0.8 * loss(images)


def test_a_run_releases_the_learned_images_with_their_class_labels(pool, keep):
    obs = KIPVictim(**QUICK).run(pool, keep, 1)
    assert obs.release_x.shape == (2 * pool.n_classes, *pool.image_shape)
    assert np.array_equal(obs.release_y, np.repeat(np.arange(pool.n_classes), 2))
    assert np.array_equal(pool.y[obs.init_idx], obs.release_y) and keep[obs.init_idx].all()
    assert not np.allclose(obs.release_x, pool.x[obs.init_idx])  # the images moved


# -- flags ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"iterations": 0}, "--iterations must be >= 1, got 0"),
        ({"lr": 0.0}, "--lr must be a positive number, got 0.0"),
        ({"lr": math.inf}, "--lr must be a positive number, got inf"),
        ({"batch_size": 0}, "--batch-size must be >= 1, got 0"),
        ({"depth": -1}, "--depth must be >= 0, got -1"),
        ({"reg": -1e-3}, "--reg must be a number >= 0, got -0.001"),
        ({"zca_reg": -0.1}, "--zca-reg must be a positive number, got -0.1"),
        ({"zca_reg": 0.0}, "--zca-reg must be a positive number, got 0.0"),
        ({"ipc": 0}, "--ipc must be >= 1, got 0"),
        ({"init": "zeros"}, "--init must be one of"),
    ],
)
def test_bad_values_name_the_flag(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        KIPVictim(**kwargs)


def test_siamese_augmentation_changes_the_learned_set_and_stays_deterministic(pool, keep):
    short = TrainConfig(steps=5)
    plain = KIPVictim(ipc=1, iterations=5, depth=1, train=short).run(pool, keep, 3)
    augmented = KIPVictim(ipc=1, iterations=5, depth=1, dsa=True, train=short)
    first, again = augmented.run(pool, keep, 3), augmented.run(pool, keep, 3)
    assert np.array_equal(first.release_x, again.release_x)
    assert not np.allclose(first.release_x, plain.release_x)


# -- packs: K runs as one computation -----------------------------------------------------------
#: batched against per-run float64 kernels and losses: the batched matmul may sum in another order
#: than the 2-d one (measured: equal bit for bit on one CPU thread; a GPU's bmm need not be)
PACK_RTOL = 1e-12


def _runs(seed, k, n, d=16):
    return torch.randn(k, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_the_batched_kernel_is_each_runs_kernel(depth):
    a, b = _runs(0, 3, 7), _runs(1, 3, 5)
    b[1, 0] = a[1, 2]  # theta = 0 in one run
    batched = ntk(a, b, depth=depth)
    assert batched.shape == (3, 7, 5)
    for k in range(3):
        assert torch.allclose(batched[k], ntk(a[k], b[k], depth=depth), rtol=PACK_RTOL, atol=0)


def _pack_losses(padded_target, padded_y, *, sizes, support, support_y, depth=2):
    support = support.clone().requires_grad_(True)
    mask = torch.arange(padded_target.shape[1]) < torch.tensor(sizes)[:, None]
    losses = kip_loss(support, support_y, padded_target, padded_y, depth=depth, reg=1e-6, mask=mask)
    losses.sum().backward()
    return losses.detach(), support.grad


def test_the_batched_masked_loss_is_each_runs_loss_and_gradient():
    """Three runs, target batches of 9, 6 and 9 rows padded to 9: each run's loss and the gradient
    of its support equal `kip_loss` of that run alone on its unpadded batch."""
    g = torch.Generator().manual_seed(6)
    support, target = _runs(2, 3, 8), _runs(3, 3, 9)
    support_y = centered_one_hot(torch.arange(8) % 4, 4)
    target_y = centered_one_hot(torch.randint(0, 4, (3, 9), generator=g), 4)
    sizes = [9, 6, 9]
    losses, grad = _pack_losses(target, target_y, sizes=sizes, support=support, support_y=support_y)
    assert losses.shape == (3,)
    for k, n in enumerate(sizes):
        alone = support[k].clone().requires_grad_(True)
        loss = kip_loss(alone, support_y, target[k, :n], target_y[k, :n], depth=2, reg=1e-6)
        loss.backward()
        assert torch.allclose(losses[k], loss.detach(), rtol=PACK_RTOL, atol=0)
        assert torch.allclose(grad[k], alone.grad, rtol=PACK_RTOL, atol=1e-15)
    # without a mask every row counts: the mean over all of them
    whole = kip_loss(support, support_y, target, target_y, depth=2, reg=1e-6)
    assert torch.allclose(whole[1], kip_loss(support[1], support_y, target[1], target_y[1], depth=2, reg=1e-6))
    assert not torch.allclose(whole[1], losses[1])


def test_a_masked_padded_row_contributes_exactly_nothing():
    g = torch.Generator().manual_seed(7)
    support, target = _runs(4, 2, 6), _runs(5, 2, 5)
    support_y = centered_one_hot(torch.arange(6) % 3, 3)
    target_y = centered_one_hot(torch.randint(0, 3, (2, 5), generator=g), 3)
    sizes = [5, 3]  # run 1's rows 3 and 4 are padding
    before = _pack_losses(target, target_y, sizes=sizes, support=support, support_y=support_y)
    other, other_y = target.clone(), target_y.clone()
    other[1, 3:] = 100.0 * torch.randn(2, 16, generator=g, dtype=torch.float64)
    other_y[1, 3:] = -other_y[1, 3:]
    after = _pack_losses(other, other_y, sizes=sizes, support=support, support_y=support_y)
    for one, two in zip(before, after):  # bit for bit: the padded rows add exact zeros
        assert torch.equal(one, two)
    padded = other.clone().requires_grad_(True)
    mask = torch.arange(5) < torch.tensor(sizes)[:, None]
    kip_loss(support, support_y, padded, other_y, depth=2, reg=1e-6, mask=mask).sum().backward()
    assert torch.equal(padded.grad[1, 3:], torch.zeros(2, 16, dtype=torch.float64))
    assert padded.grad[1, :3].abs().sum() > 0


def test_stacked_whitening_whitens_each_run_with_its_own_fit():
    x = torch.randn(2, 300, 1, 4, 4, generator=torch.Generator().manual_seed(8))
    fits = [Whitening.fit(x[0], zca_reg=0.1), Whitening.fit(x[1, :200], zca_reg=0.1)]
    stacked = Whitening.stack(fits)(x[:, :50])
    for k, fit in enumerate(fits):
        assert torch.allclose(stacked[k], fit(x[k, :50]), rtol=PACK_RTOL, atol=1e-15)


#: a packed condensation against each run alone: 5 Adam steps (lr 0.1) of float32 images from a
#: float64 loss whose batched sums may round differently (measured 0, bit for bit, on one CPU thread,
#: here and after 200 steps, every combination of --dsa and --zca)
PACK_ATOL = 1e-5


@pytest.mark.parametrize("dsa", [False, True], ids=["plain", "dsa"])
@pytest.mark.parametrize("zca", [False, True], ids=["raw", "zca"])
def test_packed_condensation_equals_each_run_alone(pool, keep, dsa, zca):
    """Three runs, one with 40 members, fewer than the batch of 64 (its target batches are padded
    and masked): each run's learned set is what `condense` gives it alone, and its generator ends
    where it ends alone (it drew the same numbers)."""
    small = np.zeros_like(keep)
    small[np.flatnonzero(keep)[:40]] = True
    keeps = [keep, np.roll(keep, 1), small]
    seeds = [3, 4, 5]
    victim = KIPVictim(ipc=2, iterations=5, batch_size=64, depth=2, dsa=dsa, zca=zca, init="random")
    members = [Members.of(pool, k, device="cpu") for k in keeps]
    alone, states = [], []
    for k, m, seed in zip(keeps, members, seeds):
        with seeded(seed) as g:
            images, labels, _ = initial_set(pool, k, m, ipc=2, init="random", generator=g)
            alone.append(victim.condense(images, labels, m, pool=pool, generator=g))
            states.append(g.get_state())
    with seeded_runs(seeds) as runs:
        initial = [
            initial_set(pool, k, m, ipc=2, init="random", generator=g)
            for k, m, g in zip(keeps, members, runs.generators)
        ]
        packed = victim.condense_packed(torch.stack([i for i, _, _ in initial]), labels, members, pool=pool, runs=runs)
        assert all(torch.equal(g.get_state(), state) for g, state in zip(runs.generators, states))
    assert packed.shape == (3, *alone[0].shape)
    for together, one, start in zip(packed, alone, initial):
        assert not torch.equal(one, start[0])  # the images moved
        torch.testing.assert_close(together, one, rtol=0, atol=PACK_ATOL)


def test_packed_condensation_under_compile_condenses_the_runs_in_turn(pool, keep, monkeypatch):
    """`--compile`: the compiled kernel step is one run's, so a pack falls back to `condense` run
    by run (`compiling` faked here, so nothing is compiled)."""
    import victims.pipelines.kip as kip

    calls = []
    original = KIPVictim.condense

    def spy(self, images, labels, members, *, pool, generator):
        calls.append(len(members.y))
        return original(self, images, labels, members, pool=pool, generator=generator)

    monkeypatch.setattr(kip, "compiling", lambda: True)
    monkeypatch.setattr(KIPVictim, "condense", spy)
    keeps = [keep, np.roll(keep, 1)]
    members = [Members.of(pool, k, device="cpu") for k in keeps]
    victim = KIPVictim(ipc=1, iterations=2, batch_size=16, depth=1, init="random")
    with seeded_runs([1, 2]) as runs:
        initial = [
            initial_set(pool, k, m, ipc=1, init="random", generator=g)
            for k, m, g in zip(keeps, members, runs.generators)
        ]
        packed = victim.condense_packed(
            torch.stack([i for i, _, _ in initial]), initial[0][1], members, pool=pool, runs=runs
        )
    assert calls == [len(m.y) for m in members] and packed.shape == (2, *initial[0][0].shape)
