"""`--compile auto|on|off` (`victims.compiled`): when auto compiles, the scope of compiled steps,
and the executor recording it. That a compiled run equals the eager one is a contract test
(`tests/contracts/test_victims.py`)."""

import numpy as np
import pytest
import torch

from audit.executor import ExecutorConfig, RunTask, execute, run_victims
from victims.base import Observations
from victims.compiled import compiled_steps, maybe_compiled, resolve_compile, runs_per_worker


def test_auto_compiles_where_each_worker_trains_enough_runs_to_pay_for_it():
    # 8x8 = 64 pixels: 160 runs a worker; 28x28 = 784 (and anything larger): 3; in between, 64's rule
    assert not resolve_compile("auto", runs_per_worker=159, pixels=64)
    assert resolve_compile("auto", runs_per_worker=160, pixels=64)
    assert not resolve_compile("auto", runs_per_worker=2, pixels=784)
    assert resolve_compile("auto", runs_per_worker=3, pixels=28 * 28)
    assert resolve_compile("auto", runs_per_worker=3, pixels=32 * 32)
    assert not resolve_compile("auto", runs_per_worker=100, pixels=16 * 16)
    # a victim's own counts (psg: 9 runs at 28x28) replace the table's
    psg = {64: 176, 784: 9}
    assert not resolve_compile("auto", runs_per_worker=8, pixels=784, break_even=psg)
    assert resolve_compile("auto", runs_per_worker=9, pixels=784, break_even=psg)
    assert resolve_compile("on", runs_per_worker=1, pixels=64) and not resolve_compile(
        "off", runs_per_worker=10**6, pixels=784
    )
    with pytest.raises(ValueError, match="--compile must be one of"):
        resolve_compile("always", runs_per_worker=1, pixels=64)
    # on a GPU auto stays eager whatever the count (an H100's compiled packs were no faster), on stays on
    assert not resolve_compile("auto", runs_per_worker=10**6, pixels=784, device="cuda")
    assert resolve_compile("on", runs_per_worker=1, pixels=64, device="cuda")
    assert runs_per_worker(5, 2) == 3 and runs_per_worker(256, 2) == 128 and runs_per_worker(3, 8) == 1


def test_compiled_steps_is_scoped_like_grad_mode():
    net = torch.nn.Linear(2, 2)
    assert maybe_compiled(net) is net
    with compiled_steps(True):
        compiled = maybe_compiled(net)
        with compiled_steps(False):
            assert maybe_compiled(net) is net
    assert compiled is not net and maybe_compiled(net) is net
    assert dict(compiled.named_parameters()) == {f"_orig_mod.{k}": v for k, v in net.named_parameters()}


class Constant:
    name = "constant"

    def run(self, pool, keep, seed, *, device="cpu", inclusion_rate=0.5):
        return Observations(logits=np.zeros((3, 1, 2), np.float32), test_accuracy=1.0)


def test_the_executor_records_compiled_runs_and_auto_stays_off_for_few_runs():
    task = RunTask(run=0, seed=1, keep=np.array([True, False, True]))
    ((_, meta),) = run_victims(Constant(), None, [task], device="cpu", compiled=True)
    assert meta["compiled"] is True
    ((_, meta),) = run_victims(Constant(), None, [task], device="cpu")
    assert "compiled" not in meta

    class Pool:
        image_shape = (1, 8, 8)

    Pool.image_shape = (1, 28, 28)
    tasks = [RunTask(run=r, seed=r, keep=task.keep) for r in range(4)]
    done = list(execute(tasks, victim=Constant(), pool=Pool(), config=ExecutorConfig(kind="inline")))
    assert not any("compiled" in meta for _, _, meta in done)  # auto never compiles inline, even 4 runs at 28x28
    ((_, _, meta),) = execute(
        [task], victim=Constant(), pool=Pool(), config=ExecutorConfig(kind="inline", compile="on")
    )
    assert meta["compiled"] is True
    with pytest.raises(ValueError, match="--compile must be one of"):
        ExecutorConfig(compile="sometimes")
