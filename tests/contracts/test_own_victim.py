"""A user's own pipeline: the documented minimal victim (docs/contracts.md, "Your own victim"), run
from a file outside the package by path
(`--victim my_victim:SoftmaxRegression`) and as an installed plugin (an entry point), and the
one-line refusals of paths and classes that do not fit."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from audit import lira
from victims import get_victim, victim_names
from victims.base import PLUGIN_GROUP

CONTRACTS = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"


def readme_victim() -> str:
    """The first python block of docs/contracts.md's "Your own victim" section."""
    section = CONTRACTS.read_text().split("### Your own victim", 1)[1].split("\n### ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A directory outside the package holding the README's victim, a broken one, and the metadata
    of an installed distribution that names the README's victim in the plugin entry-point group."""
    where = tmp_path / "site"
    where.mkdir()
    (where / "my_victim.py").write_text(readme_victim())
    (where / "broken_victims.py").write_text(
        "from dataclasses import dataclass\n\n"
        "class NotADataclass:\n    name = 'x'\n\n"
        "@dataclass(frozen=True)\nclass NoRun:\n    name = 'no-run'\n"
        "    def check(self, pool, *, inclusion_rate=0.5):\n        pass\n\n"
        "@dataclass(frozen=True)\nclass TakenName:\n    name = 'real'\n"
        "    def check(self, pool, *, inclusion_rate=0.5):\n        pass\n"
        "    def run(self, pool, keep, seed, *, device='cpu', inclusion_rate=0.5):\n        pass\n\n"
        "@dataclass(frozen=True)\nclass OldRun:\n    name = 'old-run'\n"
        "    def check(self, pool, *, inclusion_rate=0.5):\n        pass\n"
        "    def run(self, pool, keep, seed):\n        pass\n"
    )
    info = where / "my_victim_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-victim-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\nsoftmax-regression = my_victim:SoftmaxRegression\n")
    monkeypatch.syspath_prepend(str(where))
    return where


def run_audit(where: Path, runs_dir: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "audit.lira", "--runs-dir", str(runs_dir), "--executor", "inline", "--quiet", *flags],
        env=env,
        capture_output=True,
        text=True,
    )


def audit_in_process(runs_dir: Path, *flags: str) -> int:
    return lira.main(["--runs-dir", str(runs_dir), "--executor", "inline", "--quiet", *flags])


def test_the_readme_victim_is_audited_end_to_end_from_a_file_outside_the_package(
    plugin_dir, tmp_path, capsys, monkeypatch
):
    # 4 runs (the fewest the attacks need), not 6: 1.3 CPU-s less in the subprocess alone; what is asserted is
    # the design's arithmetic, each run's accuracy and the store's identity, not an attack's power
    flags = ("--victim", "my_victim:SoftmaxRegression", "--n-shadow", "4", "--inverse-regularisation", "0.5")
    done = run_audit(plugin_dir, tmp_path / "runs", *flags)
    assert done.returncode == 0, done.stderr
    (root,) = (tmp_path / "runs").iterdir()
    assert root.name.startswith("softmax-regression-digits-")
    summary = json.loads((root / "audit" / "summary.json").read_text())
    experiment = json.loads((root / "experiment.json").read_text())
    assert experiment["victim"] == "softmax-regression"
    assert experiment["config"] == {"inverse_regularisation": 0.5, "max_iter": 300}  # its fields are its flags
    assert summary["utility"]["test_accuracy"] > 0.9  # logistic regression on digits: 0.951 (sd 0.006 over 4 runs)
    assert {"loss", "lira_online", "lira_offline", "rmia", "rmia_offline"} <= set(summary["attacks"])
    assert summary["evaluation"]["n_canaries"] == 2 * 1500  # 2 targets of 4 runs, every example a canary
    recorded = experiment["victim_source"]
    assert recorded["modules"] == ["my_victim"] and len(recorded["sha256"]) == 64  # the plugin's own module
    # Changed code: the store of the old code's runs is refused, naming both hashes and the way to keep them.
    # These reruns are in this process (the entry point's run above is the subject), importing this
    # test's my_victim.py, not one an earlier test of this process imported from its own directory.
    monkeypatch.delitem(sys.modules, "my_victim", raising=False)
    source = plugin_dir / "my_victim.py"
    source.write_text(source.read_text() + "\n# changed\n")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as refused:
        audit_in_process(tmp_path / "runs", *flags)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1, err
    assert f"source {recorded['sha256'][:12]}, this code " in err
    assert "--keep-runs-of-other-code" in err
    assert before == {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert audit_in_process(tmp_path / "runs", *flags, "--keep-runs-of-other-code") == 0
    assert (
        json.loads((root / "experiment.json").read_text())["earlier_victim_sources"][0]["sha256"]
        == (recorded["sha256"])
    )
    assert audit_in_process(tmp_path / "runs", *flags) == 0  # the same code again: accepted


def test_an_installed_plugin_is_found_by_its_entry_point_name(plugin_dir):
    assert "softmax-regression" in victim_names()
    cls = get_victim("softmax-regression")
    assert cls.__name__ == "SoftmaxRegression" and cls.name == "softmax-regression"


def test_an_installed_plugin_runs_under_its_name(plugin_dir, tmp_path):
    assert (
        audit_in_process(tmp_path / "runs", "--victim", "softmax-regression", "--n-shadow", "4", "--max-iter", "50")
        == 0
    )
    (root,) = (tmp_path / "runs").iterdir()
    assert json.loads((root / "experiment.json").read_text())["config"]["max_iter"] == 50


@pytest.mark.parametrize(
    "victim, named",
    [
        ("no_such_module:Victim", "cannot import 'no_such_module' (ModuleNotFoundError"),
        ("my_victim:Nope", "module 'my_victim' has no 'Nope'"),
        ("my_victim", "unknown victim 'my_victim'"),
        ("broken_victims:NotADataclass", "NotADataclass does not follow the victim protocol: not a dataclass"),
        ("broken_victims:NoRun", "NoRun does not follow the victim protocol: no `run` method"),
        ("broken_victims:TakenName", "its name 'real' is a built-in victim's"),
        ("broken_victims:OldRun", "`run` cannot be called as run(pool, keep, seed, device='cpu', inclusion_rate=0.5)"),
    ],
)
def test_a_victim_that_does_not_fit_exits_2_with_one_line(plugin_dir, tmp_path, capsys, victim, named):
    with pytest.raises(SystemExit) as exit_:
        audit_in_process(tmp_path / "runs", "--victim", victim, "--n-shadow", "4")
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and named in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_a_flag_of_another_victim_is_refused_for_the_plugin(plugin_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        audit_in_process(tmp_path / "runs", "--victim", "my_victim:SoftmaxRegression", "--n-shadow", "4", "--ipc", "10")
    assert exit_.value.code == 2
    assert "--ipc does not apply to victim 'my_victim:SoftmaxRegression'" in capsys.readouterr().err
