import json
import os
import stat

import numpy as np
import pytest

from shadow_runs import atomic_files
from shadow_runs.atomic_files import atomic_write, write_json
from shadow_runs.store import IDENTITY_KEYS, RunStore, StoreError, differences, experiment_id
from victims.base import Observations

EXPERIMENT = {
    "victim": "real",
    "dataset": "digits",
    "dataset_fingerprint": "0123456789abcdef",
    "config": {"train": {"steps": 3}},
    "n_pool": 4,
    "master_seed": 0,
    "plan": "p",
    "inclusion_rate": 0.5,
    "package_version": "0.1.0",
}
LABELS = np.array([0, 1, 0, 1])


def obs(value: float, init=()) -> Observations:
    return Observations(
        logits=np.full((4, 5, 2), value, np.float32), test_accuracy=0.5, init_idx=np.array(init, np.int64)
    )


def test_experiment_id_names_victim_dataset_and_hashes_only_the_identity():
    eid = experiment_id(EXPERIMENT)
    assert eid.startswith("real-digits-") and len(eid) == len("real-digits-") + 10
    assert experiment_id({**EXPERIMENT, "package_version": "9"}) == eid  # provenance is not identity
    assert experiment_id({**EXPERIMENT, "master_seed": 1}) != eid
    assert set(IDENTITY_KEYS) <= set(EXPERIMENT)


def test_layout_roundtrip_and_finished_runs(tmp_path):
    store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    assert json.loads((store.root / "experiment.json").read_text()) == EXPERIMENT
    assert np.array_equal(np.load(store.root / "pool_labels.npy"), LABELS)
    store.write_run(2, *obs(1.5, init=[3]).to_store({"seed": 11, "wall_s": 0.1, "host": "h"}))
    assert store.finished_runs() == {2}
    arrays, meta = store.load_run(2)
    assert arrays["logits"].dtype == np.float32 and (arrays["logits"] == 1.5).all()
    assert arrays["init_idx"].tolist() == [3]
    assert meta == {"seed": 11, "wall_s": 0.1, "host": "h", "formal_epsilon": None, "delta": None, "test_accuracy": 0.5}
    assert (store.root / "runs" / "00002.npz").exists() and not list(store.root.rglob("*.tmp"))


def test_a_run_without_its_json_is_not_finished(tmp_path):
    store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    store.write_run(0, *obs(0.0).to_store({}))
    (store.root / "runs" / "00000.json").unlink()  # as if killed between the two renames
    (store.root / "runs" / ".00001.npz.abc.tmp").write_bytes(b"partial")  # a killed write
    assert store.finished_runs() == set()


def test_reopening_the_same_config_reuses_it(tmp_path):
    first = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    first.write_run(0, *obs(0.0).to_store({}))
    again = RunStore.open(tmp_path, experiment={**EXPERIMENT, "package_version": "0.2"}, pool_labels=LABELS)
    assert again.root == first.root and again.finished_runs() == {0}


def test_a_directory_of_another_config_is_refused_and_left_alone(tmp_path):
    store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    tampered = {**EXPERIMENT, "config": {"train": {"steps": 4}}}
    (store.root / "experiment.json").write_text(json.dumps(tampered))
    before = {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    with pytest.raises(StoreError) as refused:
        RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    message = str(refused.value)
    # the nested key that differs, stored -> asked, and what to do, on one line
    assert f"(stored -> asked: config.train.steps: 4 -> {EXPERIMENT['config']['train']['steps']})" in message
    assert "pass another --runs-dir, or move" in message and "\n" not in message
    assert before == {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}


def test_differences_name_each_nested_key_with_both_values():
    stored = {"train": {"steps": 300, "lr": 0.01, "net": {"width": 64}}, "ipc": 10}
    asked = {"train": {"steps": 30, "lr": 0.01, "net": {"width": 64, "depth": 3}}, "ipc": 10}
    assert differences("config", stored, asked) == [
        "config.train.net.depth: (none) -> 3",
        "config.train.steps: 300 -> 30",
    ]
    assert differences("victim", "psg", "dm") == ['victim: "psg" -> "dm"']
    (long,) = differences("config", {"x": list(range(100))}, {"x": []}, most=20)
    assert long == "config.x: [0, 1, 2, 3, 4, 5... -> []"  # cut to 20 characters


def test_a_store_made_with_another_membership_plan_is_refused_naming_it(tmp_path):
    old = {k: v for k, v in EXPERIMENT.items() if k != "inclusion_rate"} | {"plan": "stratified-complement-pairs-v1"}
    store = RunStore.open(tmp_path, experiment=old, pool_labels=LABELS)
    store.write_run(0, *obs(1.0).to_store({"seed": 1}))
    before = {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    # the same configuration under the new plan finds that directory (the plan is not hashed) and refuses it
    assert experiment_id(old) == experiment_id(EXPERIMENT)
    with pytest.raises(StoreError, match="was made with membership plan 'stratified-complement-pairs-v1', not 'p'"):
        RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    assert before == {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    # a rate other than the default is part of the identity (and of the name)
    assert experiment_id({**EXPERIMENT, "inclusion_rate": 0.3}) != experiment_id(EXPERIMENT)


def test_an_experiment_directory_passed_as_runs_dir_is_refused(tmp_path):
    store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    with pytest.raises(StoreError, match="is an experiment directory"):
        RunStore.open(store.root, experiment=EXPERIMENT, pool_labels=LABELS)


def test_plan_may_grow_but_not_change(tmp_path):
    store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
    keep = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    store.extend_plan(keep[:2])
    store.extend_plan(keep)
    store.extend_plan(keep[:3])  # asking for fewer runs keeps the longer plan
    assert np.array_equal(store.keep(), keep)
    with pytest.raises(StoreError, match="another membership plan"):
        store.extend_plan(~keep)
    assert np.array_equal(store.keep(), keep)


def test_a_store_of_other_victim_code_is_refused_naming_both_hashes_unless_kept_on_purpose(tmp_path):
    old_code = {**EXPERIMENT, "victim_source": {"sha256": "a" * 64, "modules": ["m"]}}
    new_code = {**EXPERIMENT, "victim_source": {"sha256": "b" * 64, "modules": ["m"]}}
    store = RunStore.open(tmp_path, experiment=old_code, pool_labels=LABELS)
    store.write_run(0, *obs(1.0).to_store({"seed": 1}))
    assert RunStore.open(tmp_path, experiment=old_code, pool_labels=LABELS).root == store.root  # the same code
    before = {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    with pytest.raises(StoreError) as refused:
        RunStore.open(tmp_path, experiment=new_code, pool_labels=LABELS)
    message = str(refused.value)
    assert "\n" not in message and "source aaaaaaaaaaaa, this code bbbbbbbbbbbb" in message
    assert "--keep-runs-of-other-code" in message
    assert before == {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    # kept on purpose: the store now records the new code, and the old one with the runs it made
    kept = RunStore.open(tmp_path, experiment=new_code, pool_labels=LABELS, keep_other_code=True)
    assert kept.finished_runs() == {0}
    recorded = json.loads((store.root / "experiment.json").read_text())
    assert recorded["victim_source"]["sha256"] == "b" * 64
    assert recorded["earlier_victim_sources"] == [{"sha256": "a" * 64, "runs": 1}]
    # a store made before the hash was recorded has none to compare: used as it is
    legacy = tmp_path / "legacy"
    RunStore.open(legacy, experiment=EXPERIMENT, pool_labels=LABELS)
    assert RunStore.open(legacy, experiment=new_code, pool_labels=LABELS).finished_runs() == set()


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_every_written_file_gets_the_mode_a_plain_open_would_under_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        store = RunStore.open(tmp_path, experiment=EXPERIMENT, pool_labels=LABELS)
        store.write_run(0, *obs(0.0).to_store({}))
        write_json(tmp_path / "summary.json", {"a": 1})
        atomic_write(tmp_path / "report.html", lambda f: f.write(b"<html></html>"))
        with open(tmp_path / "plain.txt", "w"):
            pass
    finally:
        os.umask(old)
    written = [store.root / "experiment.json", store.root / "pool_labels.npy", *store.root.glob("runs/*")]
    written += [tmp_path / "summary.json", tmp_path / "report.html"]
    assert len(written) == 6
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == dict.fromkeys((p.name for p in written), mode)
    assert stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode) == mode


def test_the_umask_is_read_from_proc_or_else_set_and_restored(monkeypatch):
    def no_proc(*args, **kwargs):
        raise FileNotFoundError("/proc/self/status")

    old = os.umask(0o027)
    try:
        assert atomic_files._umask() == 0o027  # /proc/self/status "Umask:", the umask left as it is
        monkeypatch.setattr(atomic_files, "open", no_proc, raising=False)  # a system without /proc
        assert atomic_files._umask() == 0o027
        assert os.umask(0o027) == 0o027  # the fallback put the umask back
    finally:
        os.umask(old)
