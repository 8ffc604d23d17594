"""A batched command (`batch = K` in its pipeline file: K seeds per call, handed as a jobs file;
victims/command_jobs.py, docs/contracts.md "A pipeline as a command"), audited on Fair with
marginals_command.py, a tiny synthesizer that fits each seed's release from that seed alone, batched or
not, and writes down the seeds of every call it makes."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from audit import lira
from shadow_runs.plan import run_seed
from victims import get_victim

SCRIPT = Path(__file__).with_name("marginals_command.py")
FLAGS = ["--victim", "command", "--dataset", "fair", "--classifier-iterations", "10", "--executor", "inline"]


def pipeline(directory: Path, *, batch: int | None, timeout_s: float = 60, args: tuple[str, ...] = ()) -> Path:
    """pipeline.toml running marginals_command.py with this interpreter, its calls written to directory/calls."""
    (directory / "calls").mkdir(parents=True)
    command = [sys.executable, str(SCRIPT), "--calls", str(directory / "calls"), *args]
    lines = ['kind = "table"', f"command = {json.dumps(command)}", f"timeout_s = {timeout_s}"]
    (directory / "pipeline.toml").write_text("\n".join(lines + ([f"batch = {batch}"] if batch else [])) + "\n")
    return directory / "pipeline.toml"


def calls(toml: Path) -> list[list[int]]:
    """The seeds of each call the command made, sorted by their first seed's run."""
    return sorted(json.loads(p.read_text()) for p in (toml.parent / "calls").iterdir())


def audit(toml: Path, runs: Path, *flags: str, n_shadow: int = 4) -> Path:
    assert (
        lira.main(
            ["--runs-dir", str(runs), *FLAGS, "--pipeline", str(toml), "--n-shadow", str(n_shadow), "--quiet", *flags]
        )
        == 0
    )
    (store,) = runs.iterdir()
    return store


def runs_of(store: Path) -> list[dict]:
    found = []
    for path in sorted((store / "runs").glob("*.npz")):
        with np.load(path) as z:
            found.append({**{k: z[k] for k in z.files}, **json.loads(path.with_suffix(".json").read_text())})
    return found


@pytest.fixture(scope="module")
def one_call_per_seed(tmp_path_factory):
    """The audit of 4 runs by the unbatched command: its store and its calls."""
    where = tmp_path_factory.mktemp("unbatched")
    toml = pipeline(where, batch=None)
    return audit(toml, where / "runs"), calls(toml)


SEEDS = [run_seed(master_seed=0, run=r) for r in range(4)]


@pytest.mark.parametrize(
    "flags,per_call",
    [
        ((), [SEEDS[0:2], SEEDS[2:4]]),  # no --runs-per-task: the declared batch
        (("--runs-per-task", "1"), [[s] for s in SEEDS]),  # one seed a task, still as a job
        (("--runs-per-task", "3"), [SEEDS[0:2], SEEDS[2:3], SEEDS[3:4]]),  # a pack of 3 in calls of 2 and 1
    ],
    ids=["default", "one-per-task", "three-per-task"],
)
def test_a_batched_command_fits_k_seeds_a_call_and_each_release_is_that_of_its_own_call(
    one_call_per_seed, tmp_path, flags, per_call
):
    unbatched, unbatched_calls = one_call_per_seed
    assert sorted(unbatched_calls) == sorted([s] for s in SEEDS)
    toml = pipeline(tmp_path, batch=2)
    store = audit(toml, tmp_path / "runs", *flags)
    assert calls(toml) == sorted(per_call)
    batched, alone = runs_of(store), runs_of(unbatched)
    for run, ours, theirs in zip(range(4), batched, alone):
        assert ours["seed"] == theirs["seed"] == SEEDS[run]
        for key in ("release_x", "release_y", "logits"):
            assert np.array_equal(ours[key], theirs[key]), (run, key)
        call = next(c for c in per_call if SEEDS[run] in c)
        assert ours["command"]["seeds_in_call"] == call and "seeds_in_call" not in theirs["command"]
        assert f"fitting seed {SEEDS[run]}" in ours["command"]["stdout"]
    mine, theirs = (json.loads((s / "audit" / "summary.json").read_text()) for s in (store, unbatched))
    assert mine["attacks"] == theirs["attacks"] and mine["verdict"] == theirs["verdict"]
    assert mine["utility"] == theirs["utility"]


def failed_audit(toml: Path, runs: Path, capsys, n_shadow: int = 6) -> tuple[str, Path]:
    """The one line of an audit that exits 2, and its store."""
    with pytest.raises(SystemExit) as exit_:
        lira.main(["--runs-dir", str(runs), *FLAGS, "--pipeline", str(toml), "--n-shadow", str(n_shadow), "--quiet"])
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2
    (store,) = runs.iterdir()
    return err, store


@pytest.mark.parametrize(
    "flag,says",
    [
        (
            "--fail-seed",
            "pipeline.toml: the command exited 1 with 0 of 2 releases written, none for this seed; its log ends: "
            "diverged on seed {seed}; 2 of 6 runs are stored in {store} and kept",
        ),
        (
            "--bad-seed",
            "pipeline.toml: the release release.csv: no label column 'rate_marriage' (the schema's columns: "
            "rate_marriage, age, yrs_married, children, religious, educ, occupation, occupation_husb, affairs); "
            "2 of 6 runs are stored in {store} and kept",
        ),
    ],
    ids=["exits-1", "malformed-release"],
)
def test_a_failed_seed_in_a_pack_ends_the_audit_in_one_line_naming_it_and_keeps_the_other_packs(
    tmp_path, capsys, flag, says
):
    seed = run_seed(master_seed=0, run=2)  # the first of the second pack of 2: runs 0 and 1 are stored
    if flag == "--bad-seed":
        seed = run_seed(master_seed=0, run=3)  # the second: the command exits 0, run 3's release is malformed
    toml = pipeline(tmp_path, batch=2, args=(flag, str(seed)))
    err, store = failed_audit(toml, tmp_path / "runs", capsys)
    run = 2 if flag == "--fail-seed" else 3
    assert err == f"audit: error: run {run} (seed {seed}): " + says.format(seed=seed, store=store)
    assert sorted(p.name for p in (store / "runs").iterdir()) == [
        f"0000{r}.{e}" for r in (0, 1) for e in ("json", "npz")
    ]


def test_a_batched_call_past_its_time_limit_is_one_line_naming_the_seed_it_was_on(tmp_path, capsys):
    seed = run_seed(master_seed=0, run=0)
    toml = pipeline(tmp_path, batch=2, timeout_s=1, args=("--hang-seed", str(seed)))
    err, store = failed_audit(toml, tmp_path / "runs", capsys, n_shadow=4)
    # the log's end is "fitting seed ..." once the command got that far in its 2 s, "(no output)" before
    assert err.startswith(
        f"audit: error: run 0 (seed {seed}): pipeline.toml: the command ran past timeout_s x 2 seeds = 2 s and was "
        "killed with 0 of 2 releases written, none for this seed; its log ends: "
    )
    assert err.endswith(f"; 0 of 4 runs are stored in {store} and kept")


@pytest.mark.parametrize(
    "lines,message",
    [
        (["batch = 0"], "batch must be a whole number of seeds per call >= 1, got 0"),
        (["batch = -2"], "batch must be a whole number of seeds per call >= 1, got -2"),
        (["batch = 2.5"], "batch must be a whole number of seeds per call >= 1, got 2.5"),
        (['batch = "4"'], "batch must be a whole number of seeds per call >= 1, got '4'"),
        (["batch = true"], "batch must be a whole number of seeds per call >= 1, got True"),
        (['command = ["x", "{jobs}"]'], r"command uses \{jobs\}, which only a batched command gets \(batch = K\)"),
        (
            ['command = ["x", "{seed}"]', "batch = 4"],
            r"command uses \{seed\}, which a batched command \(batch = 4\) finds per job in \{jobs\}",
        ),
    ],
)
def test_a_bad_batch_is_refused_in_one_line_naming_the_file(tmp_path, lines, message):
    toml = tmp_path / "p.toml"
    has_command = any(line.startswith("command") for line in lines)
    toml.write_text("\n".join(['kind = "table"', *([] if has_command else ['command = ["x"]']), *lines]) + "\n")
    with pytest.raises(ValueError, match=message) as refused:
        get_victim("command")(pipeline=str(toml))
    assert str(toml) in str(refused.value) and "\n" not in str(refused.value)


def test_the_cli_refuses_a_bad_batch_with_exit_2_and_writes_nothing(tmp_path, capsys):
    toml = tmp_path / "p.toml"
    toml.write_text('kind = "table"\ncommand = ["x"]\nbatch = 0\n')
    with pytest.raises(SystemExit) as exit_:
        lira.main(["--runs-dir", str(tmp_path / "runs"), *FLAGS, "--pipeline", str(toml), "--n-shadow", "4"])
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err.endswith(
        f"--pipeline {toml}: batch must be a whole number of seeds per call >= 1, got 0"
    )
    assert not (tmp_path / "runs").exists()
