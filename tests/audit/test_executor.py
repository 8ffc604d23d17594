"""The Ray executor really starts a local Ray and gives the same runs as the inline executor.

Starting a local Ray and warming its workers (each imports torch and this package) costs ~15-25 s
here, so the tests that check only what runs on a Ray (packing, retries) share one that this
module starts (`running_ray`); the tests that check that the executor starts and stops its own
Ray (`no_ray`) stop the shared one first, whatever order the tests run in."""

import dataclasses
import os
import pathlib
import sys

import numpy as np
import pytest
from ray import cloudpickle

from shadow_runs import membership_matrix, run_seed
from audit.executor import GPU_RUNS_PER_TASK, ExecutorConfig, RunTask, execute, ray_session
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
def module_ray():
    """Stops, when the module's tests are done, the Ray that `running_ray` left running."""
    import ray

    yield
    ray.shutdown()


@pytest.fixture
def running_ray(module_ray):
    """A local Ray running in this process before the executor is called (one per module, shared)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    return ray


@pytest.fixture
def no_ray(module_ray):
    """No Ray in this process: the executor has to start (and stop) its own."""
    import ray

    ray.shutdown()
    return ray


def test_runs_per_task_default_to_a_batched_commands_batch_else_one_on_a_cpu_and_more_on_a_gpu(tmp_path):
    (tmp_path / "p.toml").write_text('kind = "table"\ncommand = ["synth"]\nbatch = 4\n')
    batched, other = get_victim("command")(pipeline=str(tmp_path / "p.toml")), get_victim("real")()
    assert ExecutorConfig(runs_per_task=None).per_task(batched) == 4
    assert ExecutorConfig(runs_per_task=None, device="cuda").per_task(batched) == 4
    assert ExecutorConfig(runs_per_task=2).per_task(batched) == 2  # --runs-per-task where given
    assert ExecutorConfig(runs_per_task=None).per_task(other) == 1
    assert ExecutorConfig(runs_per_task=None, gpus_per_run=0.5).per_task(other) == GPU_RUNS_PER_TASK


@pytest.mark.usefixtures("no_ray")
def test_ray_runs_every_task_once_matches_inline_and_shuts_down(setup):
    import ray

    pool, tasks, victim = setup
    inline = {
        t.run: (obs, meta)
        for t, obs, meta in execute(tasks, victim=victim, pool=pool, config=ExecutorConfig(kind="inline"))
    }
    ray_results = list(execute(tasks, victim=victim, pool=pool, config=ExecutorConfig(kind="ray", workers=2)))
    assert sorted(t.run for t, _, _ in ray_results) == [0, 1, 2]
    for task, obs, meta in ray_results:
        assert meta["run"] == task.run and meta["seed"] == task.seed and meta["wall_s"] > 0 and meta["host"]
        # One torch thread per run in both executors, so the floating-point results agree exactly.
        assert np.array_equal(obs.logits, inline[task.run][0].logits)
        assert obs.test_accuracy == inline[task.run][0].test_accuracy
    assert not ray.is_initialized()  # the Ray it started is shut down


@pytest.mark.usefixtures("no_ray")
def test_executions_inside_one_ray_session_share_its_ray_and_it_stops_after(setup):
    # an audit in rounds: each look is one `execute`; inside the session the first look's end does
    # not stop Ray (so the second look finds its workers), and leaving the session does
    import ray

    pool, tasks, victim = setup
    config = ExecutorConfig(kind="ray", workers=2)
    with ray_session(config):
        first = list(execute(tasks[:1], victim=victim, pool=pool, config=config))
        assert ray.is_initialized()
        second = list(execute(tasks[1:], victim=victim, pool=pool, config=config))
        assert ray.is_initialized()
    assert not ray.is_initialized()
    assert sorted(t.run for t, _, _ in first + second) == [0, 1, 2]
    with ray_session(ExecutorConfig(kind="inline")):  # inline: nothing to start
        assert not ray.is_initialized()


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


@pytest.mark.usefixtures("no_ray")
def test_joins_an_existing_cluster_by_address_and_a_local_run_does_not(setup):
    import ray
    from ray.cluster_utils import Cluster

    pool, tasks, victim = setup
    # a real head node with its own raylet; shut down below by its handle, so no other Ray on the
    # machine is touched (`ray stop --force` would stop them all)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    try:
        results = list(
            execute(tasks[:2], victim=victim, pool=pool, config=ExecutorConfig(kind="ray", address=cluster.address))
        )
        assert sorted(t.run for t, _, _ in results) == [0, 1]
        # Without an address the executor starts its own Ray although this cluster is the one
        # recorded for this machine: ray.init(address=None) would try to join it, and refuse the
        # num_cpus a local start passes ("When connecting to an existing cluster, num_cpus ... must
        # not be provided").
        from ray._private.services import find_bootstrap_address

        assert find_bootstrap_address(None) == cluster.address
        local = list(execute(tasks[:1], victim=victim, pool=pool, config=ExecutorConfig(kind="ray", workers=1)))
        assert [t.run for t, _, _ in local] == [0]
    finally:
        cluster.shutdown()
    assert not ray.is_initialized()


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


def test_packed_tasks_run_every_run_once_on_ray_with_its_own_result(setup, running_ray):
    """--runs-per-task 2 over 3 runs: one pack of two and one task of one, on a real local Ray that
    was running before (the module's); each run's logits equal its unpacked run's within float
    tolerance (the lone run exactly), and the Ray the executor joined is left running."""
    pool, tasks, victim = setup
    inline = {
        t.run: obs for t, obs, _ in execute(tasks, victim=victim, pool=pool, config=ExecutorConfig(kind="inline"))
    }
    packed = list(
        execute(tasks, victim=victim, pool=pool, config=ExecutorConfig(kind="ray", workers=2, runs_per_task=2))
    )
    assert sorted(t.run for t, _, _ in packed) == [0, 1, 2]
    for task, obs, meta in packed:
        assert meta["run"] == task.run and meta["seed"] == task.seed and meta["wall_s"] > 0
        assert meta.get("runs_in_task", 1) == (2 if task.run < 2 else 1)
        np.testing.assert_allclose(obs.logits, inline[task.run].logits, rtol=0, atol=1e-4)
        if task.run == 2:
            assert np.array_equal(obs.logits, inline[task.run].logits)
    assert running_ray.is_initialized()  # not the executor's to stop


@dataclasses.dataclass(frozen=True)
class DiesOnce:
    """A victim whose worker process dies (as if killed) the first time it runs a given task."""

    inner: object
    marker_dir: str

    def run(self, pool, keep, seed, *, device="cpu", inclusion_rate=0.5):
        marker = pathlib.Path(self.marker_dir) / f"{seed}"
        if not marker.exists():
            marker.touch()
            os._exit(1)  # the worker process vanishes mid-task
        return self.inner.run(pool, keep, seed, device=device, inclusion_rate=inclusion_rate)


@pytest.mark.usefixtures("running_ray")
def test_a_lost_worker_is_retried(setup, tmp_path):
    pool, tasks, victim = setup
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import the tests
    try:
        results = list(
            execute(
                tasks[:2],
                victim=DiesOnce(victim, str(tmp_path)),
                pool=pool,
                config=ExecutorConfig(kind="ray", workers=2),
            )
        )
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert sorted(t.run for t, _, _ in results) == [0, 1]
    assert len(list(tmp_path.iterdir())) == 2  # each task died once, then succeeded
