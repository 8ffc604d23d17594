"""Fields a preset fills, at construction (`victims.presets`): psg's and the condensation
victims' configurations, and so their stores' identities, are those the code gave before the
hook, when `__post_init__` set them with object.__setattr__."""

import hashlib
import json
from dataclasses import dataclass, replace

import pytest

from shadow_runs.store import experiment_id
from victims import get_victim, victim_config
from victims.overrides import build_victim
from victims.pipelines.dsa import DCVictim, DSAVictim
from victims.pipelines.psg import PSGVictim, digits_values, faithful_values

#: victim, flags -> (sha256 of victim_config as sorted JSON, first 16 hex; the store's directory
#: name on a fixed record), computed by the code before the hook (commit 49ca377, running
#: victims.overrides.build_victim): a store made then keeps its name and its configuration
PINNED = {
    ("psg", ()): ("e417ed1d3bf37146", "psg-digits-b9ff9e8b9e"),
    ("psg", (("preset", "faithful"),)): ("e6a74cc5386f76e6", "psg-digits-1dd1c0f442"),
    (
        "psg",
        (("preset", "paper"), ("epsilon", 1.0), ("spc", 20), ("restarts", 7)),
    ): ("dc30e93313f070b8", "psg-digits-4929be4170"),
    ("psg", (("prior", True), ("lr_images", 3.0), ("train__steps", 50))): ("e168932a75a1b25a", "psg-digits-aef9b638e9"),
    ("dm", ()): ("c5a75377f0b85bd1", "dm-digits-6e812a9815"),
    ("dm", (("preset", "paper"),)): ("f493480737240063", "dm-digits-bf0022ecad"),
    ("dsa", ()): ("8f42eb44eb1d122a", "dsa-digits-42cec25888"),
    ("dc", (("preset", "paper"),)): ("9cb5c7eff790d96a", "dc-digits-52d3eeeb87"),
    ("kip", ()): ("d764c7806ff7f0f7", "kip-digits-43a592c3db"),
}


@pytest.mark.parametrize("name,flags", sorted(PINNED))
def test_a_preset_filled_at_construction_keeps_the_configuration_and_store_name_of_before(name, flags):
    config = victim_config(build_victim(name, dict(flags)))
    experiment = {
        "victim": name,
        "dataset": "digits",
        "dataset_fingerprint": "0123456789abcdef",
        "config": config,
        "n_pool": 1437,
        "master_seed": 0,
        "plan": "independent-coins-v1",
        "inclusion_rate": 0.5,
    }
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    assert (digest, experiment_id(experiment)) == PINNED[name, flags]


def test_the_hook_gives_what_writing_the_values_out_gives():
    assert PSGVictim() == PSGVictim(**digits_values(epsilon=10.0, spc=10)) == PSGVictim(restarts=None)
    faithful = PSGVictim(preset="faithful", epsilon=1.0)
    assert faithful == PSGVictim(preset="faithful", epsilon=1.0, **faithful_values(epsilon=1.0, spc=10))
    assert DSAVictim(ipc=20, preset="paper").outer == 20 and DCVictim(preset="paper").iterations == 1000
    assert get_victim("kip")(preset="paper", depth=2).depth == 2  # a given value is kept


def test_replace_keeps_the_values_held_and_fills_a_none_again():
    faithful = PSGVictim(preset="faithful")
    assert replace(faithful, epsilon=2.0).restarts == 64
    assert replace(PSGVictim(), restarts=None, preset="faithful").restarts == 64


def test_a_refused_preset_or_size_is_named_not_a_lookup_error():
    with pytest.raises(ValueError, match="--preset cifar is not available for dsa"):
        DSAVictim(preset="cifar")
    with pytest.raises(ValueError, match="--ipc must be >= 1, got 0"):
        DSAVictim(preset="paper", ipc=0)
    with pytest.raises(ValueError, match="--spc must be >= 1, got 0"):
        PSGVictim(preset="paper", spc=0)


def test_a_subclass_without_the_hook_is_refused_by_the_field_it_left_empty():
    @dataclass(frozen=True)
    class WithoutTheHook(PSGVictim):  # a dataclass of its own has its own __init__
        pass

    with pytest.raises(ValueError, match="--restarts has no value: WithoutTheHook lacks its preset hook"):
        WithoutTheHook()
