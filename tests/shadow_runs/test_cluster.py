"""A real two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head and a worker
node, each its own raylet with its own CPUs): an audit joins it by address, the worker node is
killed part-way, and the audit finishes on the head with every finished run kept, none stored
twice, and a summary.json byte-identical to the same audit run without Ray. Only the cluster
this test starts is stopped."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# 10 runs of a small ConvNet (~1 s each on one thread): long enough to kill a node mid-audit
FLAGS = ["--victim", "real", "--n-shadow", "10", "--train-steps", "120", "--train-net-width", "16", "--quiet"]


def audit(runs_dir: Path, *extra: str, wait: bool = True):
    command = [sys.executable, "-m", "audit.lira", *FLAGS, "--runs-dir", str(runs_dir), *extra]
    return subprocess.run(command, check=True) if wait else subprocess.Popen(command)


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
    proc = audit(runs_dir, "--address", cluster.address, wait=False)
    try:
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 240
        while len(seen) < 3:  # a few runs finished, the rest queued or running on both nodes
            assert proc.poll() is None and time.monotonic() < deadline, "the audit ended before the node was killed"
            seen.update({k: v for k, v in stored_runs(runs_dir).items() if k not in seen})
            time.sleep(0.05)
        cluster.remove_node(worker)  # kills the worker node's raylet and its workers mid-task
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    after = stored_runs(runs_dir)
    assert sorted(after) == [f"{r:05d}.json" for r in range(10)]  # no run lost
    assert all(after[name] == mtime for name, mtime in seen.items())  # none stored again after the kill
    assert not [p for p in runs_dir.glob("*/runs/*") if p.suffix not in (".json", ".npz")]  # no half-written file

    # the reference in this process (its imports already paid for): the same main as the command's
    from audit import lira

    assert lira.main([*FLAGS, "--runs-dir", str(tmp_path / "inline"), "--executor", "inline"]) == 0
    (root,) = runs_dir.iterdir()
    (reference,) = (tmp_path / "inline").iterdir()
    assert root.name == reference.name
    assert (root / "audit" / "summary.json").read_bytes() == (reference / "audit" / "summary.json").read_bytes()
    hosts = {json.loads(p.read_text())["host"] for p in (root / "runs").glob("*.json")}
    assert hosts  # runs record the host they ran on (both nodes are this machine here)
