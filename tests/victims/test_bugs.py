"""The catalogue of DP bugs (`victims.bugs.BUGS`) is the one list of them: every bug class is in it,
loads by its path, breaks a built-in twin, and has its rows in bench/dp_bugs.py and on its page.
The accounting bugs of victims/bugs.py record what their accountant was told: the claimed ε and the
claimed mechanism (`Observations.mechanism`, the curve the own-curve test checks), while training
spends more. The audits that must flag them: tests/end_to_end/test_whitebox_audits.py."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from victims import get_victim, victim_names
from victims import bugs
from victims.bugs import BUGS, HalfRateAccountant, OneEpochAccountant, path_of, twin_of
from victims.pipelines.dpsgd import DPSGDVictim
from victims.nets import NetConfig
from victims.dp.privacy import epsilon_spent

SMALL = {"epochs": 3, "net": NetConfig(width=16)}  # 3 * round(750 / 128) = 18 steps at q = 128 / 750
ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "white-box.md"


def test_every_bug_class_is_in_the_catalogue_and_loads_by_its_path():
    classes = {c for c in vars(bugs).values() if dataclasses.is_dataclass(c) and c.__module__ == bugs.__name__}
    assert classes == set(BUGS.values()) and list(BUGS) == sorted(BUGS)
    for label, bug in BUGS.items():
        assert bug.bug_label == label and bug.bug_what
        assert twin_of(bug) in victim_names() and issubclass(bug, get_victim(twin_of(bug)))
        assert get_victim(path_of(bug)) is bug


def test_the_catalogue_page_measures_only_bugs_of_the_catalogue():
    """The page's rows are measurements of catalogue bugs (today every one); a new bug joins it once measured."""
    section = PAGE.read_text().split("## The catalogue of bugs", 1)[1]
    labels = set(re.findall(r"^\| ([a-z])(?: \||:)", section, re.M))
    assert labels and labels <= set(BUGS)


def test_the_benchmark_audits_every_bug_of_the_catalogue():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "dp_bugs.py"), "--help"], env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    rows = re.search(r"--rows \{([^}]*)\}", shown.stdout).group(1).split(",")
    assert rows[: len(BUGS)] == list(BUGS)
    for label, bug in BUGS.items():
        assert re.search(rf"^  {label}  {path_of(bug)} +{re.escape(bug.bug_what)}$", shown.stdout, re.M)


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
