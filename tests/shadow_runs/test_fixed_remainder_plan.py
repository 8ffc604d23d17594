"""The plan `fixed-remainder-v1` (shadow_runs/plan.py): every natural record in every run, the
canaries by the coins they have under independent coins; its public rate; its store's name."""

import json

import numpy as np
import pytest

from shadow_runs.plan import (
    FIXED_REMAINDER,
    INDEPENDENT,
    PLANS,
    membership_matrix,
    natural_coins,
    public_inclusion_rate,
)
from shadow_runs.records import record_of_row
from shadow_runs.store import RunStore, StoreError, experiment_id
from victims.canaries import CanaryConfig


def test_a_tiny_plan_by_hand_natural_columns_in_and_the_canaries_coins_unchanged():
    # 3 natural records, 2 canaries, 4 runs, seed 0: the independent plan's coins (drawn once and read
    # off here), then the same with the natural columns set True
    record = record_of_row(3, CanaryConfig(n=2, kind="outlier"))
    independent = membership_matrix(np.zeros(5), n_runs=4, master_seed=0, record_of_row=record)
    fixed = membership_matrix(
        np.zeros(5), n_runs=4, master_seed=0, record_of_row=record, plan=FIXED_REMAINDER, n_natural=3
    )
    assert independent.astype(int).tolist() == [[0, 1, 1, 1, 0], [1, 1, 0, 1, 1], [0, 1, 0, 0, 0], [0, 1, 1, 0, 1]]
    assert fixed.astype(int).tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 0, 1]]


@pytest.mark.parametrize("config", [CanaryConfig(n=30, kind="mislabeled"), CanaryConfig(n=12, kind="duplicate")])
def test_the_canaries_coins_are_those_of_independent_coins_and_the_plan_grows_by_prefix(config):
    n_natural = 200
    record = record_of_row(n_natural, config)
    labels = np.zeros(len(record))
    independent = membership_matrix(labels, n_runs=16, master_seed=7, record_of_row=record)
    fixed = membership_matrix(
        labels, n_runs=16, master_seed=7, record_of_row=record, plan=FIXED_REMAINDER, n_natural=n_natural
    )
    assert fixed[:, :n_natural].all()
    assert np.array_equal(fixed[:, n_natural:], independent[:, n_natural:])  # a duplicate's rows share its coin
    fewer = membership_matrix(
        labels, n_runs=5, master_seed=7, record_of_row=record, plan=FIXED_REMAINDER, n_natural=n_natural
    )
    assert np.array_equal(fewer, fixed[:5])


def test_the_fixed_remainder_needs_canaries_and_the_plans_are_named():
    assert PLANS == {"independent": INDEPENDENT, "fixed-remainder": FIXED_REMAINDER}
    assert natural_coins(INDEPENDENT) and not natural_coins(FIXED_REMAINDER)
    with pytest.raises(ValueError, match="needs canary records"):
        membership_matrix(np.zeros(5), n_runs=2, master_seed=0, plan=FIXED_REMAINDER, n_natural=5)
    with pytest.raises(ValueError, match="needs canary records"):
        membership_matrix(np.zeros(5), n_runs=2, master_seed=0, plan=FIXED_REMAINDER)
    with pytest.raises(ValueError, match="'stratified"):
        natural_coins("stratified-complement-pairs-v1")


@pytest.mark.parametrize(
    "q,n_natural,n_pool,count",
    [
        (0.5, 5000, 5004, 5002.0),  # fair with 4 canaries: 5,000 natural rows and half the canaries
        (0.5, 1500, 1550, 1525.0),  # digits with 50 canaries
        (0.1, 1000, 5000, 1400.0000000000002),  # no float rate gives 1,400 of 5,000 rows exactly: one unit off
        (0.3, 100, 150, 115.00000000000001),  # nor 115 of 150
    ],
)
def test_the_public_rate_makes_the_expected_member_count_what_victims_calibrate_to(q, n_natural, n_pool, count):
    rate = public_inclusion_rate(q, plan=FIXED_REMAINDER, n_natural=n_natural, n_pool=n_pool)
    assert type(rate) is float and rate * n_pool == count  # victims.base.expected_members
    assert public_inclusion_rate(q, plan=INDEPENDENT, n_natural=n_natural, n_pool=n_pool) == q


EXPERIMENT = {
    "victim": "real",
    "dataset": "digits",
    "dataset_fingerprint": "0123456789abcdef",
    "config": {"train": {"steps": 3}},
    "n_pool": 6,
    "master_seed": 0,
    "plan": INDEPENDENT,
    "inclusion_rate": 0.5,
    "canaries": CanaryConfig(n=2).entry(4),
}
LABELS = np.array([0, 1, 0, 1, 1, 0])


def test_the_plan_joins_the_name_only_for_the_fixed_remainder(tmp_path):
    # independent coins keep the name they had when the plan was never hashed (canaries' pinned name too)
    assert experiment_id(EXPERIMENT) == experiment_id({**EXPERIMENT, "plan": "p"})
    fixed = {**EXPERIMENT, "plan": FIXED_REMAINDER}
    assert experiment_id(fixed) != experiment_id(EXPERIMENT)
    one = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    other = RunStore.open(tmp_path, experiment=fixed, pool_labels=LABELS)
    assert one.root != other.root
    assert json.loads((other.root / "experiment.json").read_text())["plan"] == FIXED_REMAINDER
    # a store under the fixed remainder's name that holds another plan is refused, naming it
    (other.root / "experiment.json").write_text(json.dumps(EXPERIMENT))
    with pytest.raises(StoreError, match="was made with membership plan 'independent-coins-v1', not 'fixed-rem"):
        RunStore.open(tmp_path, experiment=fixed, pool_labels=LABELS)
