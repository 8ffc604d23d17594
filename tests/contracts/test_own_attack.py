"""An attack of your own: the documented one (docs/contracts.md, "Your own attack"), run from a
file outside the package by path (`--attack my_attack:mean_confidence`) and as an installed plugin
(an entry point, which every audit of its family then runs), and the one-line refusals of paths and
objects that are no attack."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from attacks.registry import ATTACK_GROUP, attack_names, get_attack
from audit import lira, loss
from tests.tiny_audits import TINY

CONTRACTS = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"
REAL = ["--victim", "real", "--n-shadow", "4", *TINY]


def documented_attack() -> str:
    """The python block of docs/contracts.md's "Your own attack" section."""
    section = CONTRACTS.read_text().split("### Your own attack", 1)[1].split("\n### ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def attack_dir(tmp_path, monkeypatch):
    """A directory outside the package holding the documented attack and broken ones."""
    where = tmp_path / "site"
    where.mkdir()
    (where / "my_attack.py").write_text(documented_attack())
    (where / "broken_attacks.py").write_text(
        "from attacks.registry import attack\n\n"
        "def plain(runs, targets, shadows, variance):\n    return runs.loss[targets]\n\n"
        "@attack(family='model', min_runs=1, calibrated=False, about='x')\n"
        "def loss(runs, targets, shadows, variance):\n    return runs.loss[targets]\n\n"
        "@attack(family='weights', min_runs=1, calibrated=False, about='x')\n"
        "def weights(runs, targets, shadows, variance):\n    return runs.loss[targets]\n\n"
        "@attack(family='model', min_runs=1, calibrated=False, about='x')\n"
        "def two_arguments(runs, targets):\n    return runs.loss[targets]\n"
    )
    monkeypatch.syspath_prepend(str(where))
    return where


@pytest.fixture
def installed(attack_dir):
    """The documented attack named in the entry-point group by an installed distribution's metadata."""
    info = attack_dir / "my_attack_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-attack-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ATTACK_GROUP}]\nmean_confidence = my_attack:mean_confidence\n")
    return attack_dir


def audited(main, runs_dir: Path, *flags: str) -> dict:
    assert main(["--runs-dir", str(runs_dir), *REAL, *flags]) == 0
    (root,) = runs_dir.iterdir()
    return json.loads((root / "audit" / "summary.json").read_text())


def test_the_documented_attack_is_audited_end_to_end_by_its_path(attack_dir, tmp_path):
    assert "mean_confidence" not in attack_names()  # not installed: only --attack runs it
    summary = audited(loss.main, tmp_path / "runs", "--attack", "my_attack:mean_confidence")
    assert list(summary["attacks"]) == ["loss", "mean_confidence"]
    entry, baseline = summary["attacks"]["mean_confidence"], summary["attacks"]["loss"]
    assert 0.0 <= entry["auc"] <= 1.0 and isinstance(entry["eps_lower"], float)
    assert (entry["n_members"], entry["n_nonmembers"]) == (baseline["n_members"], baseline["n_nonmembers"])
    scores = np.load(next((tmp_path / "runs").iterdir()) / "audit" / "scores.npz")
    assert "mean_confidence" in scores.files


def test_an_installed_attack_runs_in_every_audit_of_its_family(installed, tmp_path):
    assert attack_names("model")[-1] == "mean_confidence" and "mean_confidence" not in attack_names("generator")
    assert get_attack("mean_confidence").about == "the target's mean logit-scaled confidence"
    by_name = audited(loss.main, tmp_path / "runs", "--attack", "mean_confidence")
    assert list(by_name["attacks"]) == ["loss", "mean_confidence"]
    assert list(audited(lira.main, tmp_path / "runs")["attacks"])[-1] == "mean_confidence"  # no --attack needed


@pytest.mark.parametrize(
    "spec, named",
    [
        ("no_such_module:f", "cannot import 'no_such_module' (ModuleNotFoundError"),
        ("my_attack:nope", "module 'my_attack' has no 'nope'"),
        ("mean_confidenc", "unknown attack 'mean_confidenc'"),
        ("lira_onlin", "did you mean 'lira_online'?"),
        ("broken_attacks:plain", "not an Attack (decorate its score function with attacks.registry.attack)"),
        ("broken_attacks:loss", "its name 'loss' is a built-in attack's"),
        ("broken_attacks:weights", "its family 'weights' is none of model, release, generator, mechanism"),
        ("broken_attacks:two_arguments", "its score cannot be called as score(runs, targets, shadows, variance)"),
    ],
)
def test_an_attack_that_does_not_fit_exits_2_with_one_line(attack_dir, tmp_path, capsys, spec, named):
    with pytest.raises(SystemExit) as exit_:
        loss.main(["--runs-dir", str(tmp_path / "runs"), *REAL, "--attack", spec])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and named in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()
