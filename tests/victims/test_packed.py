"""victims.packed.GroupedNets: K classifiers as one network of grouped layers computes each model's
own function, and one grouped SGD step is each model's own step; victims.packed.packed_batches
gives each run the minibatches `victims.train.Batches` gives it; `PacksRuns` hands a victim's
packing one seed per run."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from victims.nets import NetConfig, build_net, reinitialise
from victims.packed import GroupedNets, PacksRuns, packed_batches, train_packed
from victims.train import Batches, TrainConfig, train

CONFIGS = [NetConfig(width=8), NetConfig(width=8, norm="none", pooling="max"), NetConfig(arch="mlp", width=16)]


def nets_and_batches(config: NetConfig, k: int = 3, batch: int = 5):
    torch.manual_seed(0)
    nets = [build_net(config, image_shape=(1, 8, 8), n_classes=4) for _ in range(k)]
    x = torch.randn(k, batch, 1, 8, 8)
    y = torch.randint(0, 4, (k, batch))
    return nets, x, y


@pytest.mark.parametrize("config", CONFIGS, ids=["convnet", "convnet-nonorm-max", "mlp"])
def test_grouped_nets_give_each_model_its_own_logits(config):
    nets, x, _ = nets_and_batches(config)
    with torch.no_grad():
        together = GroupedNets(nets)(x)
        alone = torch.stack([net(x[k]) for k, net in enumerate(nets)])
    assert together.shape == (3, 5, 4)
    # float32 sums in another order: within 1e-5 of logits of order 1
    assert torch.allclose(together, alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("config", CONFIGS, ids=["convnet", "convnet-nonorm-max", "mlp"])
def test_one_grouped_sgd_step_is_each_models_own_step(config):
    nets, x, y = nets_and_batches(config)
    copies, _, _ = nets_and_batches(config)  # the same seed: the same initial weights
    for k, net in enumerate(copies):  # each model alone: SGD on its own mean loss
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        F.cross_entropy(net(x[k]), y[k]).backward()
        opt.step()
    grouped = GroupedNets(nets)
    opt = torch.optim.SGD(grouped.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    out = grouped(x)
    F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(3, 5).mean(1).sum().backward()
    opt.step()
    grouped.unpack_into(nets)
    for packed, alone in zip(nets, copies):
        for (name, a), b in zip(packed.named_parameters(), alone.parameters()):
            assert torch.allclose(a, b, atol=1e-6, rtol=0), name
    with torch.no_grad():
        moved = [
            float((a - b).abs().max())
            for a, b in zip(nets[0].parameters(), nets_and_batches(config)[0][0].parameters())
        ]
    assert max(moved) > 1e-3  # the step did move the weights (the comparison is not vacuous)


@pytest.mark.parametrize("config", CONFIGS, ids=["convnet", "convnet-nonorm-max", "mlp"])
def test_reinitialise_draws_what_build_net_draws(config):
    # from one state of the global RNG, a net drawn again in place equals a net built from scratch,
    # bit for bit; `load_from` then puts the K nets in the grouped net as `GroupedNets` does
    torch.manual_seed(3)
    used = build_net(config, image_shape=(1, 8, 8), n_classes=4)
    state = torch.get_rng_state()
    fresh = build_net(config, image_shape=(1, 8, 8), n_classes=4)
    torch.set_rng_state(state)
    reinitialise(used)
    for (name, a), b in zip(used.named_parameters(), fresh.parameters()):
        assert torch.equal(a, b), name
    nets, x, _ = nets_and_batches(config)
    grouped = GroupedNets(nets)
    others, _, _ = nets_and_batches(config, k=3)
    for net in others:
        reinitialise(net)
    grouped.load_from(others)
    with torch.no_grad():
        assert torch.equal(GroupedNets(others)(x), grouped(x))


@pytest.mark.parametrize("augment", [False, True], ids=["plain", "augmented"])
def test_packed_batches_are_each_runs_own_batches(augment):
    """K runs' stacked minibatches are, bit for bit, those each run's own `Batches` draws from its
    generator step after step: sets of 70, 100 and 37 examples (epochs of 4, 6 and 2 batches of
    16, so the runs begin their epochs at different steps), 25 steps."""
    config = TrainConfig(steps=25, batch_size=16, augment=augment)
    torch.manual_seed(0)
    sets = [(torch.randn(n, 1, 8, 8), torch.randint(0, 4, (n,))) for n in (70, 100, 37)]
    packed = list(
        packed_batches(sets, [torch.Generator().manual_seed(s) for s in range(3)], config=config, flip_ok=True)
    )
    alone = [
        Batches(x, y, config=config, flip_ok=True, generator=torch.Generator().manual_seed(s))
        for s, (x, y) in enumerate(sets)
    ]
    assert len(packed) == config.steps
    for xb, yb in packed:
        assert xb.shape == (3, 16, 1, 8, 8) and yb.shape == (3, 16)
        for k, batches in enumerate(alone):
            x, y = batches.next()
            assert torch.equal(xb[k], x) and torch.equal(yb[k], y)


def test_runs_with_no_training_examples_are_trained_as_alone():
    """A pack whose runs have no examples has no step shape to share: each run is trained as alone
    (an empty minibatch each step, so only weight decay moves the weights), not divided by zero."""
    config = TrainConfig(steps=3, batch_size=16, weight_decay=0.1, net=NetConfig(width=8))
    empty = (torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.int64))
    torch.manual_seed(0)
    nets = [build_net(config.net, image_shape=(1, 8, 8), n_classes=4) for _ in range(2)]
    twins = [build_net(config.net, image_shape=(1, 8, 8), n_classes=4) for _ in range(2)]
    for net, twin in zip(nets, twins):
        twin.load_state_dict(net.state_dict())
    packed = train_packed(
        nets, [empty, empty], [torch.Generator().manual_seed(s) for s in range(2)], config=config, flip_ok=False
    )
    for s, (net, twin) in enumerate(zip(packed, twins)):
        alone = train(twin, *empty, config=config, flip_ok=False, generator=torch.Generator().manual_seed(s))
        for a, b in zip(net.parameters(), alone.parameters()):
            assert torch.equal(a, b)


def test_a_pack_takes_one_seed_per_run_before_any_victim_s_own_packing():
    class Victim(PacksRuns):
        def pack_runs(self, pool, keeps, seeds, *, device, inclusion_rate):
            return [(len(keeps), seeds, device, inclusion_rate)]

    keeps = np.ones((2, 4), dtype=bool)
    assert Victim().run_packed(None, keeps, (3, 4)) == [(2, [3, 4], "cpu", 0.5)]
    with pytest.raises(ValueError, match=r"^one seed per run: 2 runs, 1 seeds$"):
        Victim().run_packed(None, keeps, [3])
