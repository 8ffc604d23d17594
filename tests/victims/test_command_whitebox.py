"""White-box for a command victim without any third-party environment: dpmm's adapter's hand-back of
its noisy measurements (thirdparty/adapters/dpmm_synth.py, `measured_cells`, `schema_codes`, on
measurements written by hand in dpmm's own form), read back by the suite
(`victims.command_whitebox.measured_observations`) into the target's observations, and the refusals."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from victims.canaries import CanaryConfig, add_canaries
from victims.command_pipeline import hand_over
from victims.command_whitebox import measured_observations
from victims.data import load_pool

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "thirdparty" / "adapters"))
handover = pytest.importorskip("handover")
adapter = pytest.importorskip("dpmm_synth")

NAMES, SIZES = ("a", "b", "c"), (2, 2, 2)


def pair_pool():
    return add_canaries(load_pool("pair-3bin"), CanaryConfig(n=1, kind="record", record="a=1,b=1,c=1"))


def dpmm_measures(one_way: list[list[float]], two_way: dict[tuple[str, str], list[float]]) -> list[tuple]:
    """Measurements as dpmm keeps them on `generator.measures`: (Q, noisy y, σ, clique)."""
    found = [(None, np.array(y), 3.81, (name,)) for name, y in zip(NAMES, one_way)]
    return found + [(None, np.array(y), 3.81, clique) for clique, y in two_way.items()]


def test_the_adapter_hands_back_each_measurement_and_the_suite_reads_the_target_s_cells():
    measures = dpmm_measures([[9.5, 1.25], [10.5, -0.5], [11.0, 2.0]], {("a", "c"): [10.0, 0.5, -1.0, 3.0]})
    claim = {"measurements_cells": adapter.measured_cells(measures)}
    assert claim["measurements_cells"][3] == {"columns": ["a", "c"], "sigma": 3.81, "noisy": [10.0, 0.5, -1.0, 3.0]}
    target = np.array([[1, 1, 1]])
    # D: ten records [0, 0, 0], none in the target's cells: the observation is the noisy count itself
    observed, sigma = measured_observations(claim, NAMES, SIZES, target, np.zeros((10, 3), dtype=int))
    assert observed.shape == (4, 1) and sigma == 3.81
    assert observed[:, 0].tolist() == [1.25, -0.5, 2.0, 3.0]  # the 1-way cells "1", then cell (a=1, c=1) = 3
    # members other than the target in its cells are subtracted: two records [1, 0, 1]
    others = np.array([[0, 0, 0], [1, 0, 1], [1, 0, 1]])
    observed, _ = measured_observations(claim, NAMES, SIZES, target, others)
    assert observed[:, 0].tolist() == [1.25 - 2, -0.5, 2.0 - 2, 3.0 - 2]


def test_the_scores_of_the_pair_bench_sum_the_target_s_observations():
    sys.path.insert(0, str(ROOT / "bench"))
    import dpmm_pair

    found = {"cells": np.array([[10, 0, 0, 0, 0, 0, 0, 1]]), "observed": np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])}
    scores = dpmm_pair.scores(found)
    assert scores["released_target"].tolist() == [1.0] and scores["released_cells"].tolist() == [3.0]
    assert scores["noisy_one_way"].tolist() == [6.0] and scores["noisy_all"].tolist() == [15.0]


@pytest.mark.parametrize(
    "claim, error",
    [
        ({}, "the command's claim has no measurements_cells"),
        ({"measurements_cells": [{"columns": ["a"]}]}, "measurements_cells[0] is not an object with 'columns'"),
        ({"measurements_cells": [{"columns": ["d"], "noisy": [1, 2]}]}, "columns ['d'] are not columns of the schema"),
        (
            {"measurements_cells": [{"columns": ["a", "b"], "noisy": [1, 2, 3]}]},
            "3 noisy counts for the 4 public cells of a, b (a compressed or binned domain is not the schema's)",
        ),
    ],
    ids=["none", "not-an-object", "unknown-column", "wrong-size"],
)
def test_a_claim_that_cannot_be_read_is_refused_with_one_line(claim, error):
    with pytest.raises(ValueError) as e:
        measured_observations(claim, NAMES, SIZES, np.array([[1, 1, 1]]), np.zeros((10, 3), dtype=int))
    assert error in str(e.value) and "\n" not in str(e.value)


def test_the_adapter_codes_the_members_by_the_schema_s_categories(tmp_path, monkeypatch):
    pool = pair_pool()
    keep = np.ones(pool.n_pool, dtype=bool)  # D and the target
    values = hand_over(pool, keep, tmp_path, kind="table")
    for name, value in {**values, "seed": "3", "expected_members": "10.5"}.items():
        monkeypatch.setenv(f"MIA_{name.upper()}", value)
    handed = handover.read_handed(argparse.Namespace(epsilon=1.0, delta=1e-2))
    schema = {name: adapter.categories(handed, name, None) for name in handed.categorical}  # the schema's
    codes, sizes = adapter.schema_codes(handed, schema)
    assert sizes == {"a": 2, "b": 2, "c": 2}
    assert codes.values.tolist() == [[0, 0, 0]] * 10 + [[1, 1, 1]]


def test_a_white_box_audit_of_a_command_reads_the_target_s_cells_from_its_claim(tmp_path, capsys):
    from audit import lira
    from tests.victims.test_batched_command import pipeline, runs_of

    # the tiny command releasing every column's counts plus N(0, 0.05²): the target's three cells
    toml = pipeline(tmp_path, batch=8, args=("--cells", "0.05"))
    argv = ["--runs-dir", str(tmp_path / "runs"), "--victim", "command", "--pipeline", str(toml), "--executor",
            "inline", "--classifier-iterations", "5", "--dataset", "pair-3bin", "--plan", "fixed-remainder",
            "--canaries", "1", "--canary-kind", "record", "--threat-model", "white-box", "--n-shadow", "16",
            "--quiet"]  # fmt: skip
    assert lira.main(argv) == 0
    (store,) = (tmp_path / "runs").iterdir()
    runs = runs_of(store)
    assert len(runs) == 16
    coins = []
    for run in runs:  # each observation is N(coin, 0.05²): D holds none of the target's cells
        assert run["whitebox"].shape == (3, 1)
        coin = np.round(run["whitebox"][:, 0])
        assert coin[0] in (0.0, 1.0) and np.all(coin == coin[0]) and np.all(np.abs(run["whitebox"] - coin[0]) < 0.3)
        coins.append(coin[0])
    assert 0 < sum(coins) < 16  # both sides of the pair
    summary = json.loads((store / "audit" / "summary.json").read_text())
    assert {"whitebox", "whitebox_sum"} <= set(summary["pair_test"]["predicted_mu"])


def test_a_white_box_audit_of_a_command_without_cells_fails_with_one_line(tmp_path, capsys):
    from audit import lira
    from tests.victims.test_batched_command import pipeline

    toml = pipeline(tmp_path, batch=8)
    argv = ["--runs-dir", str(tmp_path / "runs"), "--victim", "command", "--pipeline", str(toml), "--executor",
            "inline", "--classifier-iterations", "5", "--dataset", "pair-3bin", "--plan", "fixed-remainder",
            "--canaries", "1", "--canary-kind", "record", "--threat-model", "white-box",
            "--n-shadow", "16"]  # fmt: skip
    with pytest.raises(SystemExit) as e:
        lira.main(argv)
    assert e.value.code == 2
    assert "--threat-model white-box: the command's claim has no measurements_cells" in capsys.readouterr().err
