"""The Ray executor really joins a real cluster by address and really starts (and stops) a local Ray,
and gives the same runs as the inline executor.

Starting a Ray and warming its workers (each imports torch and this package) costs ~15-25 s here, and
so does each new driver's set of workers, so two tests check everything that needs a Ray: one joins
the module's cluster (`cluster`, a head node with its own raylet) by address, the other starts the one
local Ray it checks beside it. The other tests need no Ray."""

import dataclasses
import os
import pathlib
import sys

import numpy as np
import pytest
from ray import cloudpickle

from shadow_runs import membership_matrix, run_seed
from audit.executor import ExecutorConfig, RunTask, execute, ray_session
from victims import get_victim, load_pool
from victims.nets import NetConfig
from victims.train import TrainConfig


@pytest.fixture(scope="module")
def setup():
    pool = load_pool("digits")
    keep = membership_matrix(pool.y, n_runs=3, master_seed=0)
    tasks = [RunTask(run=r, seed=run_seed(master_seed=0, run=r), keep=keep[r]) for r in range(3)]
    victim = get_victim("real")(train=TrainConfig(steps=10, net=NetConfig(width=8)))
    return pool, tasks, victim


@pytest.fixture(scope="module")
def cluster():
    """A real Ray head node with its own raylet and 2 CPUs, shut down by its handle when the module is
    done (so no other Ray on the machine is touched: `ray stop --force` would stop them all)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture
def no_ray():
    """No Ray in this process (a cluster keeps running): the executor has to start or join its own."""
    import ray

    ray.shutdown()
    return ray


@pytest.mark.usefixtures("no_ray")
def test_no_tasks_start_nothing(setup):
    import ray

    pool, _, victim = setup
    assert list(execute([], victim=victim, pool=pool, config=ExecutorConfig())) == []
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"kind": "dask"}, "'dask'"),
        ({"workers": 0}, "got 0"),
        ({"gpus_per_run": 1.5}, "got 1.5"),
        ({"runs_per_task": 0}, "--runs-per-task must be >= 1, got 0"),
    ],
)
def test_bad_executor_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ExecutorConfig(**kwargs)


def test_joins_a_cluster_by_address_runs_packed_tasks_on_it_and_leaves_it_running(setup, cluster, no_ray):
    """`execute` with the cluster's address and --runs-per-task 2 over 3 runs: one pack of two and one
    task of one on the cluster, every run once, each run's logits equal to its unpacked inline run's
    within float tolerance (the lone run exactly); then the executor disconnects from the cluster it
    joined, which keeps running (not the executor's to stop)."""
    ray = no_ray
    pool, tasks, victim = setup
    inline = {
        t.run: obs for t, obs, _ in execute(tasks, victim=victim, pool=pool, config=ExecutorConfig(kind="inline"))
    }
    config = ExecutorConfig(kind="ray", address=cluster.address, runs_per_task=2)
    packed = list(execute(tasks, victim=victim, pool=pool, config=config))
    assert not ray.is_initialized()  # this process left the cluster
    assert sorted(t.run for t, _, _ in packed) == [0, 1, 2]
    for task, obs, meta in packed:
        assert meta["run"] == task.run and meta["seed"] == task.seed and meta["wall_s"] > 0
        assert meta.get("runs_in_task", 1) == (2 if task.run < 2 else 1)
        np.testing.assert_allclose(obs.logits, inline[task.run].logits, rtol=0, atol=1e-4)
        if task.run == 2:
            assert np.array_equal(obs.logits, inline[task.run].logits)
    assert cluster.head_node.remaining_processes_alive()  # the cluster it left still runs


@dataclasses.dataclass(frozen=True)
class RecordsTheRate:
    """A victim that reports the inclusion rate it was run with as its test accuracy."""

    inner: object

    def run(self, pool, keep, seed, *, device="cpu", inclusion_rate=0.5):
        obs = self.inner.run(pool, keep, seed, device=device, inclusion_rate=inclusion_rate)
        return dataclasses.replace(obs, test_accuracy=inclusion_rate)


def test_the_task_passes_the_plans_inclusion_rate_to_the_victim(setup):
    pool, tasks, victim = setup
    task = dataclasses.replace(tasks[0], inclusion_rate=0.3)
    [(_, obs, _)] = execute([task], victim=RecordsTheRate(victim), pool=pool, config=ExecutorConfig(kind="inline"))
    assert obs.test_accuracy == 0.3
    assert RunTask(run=0, seed=1, keep=task.keep).inclusion_rate == 0.5  # the plan's default


@dataclasses.dataclass(frozen=True)
class DiesOnce:
    """A victim whose worker process dies (as if killed) the first time it runs the task of seed `dies_on`."""

    inner: object
    marker_dir: str
    dies_on: int

    def run(self, pool, keep, seed, *, device="cpu", inclusion_rate=0.5):
        marker = pathlib.Path(self.marker_dir) / f"{seed}"
        if seed == self.dies_on and not marker.exists():
            marker.touch()
            os._exit(1)  # the worker process vanishes mid-task
        return self.inner.run(pool, keep, seed, device=device, inclusion_rate=inclusion_rate)


def test_a_session_starts_its_own_ray_beside_a_recorded_cluster_shares_it_retries_a_lost_worker_and_stops_it(
    setup, cluster, no_ray, tmp_path
):
    """An audit in rounds: a `ray_session` without an address starts a local Ray of its own although the
    cluster is the one recorded for this machine; each look is one `execute` inside it, which finds the
    session's Ray running and leaves it so (the next look finds its workers); a task whose worker dies
    (`DiesOnce`) is run again; every run arrives once with the inline executor's results, bit for bit;
    and leaving the session stops its Ray."""
    from ray._private.services import find_bootstrap_address

    ray = no_ray
    pool, tasks, victim = setup
    inline = {
        t.run: obs for t, obs, _ in execute(tasks, victim=victim, pool=pool, config=ExecutorConfig(kind="inline"))
    }
    # Without an address the session starts its own Ray although the cluster is the one recorded for
    # this machine: ray.init(address=None) would try to join it, and refuse the num_cpus a local start
    # passes ("When connecting to an existing cluster, num_cpus ... must not be provided").
    assert find_bootstrap_address(None) == cluster.address
    config = ExecutorConfig(kind="ray", workers=2)
    with ray_session(config):
        assert ray.get_runtime_context().gcs_address != cluster.address  # a local Ray, not the cluster
        first = list(execute(tasks[:1], victim=victim, pool=pool, config=config))
        assert ray.is_initialized()  # the first look's end does not stop the session's Ray
        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import the tests
        try:
            dies = DiesOnce(victim, str(tmp_path), dies_on=tasks[2].seed)  # its worker dies; run 1's does not
            second = list(execute(tasks[1:], victim=dies, pool=pool, config=config))
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        assert ray.is_initialized()
    assert not ray.is_initialized()  # leaving the session does
    assert [p.name for p in tmp_path.iterdir()] == [str(tasks[2].seed)]  # it died once, then ran again
    assert sorted(t.run for t, _, _ in first + second) == [0, 1, 2]
    for task, obs, meta in first + second:
        assert meta["run"] == task.run and meta["seed"] == task.seed and meta["wall_s"] > 0 and meta["host"]
        # One torch thread per run in both executors, so the floating-point results agree exactly.
        assert np.array_equal(obs.logits, inline[task.run].logits)
        assert obs.test_accuracy == inline[task.run].test_accuracy
    with ray_session(ExecutorConfig(kind="inline")):  # inline: nothing to start
        assert not ray.is_initialized()
