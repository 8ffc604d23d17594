"""A real two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head and a worker
node, each its own raylet with its own CPUs): an audit joins it by address, the worker node is
killed part-way, and the audit finishes on the head with every finished run kept, none stored
twice, and a summary.json byte-identical to the same audit run without Ray. Only the cluster
this test starts is stopped.

Both audits are the command's `main` in this process (its imports paid once; a second interpreter
would import torch again); the worker node is killed from a thread that watches the run store."""

import json
import threading
import time
from pathlib import Path

import pytest

from audit import lira

pytestmark = pytest.mark.slow

# 8 runs of a small ConvNet (~0.5 s each on one thread): once 2 are stored, the other 6 take at least
# three rounds of the two nodes (~1.5 s), long enough to kill a node mid-audit (the test looks every 50 ms)
FLAGS = ["--victim", "real", "--n-shadow", "8", "--train-steps", "60", "--train-net-width", "16", "--quiet"]


def stored_runs(runs_dir: Path) -> dict[str, int]:
    """Finished runs (their .json, written after the .npz) -> the file's modification time."""
    return {p.name: p.stat().st_mtime_ns for p in runs_dir.glob("*/runs/*.json")}


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        yield cluster
    finally:
        cluster.shutdown()  # its own nodes only; any other Ray on the machine keeps running


def test_an_audit_finishes_after_its_worker_node_dies(cluster, tmp_path):
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    runs_dir = tmp_path / "cluster"
    at_kill: dict[str, int] = {}  # the runs stored when the worker node was killed
    audit_done = threading.Event()

    def kill_the_worker_node_part_way():
        deadline = time.monotonic() + 240
        while not audit_done.is_set() and time.monotonic() < deadline:
            if len(stored_runs(runs_dir)) >= 2:  # a few runs finished, the rest queued or running on both nodes
                cluster.remove_node(worker)  # kills the worker node's raylet and its workers mid-task
                at_kill.update(stored_runs(runs_dir))
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_worker_node_part_way, daemon=True)
    killer.start()
    try:
        assert lira.main([*FLAGS, "--runs-dir", str(runs_dir), "--address", cluster.address]) == 0
    finally:
        audit_done.set()
        killer.join()
    assert 2 <= len(at_kill) < 8, "the kill should land part-way"
    after = stored_runs(runs_dir)
    assert sorted(after) == [f"{r:05d}.json" for r in range(8)]  # no run lost
    assert all(after[name] == mtime for name, mtime in at_kill.items())  # none stored again after the kill
    assert not [p for p in runs_dir.glob("*/runs/*") if p.suffix not in (".json", ".npz")]  # no half-written file

    assert lira.main([*FLAGS, "--runs-dir", str(tmp_path / "inline"), "--executor", "inline"]) == 0
    (root,) = runs_dir.iterdir()
    (reference,) = (tmp_path / "inline").iterdir()
    assert root.name == reference.name
    assert (root / "audit" / "summary.json").read_bytes() == (reference / "audit" / "summary.json").read_bytes()
    hosts = {json.loads(p.read_text())["host"] for p in (root / "runs").glob("*.json")}
    assert hosts  # runs record the host they ran on (both nodes are this machine here)
