import pytest
from opacus.accountants import RDPAccountant

from victims.dp.privacy import epsilon_spent, noise_multiplier_for


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_noise_multiplier_spends_the_target_epsilon(epsilon):
    q, steps, delta = 0.1, 300, 1e-5
    sigma = noise_multiplier_for(epsilon=epsilon, delta=delta, sample_rate=q, steps=steps)
    spent = epsilon_spent(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=delta)
    # opacus searches sigma to epsilon_tolerance 0.01 from below the target.
    assert epsilon - 0.01 <= spent <= epsilon
    # The same numbers from opacus's own accountant, stepped one step at a time.
    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    assert acc.get_epsilon(delta) == pytest.approx(spent, rel=1e-9)


def test_more_noise_spends_less():
    kwargs = {"sample_rate": 0.05, "steps": 100, "delta": 1e-5}
    assert epsilon_spent(noise_multiplier=2.0, **kwargs) < epsilon_spent(noise_multiplier=1.0, **kwargs)


def test_prv_accountant_is_available_and_close_to_rdp():
    kwargs = {"noise_multiplier": 1.0, "sample_rate": 0.05, "steps": 200, "delta": 1e-5}
    rdp, prv = epsilon_spent(**kwargs), epsilon_spent(accountant="prv", **kwargs)
    assert 0 < prv <= rdp * 1.05  # PRV is the tighter accountant (RDP's conversion loses a little)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"epsilon": 0.0}, "epsilon must be > 0, got 0.0"),
        ({"delta": 1.0}, r"delta must be in \(0, 1\), got 1.0"),
        ({"sample_rate": 0.0}, r"sample_rate must be in \(0, 1\], got 0.0"),
        ({"accountant": "gdp2"}, "'gdp2'"),
    ],
)
def test_bad_values_are_named(kwargs, message):
    args = {"epsilon": 1.0, "delta": 1e-5, "sample_rate": 0.1, "steps": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        noise_multiplier_for(**args)
