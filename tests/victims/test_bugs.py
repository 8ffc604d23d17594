"""The accounting bugs of victims/bugs.py record what their accountant was told: the claimed ε and the
claimed mechanism (`Observations.mechanism`, the curve the own-curve test checks), while training
spends more. The audits that must flag them: tests/end_to_end/test_whitebox_audits.py."""

import pytest

from victims.bugs import HalfRateAccountant, OneEpochAccountant
from victims.pipelines.dpsgd import DPSGDVictim
from victims.nets import NetConfig
from victims.privacy import epsilon_spent

SMALL = {"epochs": 3, "net": NetConfig(width=16)}  # 3 * round(750 / 128) = 18 steps at q = 128 / 750


@pytest.mark.parametrize("bug", [HalfRateAccountant, OneEpochAccountant])
def test_an_accounting_bug_records_the_claim_while_training_spends_more(pool, keep, bug):
    victim = bug(**SMALL)
    told, trained = victim.privacy(pool), DPSGDVictim(**SMALL).privacy(pool)
    assert (told.sample_rate, told.steps) == (trained.sample_rate, trained.steps) == (128 / 750, 18)
    obs = victim.run(pool, keep, 1)
    claimed = obs.mechanism
    # the claim: the told figures, which spend epsilon 1 (opacus's search tolerance 0.01)
    expected = (trained.sample_rate / 2, 18) if bug is HalfRateAccountant else (trained.sample_rate, 6)
    assert (claimed["sample_rate"], claimed["steps"]) == pytest.approx(expected)
    assert claimed["noise_multiplier"] == told.noise_multiplier < trained.noise_multiplier
    assert 0.99 <= obs.formal_epsilon <= 1.0
    # what was trained: 18 steps at the true rate with the smaller sigma spend more than the claim
    truth = epsilon_spent(noise_multiplier=told.noise_multiplier, sample_rate=trained.sample_rate, steps=18, delta=1e-5)
    assert truth > 1.3
