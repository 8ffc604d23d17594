"""The layout rule (`audit.placement`) on mocked GPU inventories, the one line it prints, and a Ray that
cannot start ending in one line with exit status 2."""

import pytest

from audit import placement
from audit.executor import ExecutorConfig, RayUnavailable, ray_session
from audit.placement import Gpu, place

H200 = Gpu("NVIDIA H200", 143771)


def test_a_packing_victim_gets_one_task_per_gpu_and_a_quarter_of_its_runs_per_pack():
    # 256 runs, 1 GPU: 256 / (1 x 4) = 64 runs a pack; memory: 143771 MiB x 0.5 / 57.6 = 1247 runs fit
    chosen = place(ExecutorConfig(), gpus=[H200], packs=True, n_runs=256, mib_per_run=57.6, cores=16)
    assert (chosen.config.workers, chosen.config.gpus_per_run, chosen.config.runs_per_task) == (1, 1.0, 64)
    assert chosen.config.device == "cuda"
    assert chosen.line == (
        "device: 1 GPU (NVIDIA H200, 140 GiB): 1 task at a time, 1 GPU each, packs of 64 per task; "
        "--workers, --gpus-per-run and --runs-per-task override"
    )


def test_two_gpus_halve_each_pack_and_memory_caps_it():
    # 256 runs on 2 GPUs: ceil(256 / 8) = 32 a pack; 8 GiB GPUs at 600 MiB a run: 8192 x 0.5 // 600 = 6
    gpus = [Gpu("A", 143771)] * 2
    assert (
        place(ExecutorConfig(), gpus=gpus, packs=True, n_runs=256, mib_per_run=57.6, cores=16).config.runs_per_task
        == 32
    )
    small = [Gpu("small", 8192)] * 2
    chosen = place(ExecutorConfig(), gpus=small, packs=True, n_runs=256, mib_per_run=600, cores=16).config
    assert (chosen.workers, chosen.runs_per_task) == (2, 6)


def test_a_victim_that_does_not_pack_shares_the_gpu_among_the_cores():
    # 1 GPU, 16 cores: 16 tasks at a time, 1/16 = 0.0625 of the GPU each, one run a task
    chosen = place(ExecutorConfig(), gpus=[H200], packs=False, n_runs=64, mib_per_run=57.6, cores=16)
    assert (chosen.config.workers, chosen.config.gpus_per_run, chosen.config.runs_per_task) == (16, 0.0625, 1)
    assert "16 tasks at a time, 0.0625 GPU each, runs of 1 per task (the victim does not pack)" in chosen.line


def test_given_flags_override_the_rule():
    given = ExecutorConfig(gpus_per_run=0.25, runs_per_task=8)
    chosen = place(given, gpus=[H200], packs=True, n_runs=256, mib_per_run=57.6, cores=16).config
    assert (chosen.workers, chosen.gpus_per_run, chosen.runs_per_task) == (4, 0.25, 8)
    assert (
        place(ExecutorConfig(workers=3), gpus=[H200], packs=False, n_runs=8, mib_per_run=1, cores=16).config.workers
        == 3
    )


def test_without_a_gpu_or_on_the_cpu_nothing_changes_and_nothing_is_said():
    for config, gpus in ((ExecutorConfig(), []), (ExecutorConfig(device="cpu"), [H200])):
        chosen = place(config, gpus=gpus, packs=True, n_runs=256, mib_per_run=57.6, cores=2)
        assert (chosen.config.gpus_per_run, chosen.config.runs_per_task, chosen.line) == (0.0, 1, None)
    with pytest.raises(ValueError, match="--device cuda: no GPU is visible here"):
        place(ExecutorConfig(device="cuda"), gpus=[], packs=True, n_runs=4, mib_per_run=1, cores=2)


def test_layout_reads_the_local_inventory_and_the_victim(monkeypatch):
    monkeypatch.setattr(placement, "local_gpus", lambda: [H200])

    class Packs:
        name = "psg"

        def run_packed(self): ...

    chosen = placement.layout(ExecutorConfig(), victim=Packs(), pixels=64, n_runs=16)
    assert (chosen.config.runs_per_task, chosen.config.gpus_per_run) == (4, 1.0)  # ceil(16 / 4)


def test_the_footprint_is_the_measured_one_scaled_above_the_sizes_measured(monkeypatch):
    monkeypatch.setattr(placement, "MIB_PER_RUN", {"psg": {64: 12.6}, "real": {64: 12.4, 784: 50.0}})

    def victim(name):
        return type("V", (), {"name": name})()

    assert placement.mib_per_run(victim("real"), 64) == 12.4
    assert placement.mib_per_run(victim("real"), 100) == 50.0  # the next size measured above
    assert placement.mib_per_run(victim("psg"), 784) == 12.6 * 784 / 64  # 154.35: scaled by the pixels
    assert placement.mib_per_run(victim("kip"), 784) == 12.6 * 784 / 64  # unmeasured: the largest of them


def test_a_ray_that_cannot_start_is_one_line(monkeypatch):
    import ray

    def timed_out(**_):
        raise Exception("The current node timed out during startup. This could happen because some of the Ray\nmore")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", timed_out)
    with pytest.raises(RayUnavailable) as e, ray_session(ExecutorConfig(workers=1)):
        pass
    assert str(e.value) == (
        "could not start Ray here: The current node timed out during startup. This could happen because some of "
        "the Ray; --executor inline runs without Ray"
    )


def test_the_audit_ends_in_one_line_and_exit_2_when_ray_cannot_start(monkeypatch, tmp_path, capsys):
    import ray

    from audit import lira

    def timed_out(**_):
        raise Exception("The current node timed out during startup.\nTraceback ...")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", timed_out)
    with pytest.raises(SystemExit) as e:
        lira.main(["--victim", "real", "--train-steps", "1", "--n-shadow", "4", "--runs-dir", str(tmp_path), "--quiet"])
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "could not start Ray here: The current node timed out during startup.; --executor inline runs without Ray; "
        "0 of 4 runs are stored in " + str(next(tmp_path.iterdir())) + " and kept"
    ), lines


def test_a_batched_command_gets_its_declared_batch_per_task_wherever_it_runs(tmp_path):
    from victims import get_victim

    (tmp_path / "p.toml").write_text('kind = "table"\ncommand = ["synth"]\nbatch = 4\n')
    batched = get_victim("command")(pipeline=str(tmp_path / "p.toml"))
    for config, gpus in ((ExecutorConfig(), []), (ExecutorConfig(device="cuda"), [H200])):
        chosen = placement.place(
            config, gpus=gpus, packs=True, n_runs=64, mib_per_run=1, cores=16, calls=batched.runs_per_call
        )
        assert (chosen.config.runs_per_task, chosen.config.gpus_per_run, chosen.line) == (4, 0.0, None)
    given = ExecutorConfig(runs_per_task=2)  # --runs-per-task where given
    assert (
        placement.place(given, gpus=[], packs=True, n_runs=8, mib_per_run=1, cores=2, calls=4).config.runs_per_task == 2
    )
