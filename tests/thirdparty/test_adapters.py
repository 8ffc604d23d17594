"""The third-party catalogue's own code (thirdparty/, docs/results/third-party.md), without the
third-party environments (CI builds none): every pipeline file loads and names files that are there,
the adapters' shared hand-over reads what `--victim command` hands a run and writes a release the
pool's schema reads back exactly, and bench/third_party.py's cut of fair holds none of its four
unheld categories, so each unseen canary holds one of its own; dpmm's adapter's `--one-way-only`
patch (on stand-in dpmm modules) and the pair bench's store, appended a call at a time."""

import argparse
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from victims.command_pipeline import hand_over, job_files, load_pipeline, schema_file
from victims.tabular.pools import load_fair, load_schema_file

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "thirdparty" / "adapters"))
sys.path.insert(0, str(ROOT / "bench"))
handover = pytest.importorskip("handover")
jobs = pytest.importorskip("jobs")


def test_every_pipeline_file_loads_and_passes_the_claim():
    files = sorted((ROOT / "thirdparty" / "pipelines").glob("*.toml"))
    # 6 configurations (smartnoise MST, AIM, MWEM; dpmm MST, AIM, PrivBayes) x 2 preprocessings, and dpmm MST
    # on the worst-case pair: shipped, with its whole budget on the 1-way marginals, and its broken twin
    # (a one-column domain leak planted: --domain-from-rows a)
    assert len(files) == 15
    for path in files:
        spec = load_pipeline(str(path))
        assert spec.kind == "table" and spec.requirements.name.endswith(".lock")
        assert {"epsilon", "delta"} <= spec.placeholders()  # so the suite refuses an audit without --epsilon
        assert Path(os.path.normpath(spec.executable())).parents[2] == ROOT / "thirdparty" / "envs"
        # the environment's identity covers the lock and the adapter's two files (dpmm's: three, jobs.py too)
        dpmm = path.name.startswith("dpmm-")
        assert len(spec.environment()["files"]) == (5 if dpmm else 4)
        # dpmm's adapter fits a call's seeds after one import; on the pair a fit is a tenth of a second
        pair = path.name.startswith("dpmm-mst-pair")
        assert spec.batch == ((100 if pair else 8) if dpmm else None)
    leak, twin = (load_pipeline(str(ROOT / "thirdparty" / "pipelines" / f)).command for f in PAIR_LEAK_AND_TWIN)
    assert tuple(a for a in leak if a not in ("--domain-from-rows", "a")) == twin  # nothing else differs


PAIR_LEAK_AND_TWIN = ("dpmm-mst-pair-leak-a.toml", "dpmm-mst-pair.toml")


def test_the_hand_over_round_trips_a_members_table(tmp_path, monkeypatch):
    pool = load_fair()
    keep = np.zeros(pool.n_pool, dtype=bool)
    keep[:300] = True
    values = hand_over(pool, keep, tmp_path, kind="table")
    for name, value in {**values, "seed": "7", "expected_members": "2500.0"}.items():
        monkeypatch.setenv(f"MIA_{name.upper()}", value)
    handed = handover.read_handed(argparse.Namespace(epsilon=1.0, delta=1e-5))
    assert (handed.seed, handed.rows, handed.epsilon) == (7, 2500, 1.0)
    # the codes as a custodian's CSV holds them: 22.0 -> "22", 17.5 -> "17.5"
    assert handed.categories("age") == ["17.5", "22", "27", "32", "37", "42"]
    assert set(handed.members["age"]) <= set(handed.categories("age"))
    handover.write_release(handed, handed.members)  # release the members themselves, as text
    x, y = pool.schema.encode(__import__("pandas").read_csv(values["out"]), where="release")
    assert np.array_equal(y, pool.y[keep]) and np.allclose(x, pool.x[keep])
    handover.write_claim({"epsilon": 1.0, "delta": 1e-5})
    assert json.loads(Path(values["claim"]).read_text()) == {"epsilon": 1.0, "delta": 1e-5}


def test_each_job_hands_the_adapter_its_seed_and_members_as_a_call_of_its_own(tmp_path, monkeypatch):
    pool = load_fair()
    keeps = np.zeros((2, pool.n_pool), dtype=bool)
    keeps[0, :300], keeps[1, 300:500] = True, True
    listed = []
    for j, keep in enumerate(keeps):
        (tmp_path / f"job-{j}").mkdir()
        listed.append({"seed": 11 + j, **job_files(pool, keep, tmp_path / f"job-{j}")})
    (tmp_path / "jobs.json").write_text(json.dumps(listed))
    for name, value in {**schema_file(pool, tmp_path), "jobs": str(tmp_path / "jobs.json")}.items():
        monkeypatch.setenv(f"MIA_{name.upper()}", value)
    monkeypatch.setenv("MIA_EXPECTED_MEMBERS", "2500.0")
    for j, seed in enumerate(jobs.each_job()):
        handed = handover.read_handed(argparse.Namespace(epsilon=1.0, delta=1e-5))
        assert seed == str(11 + j) and handed.seed == 11 + j and len(handed.members) == keeps[j].sum()
        handover.write_release(handed, handed.members)
        handover.write_claim({"job": j})
    for j, job in enumerate(listed):
        x, y = pool.schema.encode(__import__("pandas").read_csv(job["out"]), where="release")
        assert np.array_equal(y, pool.y[keeps[j]]) and json.loads(Path(job["claim"]).read_text()) == {"job": j}
    monkeypatch.delenv("MIA_JOBS")
    monkeypatch.setenv("MIA_SEED", "5")
    assert list(jobs.each_job()) == ["5"]  # unbatched: once, as handed


def test_the_cut_holds_none_of_the_four_unheld_categories(tmp_path):
    import third_party

    pool = load_schema_file(third_party.write_cut(tmp_path, 1000))
    table = pool.schema.decode(pool.x, pool.y)
    assert pool.n_pool == 1000 and pool.schema == load_fair().schema
    for column, category in third_party.UNHELD:
        assert not (table[column].to_numpy(dtype=float) == category).any()


def stand_in_dpmm(monkeypatch) -> type:
    """dpmm's three patched modules as stand-ins (sys.modules), their MST keeping the shipped σ √(3/(2ρ))
    and selecting one 2-way clique; returns that MST."""

    class MST:
        def __init__(self, rho):
            self.rho, self.sigma = rho, math.sqrt(3 / (2 * rho))

        def select(self, data, rho, measurement_log):
            return [("a", "b")]

    names = ["dpmm", "dpmm.models", "dpmm.models.base", "dpmm.models.base.mechanisms"]
    names += ["dpmm.models.base.mechanisms.mechanism", "dpmm.models.mst", "dpmm.models.priv_bayes"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    for name in names[1:]:
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, sys.modules[name])
    sys.modules["dpmm.models.mst"].MST = MST
    return MST


def test_one_way_only_spends_the_whole_rho_on_the_1_way_marginals(monkeypatch):
    adapter = pytest.importorskip("dpmm_synth")
    # σ = √(1/(2ρ)): ρ = 1/2 -> 1, ρ = 2 -> 1/2; the d measurements, each drawn with σ√d, spend
    # d·1/(2dσ²) = ρ, and the target's d cells move by 1 each: μ = √d/(σ√d) = 1/σ = √(2ρ) (1 at ρ = 1/2)
    assert adapter.one_way_sigma(0.5) == 1.0 and adapter.one_way_sigma(2.0) == 0.5
    mst = stand_in_dpmm(monkeypatch)
    knobs = {"memoise_rho": False, "select_iters": None}
    adapter.set_knobs(argparse.Namespace(**knobs, one_way_only=False))
    assert mst(0.5).sigma == math.sqrt(3) and mst(0.5).select(None, 0.1, []) == [("a", "b")]  # untouched
    adapter.set_knobs(argparse.Namespace(**knobs, one_way_only=True))
    assert mst(0.5).sigma == 1.0 and mst(2.0).sigma == 0.5 and mst(0.5).rho == 0.5
    assert mst(0.5).select(None, 0.1, []) == []  # nothing selected, so no 2-way marginal is measured


def test_one_way_only_is_refused_for_a_model_that_is_not_mst():
    adapter = ROOT / "thirdparty" / "adapters" / "dpmm_synth.py"
    flags = ["--model", "aim", "--preprocessing", "none", "--one-way-only", "--epsilon", "1", "--delta", "0.01"]
    done = subprocess.run([sys.executable, str(adapter), *flags], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "dpmm_synth.py: --one-way-only is MST's, not --model aim's\n"


def test_the_pair_bench_appends_each_call_s_fits_whatever_the_measurements(tmp_path, monkeypatch):
    import dpmm_pair

    calls = []

    def one_call(spec, pool, coins, seeds):
        calls.append(len(coins))
        return 2.0, [None] * len(coins)

    def run_features(pool, fitted, coins):  # 3 measurements a fit, as with --one-way-only
        return np.zeros((len(coins), 8)), np.full((len(coins), 3), float(len(calls)))

    monkeypatch.setattr(dpmm_pair, "one_call", one_call)
    monkeypatch.setattr(dpmm_pair, "run_features", run_features)
    dpmm_pair.main(["fit", "--out", str(tmp_path), "--runs", "5", "--batch", "2"])
    dpmm_pair.main(["fit", "--out", str(tmp_path), "--runs", "7", "--batch", "2"])
    found = np.load(tmp_path / "fits.npz")
    # calls of 2, 2, 1 fits, then 2 more: call j's 3 observations are j
    assert calls == [2, 2, 1, 2] and found["coin"].shape == (7,) and found["seconds"].tolist() == [2.0] * 4
    assert found["observed"].shape == (7, 3) and found["observed"][:, 0].tolist() == [1, 1, 2, 2, 3, 4, 4]
