"""dpsgd's worst-case black-box options (victims/pipelines/dpsgd.py): full-batch noisy gradient descent is T
Gaussian steps at rate 1 with public parameters, and the pretrained start is one network fitted to
the public test split only. The audit that uses them: tests/end_to_end/test_whitebox_audits.py."""

import dataclasses

import numpy as np
import pytest
import torch

from victims.base import victim_config
from victims.pool import make_pool
from victims.pipelines.dpsgd import DPSGDVictim, pretrained_start
from victims.nets import NetConfig, build_net
from victims.dp.privacy import noise_multiplier_for
from victims.train import predict_queries, to_model_space

SMALL = NetConfig(width=16)


def test_full_batch_is_a_gaussian_mechanism_at_rate_one_over_the_expected_members(pool):
    victim = DPSGDVictim(sampling="full-batch", epochs=4, epsilon=10.0, net=SMALL, batch_size=800)
    victim.check(pool)  # --batch-size is unused: 800 above the 750 expected members is no error
    plan = victim.privacy(pool)
    # q = 1, one step per epoch, the noisy sum divided by q * n_pool = 0.5 * 1500 = 750
    assert (plan.sample_rate, plan.steps, plan.batch_divisor) == (1.0, 4, 750)
    assert plan.noise_multiplier == noise_multiplier_for(epsilon=10.0, delta=1e-5, sample_rate=1.0, steps=4)
    batches = list(victim.batches(5, plan, generator=torch.Generator().manual_seed(0)))
    assert len(batches) == 4 and all(b.tolist() == [0, 1, 2, 3, 4] for b in batches)
    assert plan.mechanism() == {"noise_multiplier": plan.noise_multiplier, "sample_rate": 1.0, "steps": 4}


def test_the_pretrained_start_is_fitted_to_the_public_split_alone(pool):
    start = pretrained_start(SMALL, pool, 60)
    assert all(torch.equal(start[k], v) for k, v in pretrained_start(SMALL, pool, 60).items())
    # another pool with the same test split but other training rows (another fingerprint) gets the same start
    other = make_pool(
        pool.name, pool.x[::-1].copy(), pool.y[::-1].copy(), pool.x_test, pool.y_test, pool.classes, False
    )
    other = dataclasses.replace(other, mean=pool.mean, std=pool.std)
    assert other.fingerprint != pool.fingerprint
    assert all(torch.equal(start[k], v) for k, v in pretrained_start(SMALL, other, 60).items())
    net = build_net(SMALL, image_shape=pool.image_shape, n_classes=pool.n_classes)
    net.load_state_dict(start)
    x_test = to_model_space(pool.x_test, mean=pool.mean, std=pool.std)
    fitted = (net.eval()(x_test).argmax(1).numpy() == pool.y_test).mean()
    assert fitted > 0.9  # 60 full-batch Adam steps fit the 297 public digits (a random net: ~0.1)


def test_a_pretrained_run_starts_from_the_public_start(pool, keep):
    # with a learning rate of 0 the run's model is its start: every run sees the same logits
    victim = DPSGDVictim(sampling="full-batch", start="pretrained", pretrain_steps=60, epochs=2, lr=0.0, net=SMALL)
    net = build_net(SMALL, image_shape=pool.image_shape, n_classes=pool.n_classes)
    net.load_state_dict(pretrained_start(SMALL, pool, 60))
    expected = predict_queries(net.eval(), to_model_space(pool.x, mean=pool.mean, std=pool.std), flip_ok=False)
    for seed in (1, 2):
        np.testing.assert_allclose(victim.run(pool, keep, seed).logits, expected, atol=1e-5)


def test_the_default_configuration_and_so_old_stores_keep_their_identity():
    assert not {"sampling", "start", "pretrain_steps"} & set(victim_config(DPSGDVictim()))
    config = victim_config(DPSGDVictim(sampling="full-batch", start="pretrained"))
    assert (config["sampling"], config["start"], "pretrain_steps" in config) == ("full-batch", "pretrained", False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sampling": "uniform"}, "--sampling must be one of"),
        ({"start": "public"}, "--start must be one of"),
        ({"pretrain_steps": 0}, "--pretrain-steps must be >= 1, got 0"),
    ],
)
def test_bad_options_name_the_value(fields, message):
    with pytest.raises(ValueError, match=message):
        DPSGDVictim(**fields)


def test_the_pretrained_start_is_fitted_once_per_store_and_refused_when_its_file_changed(pool, keep, tmp_path):
    import victims.pipelines.dpsgd as dpsgd

    victim = DPSGDVictim(sampling="full-batch", start="pretrained", pretrain_steps=20, epochs=2, lr=0.0, net=SMALL)
    prepared = victim.prepare(pool, tmp_path, quiet=True)
    (cached,) = (tmp_path / dpsgd.START_CACHE).glob("pretrained_start-*.pt")
    # the start it carries is the one every worker would fit, bit for bit
    fitted = pretrained_start(SMALL, pool, 20)
    assert all(torch.equal(prepared._start_state[k], v) for k, v in fitted.items())
    assert prepared == victim  # the configuration (and so the store's identity) is unchanged
    # prepared again (another command on the same store): read back, not fitted
    real_fit, dpsgd._fit_start = dpsgd._fit_start, None  # calling it would fail
    try:
        again = victim.prepare(pool, tmp_path, quiet=True)
    finally:
        dpsgd._fit_start = real_fit
    assert all(torch.equal(again._start_state[k], v) for k, v in fitted.items())
    # a run of the prepared victim is the run of the victim that fits its own start
    one, other = prepared.run(pool, keep, 3), victim.run(pool, keep, 3)
    assert np.array_equal(one.logits, other.logits)
    # a start file changed on disk is refused, naming it
    cached.write_bytes(cached.read_bytes() + b"\0")
    with pytest.raises(ValueError, match=r"pretrained_start-.*\.pt: sha256 .* is not the .* recorded"):
        victim.prepare(pool, tmp_path, quiet=True)
    # a random start needs nothing: the victim itself
    random_start = DPSGDVictim(net=SMALL)
    assert random_start.prepare(pool, tmp_path / "other", quiet=True) is random_start
    assert not (tmp_path / "other").exists()


def test_a_store_takes_a_sibling_stores_start_and_fits_only_where_none_matches(pool, tmp_path):
    import victims.pipelines.dpsgd as dpsgd

    victim = DPSGDVictim(sampling="full-batch", start="pretrained", pretrain_steps=20, epochs=2, lr=0.0, net=SMALL)
    victim.prepare(pool, tmp_path / "seed0", quiet=True)  # fitted in the first store
    (first,) = (tmp_path / "seed0" / dpsgd.START_CACHE).glob("pretrained_start-*.pt")
    real_fit, dpsgd._fit_start = dpsgd._fit_start, None  # calling it would fail
    try:
        replicate = victim.prepare(pool, tmp_path / "seed1", quiet=True)  # another store of the runs directory
    finally:
        dpsgd._fit_start = real_fit
    (copied,) = (tmp_path / "seed1" / dpsgd.START_CACHE).glob("pretrained_start-*.pt")
    assert copied.name == first.name and copied.read_bytes() == first.read_bytes()
    fitted = pretrained_start(SMALL, pool, 20)
    assert all(torch.equal(replicate._start_state[k], v) for k, v in fitted.items())
    # a sibling whose file no longer matches its sha256 is passed over: the start is fitted again
    first.write_bytes(first.read_bytes() + b"\0")
    again = victim.prepare(pool, tmp_path / "seed2", quiet=True)
    assert all(torch.equal(again._start_state[k], v) for k, v in fitted.items())
    # another network is another key: nothing to take
    wider = dataclasses.replace(victim, net=dataclasses.replace(SMALL, width=SMALL.width * 2))
    wider.prepare(pool, tmp_path / "seed3", quiet=True)
    (own,) = (tmp_path / "seed3" / dpsgd.START_CACHE).glob("pretrained_start-*.pt")
    assert own.name != first.name
