"""The Python API (`audit.run`, `audit.load`, `audit.roc_scores`) and the result it returns
(`audit.result.AuditResult`): the same numbers as the command line's summary.json, a value that
round-trips through that JSON; the ROC's scores as scores.npz holds them."""

import json

import numpy as np
import pytest

import audit
from audit import lira
from audit.result import AuditResult


def only_experiment(runs_dir):
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return root


def test_run_returns_what_the_command_line_writes_and_load_reads_it_back(tmp_path, capsys):
    flags = dict(n_shadow=4, train_steps=10, train_net_width=8, executor="inline", claimed_epsilon=3.0)
    argv = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    assert lira.main(["--victim", "real", "--runs-dir", str(tmp_path / "cli"), "--quiet", *argv]) == 0
    cli = only_experiment(tmp_path / "cli") / "audit" / "summary.json"
    capsys.readouterr()

    result = audit.run("real", runs_dir=tmp_path / "api", **flags)  # trained afresh, in a store of its own
    printed = capsys.readouterr()
    assert "  verdict: claimed ε = 3 at δ = 0: " in printed.out and "terms: " in printed.out  # the CLI's lines
    assert "real:" in printed.err  # training's progress, as on the command line
    store = only_experiment(tmp_path / "api")
    written = (store / "audit" / "summary.json").read_text()
    assert written == cli.read_text()  # the same numbers, byte for byte
    assert json.dumps(result.to_json(), indent=2) + "\n" == written
    assert AuditResult.from_json(result.to_json()) == result == audit.load(cli)
    assert result.claim.epsilon == 3.0 and result.bound["attack"] in result.attacks
    loaded = audit.load(store)
    assert loaded == result and loaded.verdict == result.verdict
    assert audit.load(store / "audit" / "summary.json") == result
    with pytest.raises(FileNotFoundError):
        audit.load(tmp_path)


def test_run_refuses_bad_input_with_one_line_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="--n-targets 4 must be between 1 and 3"):
        audit.run("real", n_shadow=4, n_targets=4, executor="inline", runs_dir=tmp_path)
    with pytest.raises(ValueError, match="argument --n-shadow"):
        audit.run("real", n_shadow="many", runs_dir=tmp_path)
    with pytest.raises(ValueError, match="command must be one of"):
        audit.run("real", command="lira2")
    assert list(tmp_path.iterdir()) == []


def test_a_result_round_trips_through_its_json_keys_and_their_order():
    data = {
        "victim": "dpsgd",
        "dataset": "digits",
        "config": {"epsilon": 4.0, "train": {"steps": 30}},
        "n_shadow": 8,
        "target_runs": [0, 1, 2, 3],
        "formal_epsilon": 3.99,
        "delta": 1e-5,
        "claimed_epsilon": 2.0,
        "claimed_delta": 1e-5,
        "utility": {"test_accuracy": 0.9, "test_accuracy_std": 0.01},
        "evaluation": {"confidence": 0.95, "n_canaries": 6000},
        "attacks": {},
        "verdict": None,
        "pair_test": {"p": 0.5},
        "sequential": {"stopped": "budget spent"},
    }
    result = AuditResult.from_json(data)
    assert json.dumps(result.to_json()) == json.dumps(data)  # keys and their order
    assert AuditResult.from_json(result.to_json()) == result
    assert result.pair_test == {"p": 0.5} and result.sequential["stopped"] == "budget spent"
    assert result.own_curve is None and result.verdict is None  # no bound, no verdict
    release = {**data, "release_leakage": {"warnings": []}, "subset_baseline": {"outcome": None}}
    del release["pair_test"], release["sequential"]
    assert json.dumps(AuditResult.from_json(release).to_json()) == json.dumps(release)


def test_roc_scores_are_the_stored_scores_by_group_and_attack(tmp_path):
    from shadow_runs.plan import PLAN

    store = tmp_path / "subset-digits-0123456789"
    (store / "audit").mkdir(parents=True)
    (store / "runs").mkdir()
    (store / "experiment.json").write_text(json.dumps({"victim": "subset", "plan": PLAN}))
    summary = {"victim": "subset", "config": {"ipc": 1}, "n_shadow": 1, "target_runs": [0]}
    summary["attacks"] = {"loss": {"eps_ceiling": 1.0}, "ganleak_pbb": {"eps_ceiling": 1.0}}  # pbb has no scores
    (store / "audit" / "summary.json").write_text(json.dumps(summary))
    (store / "runs" / "00000.json").write_text(json.dumps({"test_accuracy": 0.5}))
    # one target, 6 records: the first 4 members, of which the first 2 the release's init rows
    membership, init = np.array([[1, 1, 1, 1, 0, 0]], bool), np.array([[1, 1, 0, 0, 0, 0]], bool)
    np.savez(store / "audit" / "scores.npz", target_runs=[0], membership=membership, init=init, loss=[np.arange(6.0)])
    found = audit.roc_scores(store)
    as_lists = {g: {a: [s.tolist() for s in pair] for a, pair in attacks.items()} for g, attacks in found.items()}
    assert as_lists == {
        "all": {"loss": [[0, 1, 2, 3], [4, 5]]},
        "init": {"loss": [[0, 1], [4, 5]]},  # each sub-group of members against every non-member
        "other_members": {"loss": [[2, 3], [4, 5]]},
    }
    (store / "audit" / "scores.npz").unlink()
    with pytest.raises(ValueError, match="scores.npz: missing"):  # ExperimentError, one line naming the file
        audit.roc_scores(store)
