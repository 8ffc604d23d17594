"""The third-party catalogue's own code (thirdparty/, docs/results/third-party.md), without the
third-party environments (CI builds none): every pipeline file loads and names files that are there,
the adapters' shared hand-over reads what `--victim command` hands a run and writes a release the
pool's schema reads back exactly, and bench/third_party.py's cut of fair holds none of its four
unheld categories, so each unseen canary holds one of its own."""

import argparse
import json
import os
import sys
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
    # on the worst-case pair, with its broken twin (a one-column domain leak planted: --domain-from-rows a)
    assert len(files) == 14
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
