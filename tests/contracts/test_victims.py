"""The contract every registered victim keeps, written once (a new victim adds a FAST entry)."""

import dataclasses

import numpy as np
import pytest
import torch

from victims import get_victim, victim_names
from victims.base import generator_victim_names
from victims.nets import NetConfig
from victims.train import TrainConfig, n_queries

SHORT = TrainConfig(steps=15, net=NetConfig(width=16))
FAST = {  # a quick configuration of each victim, for the contract tests
    "real": {"train": SHORT},
    "subset": {"ipc": 3, "train": SHORT},
    "dpsgd": {"epochs": 1, "net": NetConfig(width=16)},
    "psg": {
        "restarts": 1,
        "outer": 2,
        "batches": 2,
        "inner": 1,
        "batch_size": 64,
        "spc": 2,
        "net": NetConfig(width=8),
        "train": SHORT,
    },
    "dm": {"ipc": 2, "iterations": 3, "batch_real": 8, "net": NetConfig(width=8), "train": SHORT},
    "dsa": {
        "ipc": 2,
        "iterations": 1,
        "outer": 2,
        "inner": 1,
        "batch_real": 8,
        "net": NetConfig(width=8),
        "train": SHORT,
    },
    "dc": {
        "ipc": 2,
        "iterations": 1,
        "outer": 2,
        "inner": 1,
        "batch_real": 8,
        "net": NetConfig(width=8),
        "train": SHORT,
    },
    "kip": {"ipc": 2, "iterations": 5, "batch_size": 64, "depth": 1, "train": SHORT},
    "cgan": {
        "ipc": 2,
        "latent_dim": 4,
        "gen_width": 4,
        "disc_width": 4,
        "steps": 5,
        "batch_size": 16,
        "fbb_samples": 20,
        "pbb_examples": 3,
        "pbb_starts": 1,
        "pbb_evaluations": 10,
        "wb_steps": 3,
        "train": SHORT,
    },
    "dpcgan": {
        "ipc": 2,
        "latent_dim": 4,
        "gen_width": 4,
        "disc_width": 4,
        "steps": 5,
        "batch_size": 16,
        "fbb_samples": 20,
        "pbb_examples": 3,
        "pbb_starts": 1,
        "pbb_evaluations": 10,
        "wb_steps": 3,
        "train": SHORT,
    },
    "dpkernel": {
        "ipc": 2,
        "latent_dim": 4,
        "gen_width": 4,
        "steps": 5,
        "batch_size": 16,
        "features": 16,
        "fake_per_class": 2,
        "fbb_samples": 20,
        "pbb_examples": 3,
        "pbb_starts": 1,
        "pbb_evaluations": 10,
        "wb_steps": 3,
        "train": SHORT,
    },
    "datalens": {
        "ipc": 2,
        "latent_dim": 4,
        "gen_width": 4,
        "disc_width": 4,
        "steps": 5,
        "batch_size": 8,
        "teachers": 3,
        "teacher_batch": 8,
        "fbb_samples": 20,
        "pbb_examples": 3,
        "pbb_starts": 1,
        "pbb_evaluations": 10,
        "wb_steps": 3,
        "train": SHORT,
    },
}


def test_every_registered_victim_is_covered_by_the_contract():
    """Every image victim here; every tabular victim in test_tabular_victims.py; a victim of either kind
    (`tabular` None: `command`, whose pipeline file says which) in a test of its own,
    tests/victims/test_command_victim.py, which runs this contract on a pipeline of each kind."""
    assert {name for name in victim_names() if getattr(get_victim(name), "tabular", False) is False} == set(FAST)
    assert {name for name in victim_names() if getattr(get_victim(name), "tabular", False) is None} == {"command"}


def test_each_built_in_victim_is_defined_in_a_module_of_victims_pipelines_and_each_module_registers_one():
    """A built-in victim is one file in victims/pipelines/, registered as the package imports every
    module in it: no import line to add anywhere else."""
    from victims import pipelines

    assert pipelines.MODULES  # found by pkgutil, not listed by hand
    assert {get_victim(name).__module__ for name in victim_names()} == {
        f"victims.pipelines.{m}" for m in pipelines.MODULES
    }


@pytest.fixture(scope="module", params=sorted(FAST))
def victim(request):
    return get_victim(request.param)(**FAST[request.param])


@pytest.fixture(scope="module")
def fast_run(pool, keep):
    """`fast_run(name)`: victim `name`'s FAST run on the module's pool and members at seed 7, made once
    per module (its observations are what several tests check; each run is seeded, so it is the same run)."""
    runs = {}

    def run(name: str):
        if name not in runs:
            runs[name] = get_victim(name)(**FAST[name]).run(pool, keep, 7)
        return runs[name]

    return run


@pytest.fixture(scope="module")
def observed(victim, fast_run):
    return fast_run(victim.name)


def test_observations_have_the_documented_shapes(victim, pool, keep, observed):
    assert observed.logits.shape == (pool.n_pool, n_queries(flip_ok=pool.flip_ok), pool.n_classes)
    assert observed.logits.dtype == np.float32 and np.isfinite(observed.logits).all()
    assert 0.0 <= observed.test_accuracy <= 1.0
    assert observed.init_idx.dtype == np.int64 and keep[observed.init_idx].all()


def test_a_run_stores_reconstruction_losses_exactly_when_its_class_says_it_does(victim, observed):
    """`stores_recon_loss` is what makes a generator victim (audit.ganleak audits those)."""
    generator = getattr(type(victim), "stores_recon_loss", False)  # absent: not a generator
    assert (observed.recon_loss is not None) == generator
    assert (type(victim).name in generator_victim_names()) == generator


def test_same_seed_same_observations_and_the_global_rng_left_alone(victim, pool, keep, observed):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    again = victim.run(pool, keep, 7)
    assert torch.equal(torch.rand(3), expected)  # the run drew from its own generators only
    assert np.array_equal(again.logits, observed.logits)
    assert again.test_accuracy == observed.test_accuracy
    assert np.array_equal(again.init_idx, observed.init_idx)
    assert again.formal_epsilon == observed.formal_epsilon
    if observed.release_x is None:
        assert again.release_x is None
    else:  # the same synthetic set, bit for bit
        assert np.array_equal(again.release_x, observed.release_x)
        assert np.array_equal(again.release_y, observed.release_y)


def test_another_seed_other_observations(victim, pool, keep, observed):
    assert not np.array_equal(victim.run(pool, keep, 8).logits, observed.logits)


def test_members_are_the_only_real_data_it_touches(victim, pool, keep, observed):
    # Replace every non-member by noise: the trained model must not change, so the logits of the
    # members' (unchanged) images and the test accuracy stay exactly the same.
    noise = np.random.default_rng(0).uniform(size=pool.x.shape).astype(np.float32)
    altered = dataclasses.replace(pool, x=np.where(keep[:, None, None, None], pool.x, noise))
    other = victim.run(altered, keep, 7)
    assert np.array_equal(other.logits[keep], observed.logits[keep])
    assert other.test_accuracy == observed.test_accuracy
    assert not np.array_equal(other.logits[~keep], observed.logits[~keep])
    if observed.release_x is not None:
        assert np.array_equal(other.release_x, observed.release_x)


def test_dpsgd_records_the_accountants_epsilon(fast_run):
    obs = fast_run("dpsgd")
    # Noise calibrated by opacus to spend epsilon=1 (to within its 0.01 search tolerance).
    assert obs.delta == 1e-5 and 0.99 <= obs.formal_epsilon <= 1.0


def test_subset_keeps_ipc_member_images_per_class(pool, fast_run):
    obs = fast_run("subset")
    assert np.array_equal(np.bincount(pool.y[obs.init_idx], minlength=10), np.full(10, 3))


@pytest.mark.parametrize(
    "name,kwargs,message",
    [
        ("subset", {"ipc": 0}, "--ipc must be >= 1, got 0"),
        ("dpsgd", {"epsilon": -1.0}, "--epsilon must be a positive number, got -1.0"),
        ("dpsgd", {"delta": 1.5}, r"--delta must be in \(0, 1\), got 1.5"),
    ],
)
def test_bad_configurations_name_the_value(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        get_victim(name)(**kwargs)


def test_subset_refuses_more_images_per_class_than_a_run_has(pool):
    with pytest.raises(ValueError, match="--ipc 500 exceeds"):
        get_victim("subset")(ipc=500).check(pool)


# -- DP victims calibrate to the plan's expected member count, never to the run's -----------------
def _spy(monkeypatch, module, name, log, pick):
    """Replace module.name by a wrapper that logs pick(*args, **kwargs) and calls the original."""
    real = getattr(module, name)

    def spy(*args, **kwargs):
        log.append((name, pick(*args, **kwargs)))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


def _privacy_log(name, pool, keep, monkeypatch, inclusion_rate=0.5):
    """What a run of DP victim `name` hands its accountant, sampler and Gaussian mechanism, and its
    recorded epsilon: every sample rate, step count, sigma and divisor it uses."""
    import opacus.optimizers

    from victims.pipelines import cgan, dpkernel, dpsgd, psg

    log = []
    accounting = lambda **kw: tuple(sorted(kw.items()))  # noqa: E731  (sample_rate, steps, sigma, ...)
    if name == "dpsgd":
        module = dpsgd
        real_batches = dpsgd.poisson_batches

        def batches(n, sample_rate, steps, *, generator):  # the rate and the steps actually iterated
            drawn = list(real_batches(n, sample_rate, steps, generator=generator))
            log.append(("poisson_batches", (sample_rate, steps, len(drawn))))
            return iter(drawn)

        monkeypatch.setattr(dpsgd, "poisson_batches", batches)
        _spy(
            monkeypatch,
            opacus.optimizers,
            "DPOptimizer",
            log,
            lambda opt, **kw: (
                kw["noise_multiplier"],
                kw["max_grad_norm"],
                kw["expected_batch_size"],
                kw["loss_reduction"],
            ),
        )
    else:
        module = {"psg": psg, "dpkernel": dpkernel}.get(name, cgan)
        spent = "epsilon_spent" if name == "psg" else "accounted_fields"  # the accountant's epsilon (and mechanism)
        _spy(monkeypatch, module, spent, log, accounting)
        _spy(monkeypatch, module, "poisson_sample", log, lambda n, rate, **kw: rate)
        if name == "dpkernel":  # the noisy kernel mean embedding: (sigma, sensitivity, divisor B)
            _spy(
                monkeypatch,
                module,
                "noisy_mean_embedding",
                log,
                lambda f, y, **kw: (kw["noise_multiplier"], dpkernel.SENSITIVITY, kw["expected_batch_size"]),
            )
        else:
            _spy(
                monkeypatch,
                module,
                "gaussian_mean",
                log,
                lambda g, params, **kw: (kw["noise_multiplier"], kw["max_grad_norm"], kw["expected_batch_size"]),
            )
    _spy(monkeypatch, module, "noise_multiplier_for", log, accounting)
    obs = get_victim(name)(**FAST[name]).run(pool, keep, 7, inclusion_rate=inclusion_rate)
    monkeypatch.undo()
    return log, (obs.formal_epsilon, obs.delta)


@pytest.mark.parametrize("name", ["dpsgd", "psg", "dpcgan", "dpkernel"])
def test_dp_privacy_parameters_depend_on_the_expected_member_count_only(name, pool, monkeypatch):
    from shadow_runs.plan import membership_matrix

    keep = membership_matrix(pool.y, n_runs=2, master_seed=0)
    assert keep[0].sum() != keep[1].sum()  # 726 and 715 members
    first, eps_first = _privacy_log(name, pool, keep[0], monkeypatch)
    second, eps_second = _privacy_log(name, pool, keep[1], monkeypatch)
    assert first == second and eps_first == eps_second
    # The rate is B / (q n_pool) = B / 750, at every step, in the accountant and the sampler alike.
    batch = FAST[name].get("batch_size", 128 if name == "dpsgd" else None)
    rates = {kwargs["sample_rate"] for call, args in first if call == "noise_multiplier_for" for kwargs in [dict(args)]}
    assert rates == {batch / 750}
    if name == "dpsgd":  # epochs * round(750 / 128) = 1 * 6 steps, all taken
        assert ("poisson_batches", (batch / 750, 6, 6)) in first
    else:
        samples = [args for call, args in first if call == "poisson_sample"]
        assert samples and set(samples) == {batch / 750}
        mechanism = "noisy_mean_embedding" if name == "dpkernel" else "gaussian_mean"
        assert {args[2] for call, args in first if call == mechanism} == {batch}
    # ...and the same rate at another plan's inclusion rate moves with it, not with the members.
    other, _ = _privacy_log(name, pool, keep[0], monkeypatch, inclusion_rate=0.4)
    assert {dict(args)["sample_rate"] for call, args in other if call == "noise_multiplier_for"} == {batch / 600}


def test_dp_victims_refuse_a_batch_above_the_expected_members(pool):
    for name in ("dpsgd", "psg", "dpcgan", "dpkernel"):
        with pytest.raises(ValueError, match="--batch-size 800 exceeds the 750 members a run has on average"):
            get_victim(name)(batch_size=800).check(pool)
        get_victim(name)(batch_size=600).check(pool, inclusion_rate=0.4)
        with pytest.raises(ValueError, match="--batch-size 601 exceeds the 600 members"):
            get_victim(name)(batch_size=601).check(pool, inclusion_rate=0.4)


#: the victims whose runs pack (`victims.packed`); the others run one by one in a task of several
PACKED = {"real", "subset", "dm", "dsa", "dc", "kip", "psg"}


def test_the_packing_victims_are_the_documented_ones():
    # and `command`, whose runs pack only where its pipeline declares `batch = K` (docs/contracts.md,
    # "Batched commands"; tests/victims/test_batched_command.py)
    assert {name for name in victim_names() if hasattr(get_victim(name), "run_packed")} == PACKED | {"command"}


#: the victims whose packed runs make their releases as one computation (the others make each run's
#: release in turn, bit for bit as alone)
RELEASES_PACKED = {"psg", "dm", "dsa", "dc", "kip"}


def test_a_packed_run_equals_the_same_run_unpacked(victim, pool, keep, observed):
    """Two runs trained together give each run's own observations: its release bit for bit where
    the release is made run by run, within 1e-5 where the K releases are made as one computation
    (psg's grouped per-example gradients sum in another order: measured 1.7e-6 here and after
    the digits preset's first 8 noisy steps; dm's grouped embedding nets 8e-7 here; dsa's and
    dc's grouped gradient matching 4.8e-7; kip's batched float64 kernel and solve 0, bit for bit
    on one CPU thread, where a GPU's batched matmul need not sum as its 2-d one does), its
    downstream logits within 1e-4 (batched convolutions sum in another order; with 15 steps the
    difference measured ~4e-7) and its test accuracy within one test image."""
    if not hasattr(victim, "run_packed"):
        pytest.skip(f"{victim.name} does not pack")
    other = np.roll(keep, 1)
    alone = victim.run(pool, other, 8)
    packed = victim.run_packed(pool, np.stack([keep, other]), [7, 8])
    for one, together in zip((observed, alone), packed):
        np.testing.assert_allclose(together.logits, one.logits, rtol=0, atol=1e-4)
        assert abs(together.test_accuracy - one.test_accuracy) <= 1 / len(pool.y_test) + 1e-12
        assert np.array_equal(together.init_idx, one.init_idx)
        assert (one.release_x is None) == (together.release_x is None)
        if one.release_x is not None:
            assert np.array_equal(together.release_y, one.release_y)
            if victim.name in RELEASES_PACKED:
                np.testing.assert_allclose(together.release_x, one.release_x, rtol=0, atol=1e-5)
            else:
                assert np.array_equal(together.release_x, one.release_x)


@pytest.mark.parametrize("flip_ok", [False, True], ids=["no-flips", "flips"])
@pytest.mark.parametrize("net", [NetConfig(width=16), NetConfig(arch="mlp", width=16)], ids=["convnet", "mlp"])
def test_packed_observation_equals_observe(pool, net, flip_ok, monkeypatch):
    """`victims.packed.observe_packed` (what packed runs of real, subset and the condensation
    victims observe with) gives each of K models the Observations `victims.base.observe` gives it:
    logits within 1e-5 (the grouped layers sum in another order; the logits are of order 1), the
    test accuracy within one test image (a near-tie may tip), its own extra fields. Chunks of 100
    pool images (of 1,500; of 297 test images the last chunk holds 97), with and without the
    mirrored query views."""
    import victims.packed
    from victims.base import observe
    from victims.nets import build_net
    from victims.train import fit

    monkeypatch.setattr(victims.packed, "OBSERVE_PIXELS", 3 * 100 * 8 * 8)
    pool = dataclasses.replace(pool, flip_ok=flip_ok)
    x = torch.as_tensor((pool.x[:200] - pool.mean[0]) / pool.std[0])
    models = []
    for seed in range(3):  # briefly trained, so the logits and the accuracies differ from model to model
        torch.manual_seed(seed)
        config = TrainConfig(steps=20, net=net)
        generator = torch.Generator().manual_seed(seed)
        y = torch.tensor(pool.y[:200])
        models.append(fit(x, y, n_classes=pool.n_classes, config=config, flip_ok=flip_ok, generator=generator))
    models.append(build_net(net, image_shape=(1, 8, 8), n_classes=pool.n_classes))  # untrained
    extras = [{"init_idx": np.arange(m + 1)} for m in range(len(models))]
    together = victims.packed.observe_packed(models, pool, device="cpu", extras=extras)
    assert len(together) == len(models)
    for model, extra, packed in zip(models, extras, together):
        alone = observe(model, pool, device="cpu", **extra)
        assert packed.logits.shape == alone.logits.shape == (1500, n_queries(flip_ok=flip_ok), pool.n_classes)
        np.testing.assert_allclose(packed.logits, alone.logits, rtol=0, atol=1e-5)
        assert abs(packed.test_accuracy - alone.test_accuracy) <= 1 / len(pool.y_test) + 1e-12
        assert np.array_equal(packed.init_idx, alone.init_idx)
    assert len({round(o.test_accuracy, 6) for o in together}) > 1  # the models do differ


def test_a_task_of_runs_that_do_not_pack_stores_what_single_runs_store(pool, tmp_path, monkeypatch):
    """--runs-per-task 2 on a victim without `run_packed` (dpsgd): the executor runs a task's runs one
    after the other, and the store ends up holding exactly what one run per task stores (every array,
    the test accuracy and the accountant's epsilon, bit for bit); 3 runs make a task of 2 and one of 1."""
    import audit.executor
    from audit.executor import ExecutorConfig
    from audit.pipeline import experiment_record, train_missing_runs
    from shadow_runs import RunStore, membership_matrix

    victim = get_victim("dpsgd")(**FAST["dpsgd"])
    assert not hasattr(victim, "run_packed")
    plan = membership_matrix(pool.y, n_runs=3, master_seed=0)
    task_sizes = []
    run_victims = audit.executor.run_victims

    def counting(victim, pool, tasks, **kwargs):
        task_sizes.append(len(tasks))
        return run_victims(victim, pool, tasks, **kwargs)

    monkeypatch.setattr(audit.executor, "run_victims", counting)
    stored = {}
    for k in (1, 2):
        experiment = experiment_record(victim, pool, dataset="digits", seed=0, inclusion_rate=0.5)
        store = RunStore.open(tmp_path / f"k{k}", experiment=experiment, pool_labels=pool.y)
        store.extend_plan(plan)
        executor = ExecutorConfig(kind="inline", runs_per_task=k)
        train_missing_runs(
            store, victim=victim, pool=pool, keep=plan, seed=0, inclusion_rate=0.5, executor=executor, quiet=True
        )
        stored[k] = [store.load_run(r) for r in range(len(plan))]
    assert task_sizes == [1, 1, 1, 2, 1]
    for (one, one_meta), (task, task_meta) in zip(stored[1], stored[2]):
        assert one.keys() == task.keys() and "logits" in one
        for name in one:
            assert np.array_equal(task[name], one[name]), name
        for key in ("run", "seed", "test_accuracy", "formal_epsilon", "delta"):
            assert task_meta[key] == one_meta[key], key
        assert one_meta["formal_epsilon"] > 0
        assert "runs_in_task" not in task_meta  # recorded for runs trained together only


#: victims whose compiled runs are checked against eager ones: the compiled step is the downstream
#: ConvNet's (`victims.train.train`), which every victim but dpsgd trains; these cover a fit on
#: the members, on a real subset and on a condensed set, and the victims' own compiled steps: kip's
#: loss (`victims.pipelines.kip.kip_loss`), psg's clipped sum and synthetic-set step
#: (`victims.dp.privacy._clipped_sums`, `victims.pipelines.psg.pixel_gradient`)
COMPILED = ("real", "subset", "dm", "kip", "psg")


def one_block(config: dict) -> dict:
    """A FAST configuration with each of its ConvNets at one conv block (digits' default is 2): the
    same layers and steps, each compiled once instead of twice. With torch's compile cache cold (a
    fresh TORCHINDUCTOR_CACHE_DIR), a process making this test's eager and compiled runs took 158
    CPU-s for psg at the default depth and 93 at one block, 61 and 47 for real (user+sys under
    /usr/bin/time, inductor's compile workers and the imports included; 2026-11-29)."""
    config = dict(config)
    if "net" in config:
        config["net"] = dataclasses.replace(config["net"], depth=1)
    if "train" in config:
        config["train"] = dataclasses.replace(config["train"], net=dataclasses.replace(config["train"].net, depth=1))
    return config


@pytest.mark.parametrize("name", COMPILED)
def test_a_compiled_run_equals_the_eager_run(name, pool, keep):
    """--compile on: the same run through torch.compile gives the eager run's observations within
    float reordering: logits within 1e-3 after 15 steps (measured: 3e-7 on digits; 5e-7 for real at
    one block), test accuracy within one test image, the release bit for bit where it is made before
    the compiled step, and within 1e-4 where its own steps are compiled (kip, 5 steps: measured 6e-7,
    logits 4e-7; psg, 4 noisy steps: 1.1e-6, logits 6e-7, at one block 7e-7)."""
    from victims.compiled import compiled_steps

    victim = get_victim(name)(**one_block(FAST[name]))
    eager = victim.run(pool, keep, 7)
    with compiled_steps(True):
        compiled = victim.run(pool, keep, 7)
    np.testing.assert_allclose(compiled.logits, eager.logits, rtol=0, atol=1e-3)
    assert abs(compiled.test_accuracy - eager.test_accuracy) <= 1 / len(pool.y_test) + 1e-12
    if name in ("kip", "psg"):
        np.testing.assert_allclose(compiled.release_x, eager.release_x, rtol=0, atol=1e-4)
    elif eager.release_x is not None:
        assert np.array_equal(compiled.release_x, eager.release_x)


def test_a_compiled_pack_equals_the_eager_pack(pool, keep):
    """--compile on a pack: the grouped training step and the grouped observation pass go through
    torch.compile (`victims.packed`), so a packed run recorded `compiled` is compiled; its
    observations equal the eager pack's within float reordering (logits within 1e-3, as a compiled
    single run), test accuracy within one test image. A small MLP, 3 steps: the compilation, not
    the training, is what this costs."""
    from victims.compiled import compiled_steps

    victim = get_victim("real")(train=TrainConfig(steps=3, net=NetConfig(arch="mlp", width=8)))
    keeps, seeds = np.stack([keep, np.roll(keep, 1)]), [7, 8]
    eager = victim.run_packed(pool, keeps, seeds)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with compiled_steps(True):
        compiled = victim.run_packed(pool, keeps, seeds)
    # dynamo traced the pack's steps (the training step's and the observation pass's graphs at least)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= graphs + 2
    for one, other in zip(eager, compiled):
        np.testing.assert_allclose(other.logits, one.logits, rtol=0, atol=1e-3)
        assert abs(other.test_accuracy - one.test_accuracy) <= 1 / len(pool.y_test) + 1e-12


@pytest.mark.parametrize("name", ["dpsgd", "psg", "dpcgan", "dpkernel", "datalens"])
def test_a_dp_victim_records_the_mechanism_its_accountant_composed(name, fast_run):
    # The own-curve test (audit.stats.mechanism) checks this record: it must be the very mechanism
    # whose epsilon the run reports, so composing it again gives the recorded formal epsilon.
    from victims.dp.privacy import epsilon_spent

    obs = fast_run(name)
    mechanism = obs.mechanism
    assert set(mechanism) == {"noise_multiplier", "sample_rate", "steps"} and mechanism["noise_multiplier"] > 0
    accountant = getattr(get_victim(name)(**FAST[name]), "accountant", "rdp")
    again = epsilon_spent(**mechanism, delta=obs.delta, accountant=accountant)
    assert again == pytest.approx(obs.formal_epsilon, rel=1e-9)
    assert (mechanism["sample_rate"] == 1.0) == (name == "datalens")  # DataLens' steps are not subsampled
