"""`--plan fixed-remainder` through the audit commands (docs/contracts.md, "Membership plan"): its
refusals, an audit of the fair table and one of digits end to end, the expected member count a
command pipeline is handed, and an audit in rounds."""

import json
import sys
import textwrap

import numpy as np
import pytest

from audit import ganleak, lira, loss
from audit.cli import release_command
from audit.experiment import ExperimentError
from audit.reporting.build import Settings, build_report
from audit.results import load_audited, load_experiment
from shadow_runs.plan import membership_matrix
from shadow_runs.records import record_of_row
from shadow_runs.store import experiment_id
from victims.canaries import CanaryConfig

QUICK = ["--executor", "inline", "--quiet"]
TABLE = ["--dataset", "fair", "--classifier-iterations", "10", *QUICK]  # with tabular-subset also --rows 300
FIXED = ["--plan", "fixed-remainder"]
NATURAL_NOTE = "not testable: every natural record is a member of every run"


def only_store(runs_dir):
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return root


def independent_canary_coins(n_natural: int, config: CanaryConfig, n_runs: int) -> np.ndarray:
    """The canaries' columns of the independent plan of seed 0, which the fixed remainder keeps."""
    record = record_of_row(n_natural, config)
    return membership_matrix(np.zeros(len(record)), n_runs=n_runs, master_seed=0, record_of_row=record)[:, n_natural:]


@pytest.mark.parametrize(
    "main,flags,named",
    [
        (lira.main, ["--victim", "real", *FIXED], "error: --plan fixed-remainder needs --canaries N"),
        (
            lira.main,
            ["--victim", "real", "--canaries", "0", *FIXED],
            "error: --plan fixed-remainder needs --canaries N",
        ),
        (loss.main, ["--victim", "real", *FIXED], "error: --plan fixed-remainder needs --canaries N"),
        (ganleak.main, ["--victim", "cgan", *FIXED], "error: --plan fixed-remainder needs --canaries N"),
        (
            lira.main,
            ["--victim", "real", "--canaries", "4", "--plan", "fixed"],
            "argument --plan: invalid choice: 'fixed' (choose from 'independent', 'fixed-remainder')",
        ),
        # the plan guard still applies: 2 targets x 1 canary draw 1 IN and 1 OUT coin (those of independent coins)
        (
            lira.main,
            ["--victim", "real", "--canaries", "1", *FIXED],
            "--canaries 1 over 2 target runs draws 1 IN and 1 OUT canary coins; the canary group needs at least 2",
        ),
    ],
)
def test_a_plan_that_cannot_be_drawn_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys, main, flags, named):
    with pytest.raises(SystemExit) as exit_info:
        main(["--runs-dir", str(tmp_path / "runs"), "--n-shadow", "4", *flags, "--train-steps", "10", *QUICK])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def test_a_release_audit_takes_no_plan(capsys):
    with pytest.raises(SystemExit) as exit_info:
        release_command.main(["--victim", "real", "--plan", "fixed-remainder"])
    assert exit_info.value.code == 2 and "unrecognized arguments: --plan fixed-remainder" in capsys.readouterr().err


def test_an_audit_of_fair_with_a_fixed_remainder_holds_every_natural_record_in_every_run(tmp_path):
    runs_dir = tmp_path / "runs"
    flags = ["--victim", "tabular-subset", "--rows", "300", "--canaries", "4", "--canary-kind", "extreme"]
    flags += ["--n-shadow", "8"]
    assert lira.main(["--runs-dir", str(runs_dir), *flags, *FIXED, *TABLE]) == 0
    root = only_store(runs_dir)
    keep = np.load(root / "keep.npy")
    assert keep.shape == (8, 5004) and keep[:, :5000].all()
    coins = independent_canary_coins(5000, CanaryConfig(n=4, kind="extreme"), 8)
    assert np.array_equal(keep[:, 5000:], coins)
    experiment = json.loads((root / "experiment.json").read_text())
    assert experiment["plan"] == "fixed-remainder-v1" and experiment["inclusion_rate"] == 0.5
    # its own name, beside the independent-coins store of the same configuration
    assert root.name == experiment_id(experiment) != experiment_id({**experiment, "plan": "independent-coins-v1"})

    summary = json.loads((root / "audit" / "summary.json").read_text())
    evaluation = summary["evaluation"]
    assert evaluation["plan"] == "fixed-remainder-v1" and evaluation["natural_note"] == NATURAL_NOTE
    assert evaluation["n_canaries"] == 4 * 4 and "no `natural` group" in evaluation["epsilon_note"]
    assert {"lira_online", "lira_offline", "rmia", "rmia_offline", "dcr_lira", "queries", "domias"} <= set(
        summary["attacks"]
    )
    for name, attack in summary["attacks"].items():
        assert "natural" not in attack and "subgroups" not in attack, name
        assert (attack["n_members"], attack["n_nonmembers"]) == (coins[:4].sum(), (~coins[:4]).sum()), name
        assert 0 <= attack["eps_lower"] <= attack["eps_ceiling"], name
    assert summary["verdict"]["eps_ceiling"] is not None
    with np.load(root / "audit" / "scores.npz") as z:
        assert np.array_equal(z["membership"], keep[:4])
        assert all(np.isfinite(z[name][:, 5000:]).all() for name in summary["attacks"])

    # the report says how the members were drawn; a comparison through the natural examples is refused
    (entry,) = build_report([load_audited(root)], settings=Settings(n_boot=10)).data["experiments"]
    assert (
        "Each of the 4 canary records is in each of the 8 runs by an independent coin of probability 0.5, and each "
        "of the 5,000 natural examples is in every run (plan fixed-remainder-v1" in entry["protocol"]
    )
    assert "a run's expected member count, which the pipeline was handed, is 5002)" in entry["protocol"]
    assert f"the natural examples have no numbers ({NATURAL_NOTE})" in entry["protocol"]
    assert "not on the natural examples, members of every run (fixed-remainder-v1)" in entry["verdicts"][0]["reason"]
    at_risk = [e["index"] for e in entry["highest_risk"]["examples"]]  # canary records only: none is always IN
    assert sorted(at_risk) == [5000 + j for j in range(4) if coins[:4, j].any()]
    with pytest.raises(ExperimentError, match=f"natural examples cannot be compared \\({NATURAL_NOTE}"):
        load_experiment(root).natural_examples()


def test_an_audit_of_digits_with_a_fixed_remainder(tmp_path, tiny_flags):
    runs_dir = tmp_path / "runs"
    flags = ["--victim", "real", "--canaries", "50", "--canary-kind", "mislabeled", "--n-shadow", "4"]
    assert lira.main(["--runs-dir", str(runs_dir), *flags, *FIXED, *tiny_flags]) == 0
    root = only_store(runs_dir)
    keep = np.load(root / "keep.npy")
    assert keep.shape == (4, 1550) and keep[:, :1500].all()
    assert np.array_equal(keep[:, 1500:], independent_canary_coins(1500, CanaryConfig(n=50, kind="mislabeled"), 4))
    summary = json.loads((root / "audit" / "summary.json").read_text())
    assert summary["evaluation"]["plan"] == "fixed-remainder-v1"
    assert summary["evaluation"]["natural_note"] == NATURAL_NOTE
    assert {"loss", "lira_online", "lira_offline", "rmia", "rmia_offline"} <= set(summary["attacks"])
    for name, attack in summary["attacks"].items():
        assert "natural" not in attack and attack["n_members"] + attack["n_nonmembers"] == 2 * 50, name
    with np.load(root / "audit" / "scores.npz") as z:
        assert all(np.isfinite(z[name]).all() for name in summary["attacks"])


#: a command pipeline that releases 50 member rows and says what it was handed: {expected_members}, its
#: environment variable, and the members' own count
SAYS_ITS_COUNT = """
import csv, os, random, sys
members, seed, out, expected = sys.argv[1:5]
with open(members) as f:
    header, *rows = list(csv.reader(f))
with open(out, "w", newline="") as f:
    csv.writer(f).writerows([header, *random.Random(int(seed)).sample(rows, 50)])
print(expected, os.environ["MIA_EXPECTED_MEMBERS"], len(rows))
"""


@pytest.mark.parametrize("plan,expected", [("independent", "2502.0"), ("fixed-remainder", "5002.0")])
def test_a_command_pipeline_is_handed_the_plans_expected_member_count(tmp_path, plan, expected):
    # fair: 5,000 natural records and 4 canaries at q = 1/2: 0.5 x 5,004, or 5,000 + 0.5 x 4
    (tmp_path / "pipeline.py").write_text(textwrap.dedent(SAYS_ITS_COUNT))
    command = [sys.executable, "pipeline.py", "{members}", "{seed}", "{out}", "{expected_members}"]
    (tmp_path / "pipeline.toml").write_text(f'kind = "table"\ncommand = {json.dumps(command)}\n')
    runs_dir = tmp_path / "runs"
    flags = ["--victim", "command", "--pipeline", str(tmp_path / "pipeline.toml"), "--n-shadow", "4"]
    canaries = ["--canaries", "4", "--canary-kind", "extreme", "--plan", plan]
    assert lira.main(["--runs-dir", str(runs_dir), *flags, *canaries, *TABLE]) == 0
    root = only_store(runs_dir)
    keep = np.load(root / "keep.npy")
    for run in range(4):
        said = json.loads((root / "runs" / f"{run:05d}.json").read_text())["command"]["stdout"]
        assert said == f"{expected} {expected} {keep[run].sum()}\n", said


def test_an_audit_in_rounds_runs_under_the_fixed_remainder(tmp_path):
    runs_dir = tmp_path / "runs"
    flags = ["--victim", "tabular-subset", "--rows", "300", "--canaries", "4", "--canary-kind", "extreme"]
    flags += ["--n-shadow", "8"]
    rounds = ["--until-decided", "--first-look", "4"]
    assert loss.main(["--runs-dir", str(runs_dir), *flags, *FIXED, *rounds, *TABLE]) == 0
    summary = json.loads((only_store(runs_dir) / "audit" / "summary.json").read_text())
    assert summary["evaluation"]["plan"] == "fixed-remainder-v1" and summary["sequential"]["schedule"] == [4, 8]
    assert summary["evaluation"]["n_canaries"] == 4 * len(summary["target_runs"])  # the last look's targets
    assert "natural" not in summary["attacks"]["loss"] and summary["sequential"]["looks"]
