"""The `command` victim (victims/pipelines/command.py, docs/contracts.md "A pipeline as a command"):
tiny pipelines that these tests write, Python scripts run with this interpreter, on a table (Fair)
and on images (digits); and subset_as_command.py, subset's release as a command, run under a virtual
environment's interpreter to show its audit equal to the in-process path's. It is either kind, so
it is not in test_victims.py's or test_tabular_victims.py's FAST: the victim contract's checks are
run here on one pipeline of each kind."""

import dataclasses
import json
import os
import re
import signal
import site
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from audit import lira
from shadow_runs.plan import membership_matrix, run_seed
from victims import get_victim, load_pool
from victims.base import RunError, check_pool_kind
from victims.nets import NetConfig
from victims.synthetic import DOWNSTREAM_STREAM, train_on_release
from victims.train import TrainConfig, n_queries

ROOT = Path(__file__).resolve().parents[2]

#: copies 50 member rows (drawn by the seed) to the release; its claim names a measurement, kept as it is
COPY_ROWS = """
import csv, json, os, random, sys
members, seed, out = sys.argv[1:4]
with open(members) as f:
    header, *rows = list(csv.reader(f))
chosen = random.Random(int(seed)).sample(rows, 50)
with open(out, "w", newline="") as f:
    csv.writer(f).writerows([header, *chosen])
print(f"copied 50 of {len(rows)} member rows")
claim = {"epsilon": 2.5, "delta": 1e-6, "accountant": "none", "measurements": [1.5, -0.25]}
json.dump(claim, open(os.environ["MIA_CLAIM"], "w"))
"""
#: writes back 2 member images of each class (drawn by the seed)
COPY_IMAGES = """
import os, numpy as np
members = np.load(os.environ["MIA_MEMBERS"])
x, y = members["x"], members["y"]
rng = np.random.default_rng(int(os.environ["MIA_SEED"]))
chosen = np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), 2, replace=False) for c in range(10)]))
np.savez(os.environ["MIA_OUT"], x=x[chosen], y=y[chosen])
"""
TABLE_FLAGS = ["--victim", "command", "--dataset", "fair", "--classifier-iterations", "10"]
QUICK = ["--executor", "inline", "--quiet"]


def write_pipeline(
    directory: Path, script: str, *, kind="table", timeout_s=60, args=None, python=sys.executable, **more
) -> Path:
    """pipeline.py (`script`) and pipeline.toml running it with `python` (this interpreter unless given);
    `more`: more TOML keys."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pipeline.py").write_text(textwrap.dedent(script))
    command = [str(python), "pipeline.py", *(args if args is not None else ["{members}", "{seed}", "{out}"])]
    lines = [f"kind = {kind!r}", f"command = {json.dumps(command)}", f"timeout_s = {timeout_s}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in more.items()]
    (directory / "pipeline.toml").write_text("\n".join(lines) + "\n")
    return directory / "pipeline.toml"


@pytest.fixture(scope="module")
def table():
    return load_pool("fair")


@pytest.fixture(scope="module")
def table_keep(table):
    return membership_matrix(table.y, n_runs=2, master_seed=0)[0]


@pytest.fixture(scope="module")
def copier(tmp_path_factory):
    return get_victim("command")(pipeline=str(write_pipeline(tmp_path_factory.mktemp("copy"), COPY_ROWS)))


@pytest.fixture(scope="module")
def imager(tmp_path_factory):
    toml = write_pipeline(tmp_path_factory.mktemp("images"), COPY_IMAGES, kind="images", args=[])
    return get_victim("command")(pipeline=str(toml), train=TrainConfig(steps=15, net=NetConfig(width=16)))


# -- the pipeline file ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,message",
    [
        ('kind = "table"\ncommand = ["x"]\ncolour = 1\n', "unknown key 'colour'"),
        ('kind = "table"\n', "no command"),
        ('kind = "table"\ncommand = "python x.py"\n', "command must be a non-empty list"),
        ('kind = "table"\ncommand = ["x"]\ntimeout_s = 0\n', "timeout_s must be a number of seconds > 0, got 0"),
        ('kind = "table"\ncommand = ["x"]\ntimeout_s = -5.0\n', "timeout_s must be a number of seconds > 0, got -5.0"),
        ('kind = "text"\ncommand = ["x"]\n', "kind must be one of 'table', 'images', got 'text'"),
        ('kind = "table"\ncommand = ["x", "{member}"]\n', r"command uses \{member\}, which is none of"),
        ('kind = "table"\ncommand = ["x"]\nrequirements = "lock.txt"\n', "requirements names 'lock.txt'"),
        ('kind = "table"\ncommand = [\n', "not valid TOML"),
    ],
)
def test_a_bad_pipeline_file_is_refused_in_one_line_naming_it(tmp_path, text, message):
    toml = tmp_path / "p.toml"
    toml.write_text(text)
    with pytest.raises(ValueError, match=message) as refused:
        get_victim("command")(pipeline=str(toml))
    assert str(toml) in str(refused.value) and "\n" not in str(refused.value)


def test_the_cli_refuses_a_bad_pipeline_file_with_exit_2_and_nothing_written(tmp_path, capsys):
    toml = tmp_path / "p.toml"
    toml.write_text('kind = "table"\ncommand = ["x"]\ntimeout_s = 0\n')
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_:
        lira.main(["--runs-dir", str(runs), *TABLE_FLAGS, "--pipeline", str(toml), "--n-shadow", "4", *QUICK])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "timeout_s must be a number of seconds > 0, got 0" in err[0]
    assert not runs.exists()


def test_the_kind_must_match_the_pool_and_a_placeholder_needs_its_flag(copier, table, pool, tmp_path):
    check_pool_kind(copier, pool)  # either kind: the victim's own check decides
    with pytest.raises(ValueError, match="has kind = 'table', and --dataset digits holds images"):
        copier.check(pool)
    copier.check(table)
    toml = write_pipeline(tmp_path, COPY_ROWS, args=["{members}", "{epsilon}"])
    with pytest.raises(ValueError, match=r"its command passes \{epsilon\}; give --epsilon"):
        get_victim("command")(pipeline=str(toml)).check(table)
    get_victim("command")(pipeline=str(toml), epsilon=1.0).check(table)
    with pytest.raises(ValueError, match="needs --pipeline"):
        get_victim("command")().check(table)


# -- a run: the victim contract on each kind --------------------------------------------------------
def test_a_table_run_releases_member_rows_and_keeps_the_log_and_the_claim(copier, table, table_keep):
    observed = copier.run(table, table_keep, 7)
    assert observed.logits.shape == (table.n_pool, 1, table.n_classes) and np.isfinite(observed.logits).all()
    assert observed.release_x.shape == (50, table.x.shape[1]) and set(observed.utility) >= {"test_auroc"}
    members = {row.tobytes() for row in np.column_stack([table.x[table_keep], table.y[table_keep]])}
    assert all(r.tobytes() in members for r in np.column_stack([observed.release_x, observed.release_y]))
    # the command's own claim is the run's formal one, and is stored as it is, with the ends of its log
    assert (observed.formal_epsilon, observed.delta) == (2.5, 1e-6)
    _, meta = observed.to_store({"run": 0})
    assert meta["command"]["claim"]["measurements"] == [1.5, -0.25] and meta["command"]["stderr"] == ""
    assert meta["command"]["stdout"] == f"copied 50 of {table_keep.sum()} member rows\n"
    again = copier.run(table, table_keep, 7)
    assert np.array_equal(again.release_x, observed.release_x) and np.array_equal(again.logits, observed.logits)
    assert not np.array_equal(copier.run(table, table_keep, 8).release_x, observed.release_x)
    # members are the only records it touches: every non-member replaced, the same release and member view
    shuffled = table.x[np.random.default_rng(0).permutation(table.n_pool)]
    altered = copier.run(dataclasses.replace(table, x=np.where(table_keep[:, None], table.x, shuffled)), table_keep, 7)
    assert np.array_equal(altered.release_x, observed.release_x)
    assert np.array_equal(altered.logits[table_keep], observed.logits[table_keep])


def test_an_image_run_trains_the_downstream_convnet_on_its_release(imager, pool, keep):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    observed = imager.run(pool, keep, 7)
    assert torch.equal(torch.rand(3), expected)  # the global RNG left alone
    assert observed.logits.shape == (pool.n_pool, n_queries(flip_ok=pool.flip_ok), pool.n_classes)
    assert observed.release_x.shape == (20, *pool.image_shape)
    assert np.array_equal(np.bincount(observed.release_y, minlength=10), np.full(10, 2))
    rows = {x.tobytes() for x in pool.x[keep]}
    assert all(x.tobytes() in rows for x in observed.release_x)  # member images, on the pool's scale
    assert observed.formal_epsilon is None and 0 <= observed.test_accuracy <= 1
    again = imager.run(pool, keep, 7)
    assert np.array_equal(again.logits, observed.logits) and np.array_equal(again.release_x, observed.release_x)
    noise = np.random.default_rng(0).uniform(size=pool.x.shape).astype(np.float32)
    altered = imager.run(dataclasses.replace(pool, x=np.where(keep[:, None, None, None], pool.x, noise)), keep, 7)
    assert np.array_equal(altered.logits[keep], observed.logits[keep])


def test_a_command_that_fails_or_runs_out_of_time_is_one_line_with_its_log(table, table_keep, tmp_path):
    failing = write_pipeline(tmp_path / "fail", "import sys\nprint('step 1')\nsys.exit('the synthesizer diverged')\n")
    with pytest.raises(RunError, match=r"exited 1; its log ends: the synthesizer diverged$"):
        get_victim("command")(pipeline=str(failing)).run(table, table_keep, 1)
    slow = write_pipeline(tmp_path / "slow", "import time\nprint('working', flush=True)\ntime.sleep(60)\n", timeout_s=1)
    start = time.perf_counter()
    with pytest.raises(RunError, match=r"ran past timeout_s = 1 s and was killed; its log ends: working$"):
        get_victim("command")(pipeline=str(slow)).run(table, table_keep, 1)
    assert time.perf_counter() - start < 10


# -- the audit --------------------------------------------------------------------------------------
def test_an_image_audit_of_four_runs_end_to_end(imager, tmp_path):
    runs = tmp_path / "runs"
    flags = ["--victim", "command", "--pipeline", imager.pipeline, "--train-steps", "10", "--train-net-width", "8"]
    assert lira.main(["--runs-dir", str(runs), *flags, "--n-shadow", "4", *QUICK]) == 0
    (store,) = runs.iterdir()
    summary = json.loads((store / "audit" / "summary.json").read_text())
    assert summary["dataset"] == "digits" and summary["n_shadow"] == 4 and summary["formal_epsilon"] is None
    with np.load(store / "runs" / "00000.npz") as run:
        assert run["release_x"].shape == (20, 1, 8, 8) and run["logits"].shape[0] == 1500


def test_a_failing_run_stops_the_audit_in_one_line_and_keeps_the_runs_before(tmp_path, capsys):
    bad_seed = run_seed(master_seed=0, run=2)
    script = COPY_ROWS + f"if int(seed) == {bad_seed}:\n    sys.exit('out of memory at step 3')\n"
    toml = write_pipeline(tmp_path / "p", script)
    runs = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_:
        lira.main(["--runs-dir", str(runs), *TABLE_FLAGS, "--pipeline", str(toml), "--n-shadow", "4", *QUICK])
    (err,) = capsys.readouterr().err.strip().splitlines()
    (store,) = runs.iterdir()
    assert exit_.value.code == 2
    assert err.startswith(f"audit: error: run 2 (seed {bad_seed}): pipeline.toml: the command exited 1; its log ends: ")
    assert err.endswith(f"ends: out of memory at step 3; 2 of 4 runs are stored in {store} and kept")  # stderr's end
    assert sorted(p.name for p in (store / "runs").iterdir()) == ["00000.json", "00000.npz", "00001.json", "00001.npz"]


@pytest.mark.parametrize(
    "script,message",
    [
        (
            COPY_IMAGES.replace("x=x[chosen]", "x=x[chosen].reshape(20, -1)"),
            r"the release release.npz: x must be \[k, 1, 8, 8\] \(the pool's images, k >= 1\), got shape \[20, 64\]",
        ),
        (
            COPY_ROWS.replace("chosen = random", "rows[0][0] = 'never'\nchosen = random").replace(
                "sample(rows, 50)", "sample(rows[:1], 1)"
            ),
            r"the release release.csv: column 'rate_marriage' holds 'never', outside its public categories",
        ),
    ],
    ids=["image-shape", "category"],
)
def test_a_release_that_does_not_fit_the_pool_exits_2_in_one_line(tmp_path, capsys, script, message):
    images = "MIA_MEMBERS" in script
    toml = write_pipeline(tmp_path / "p", script, kind="images" if images else "table", args=[] if images else None)
    flags = ["--victim", "command", "--train-steps", "5"] if images else TABLE_FLAGS
    with pytest.raises(SystemExit) as exit_:
        lira.main(["--runs-dir", str(tmp_path / "runs"), *flags, "--pipeline", str(toml), "--n-shadow", "4", *QUICK])
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and "run 0 (seed" in err
    assert re.search(message, err), err


def test_a_table_audit_of_four_runs_end_to_end_and_a_changed_environment_is_refused_unless_kept_on_purpose(
    copier, tmp_path, capsys
):
    # the first audit is also the table audit end to end (one audit of 4 runs checks both)
    assert set(copier.environment()["files"]) == {"pipeline.toml"}  # a pipeline file that names no other file
    toml = write_pipeline(tmp_path / "p", COPY_ROWS, requirements="requirements.lock", source=["pipeline.py"])
    lock = tmp_path / "p" / "requirements.lock"
    lock.write_text("numpy==2.1.0\n")
    flags = ["--runs-dir", str(tmp_path / "runs"), *TABLE_FLAGS, "--pipeline", str(toml), "--n-shadow", "4", *QUICK]
    assert lira.main(flags) == 0
    (store,) = (tmp_path / "runs").iterdir()
    summary = json.loads((store / "audit" / "summary.json").read_text())
    assert summary["victim"] == "command" and summary["n_shadow"] == 4
    assert (summary["formal_epsilon"], summary["delta"]) == (2.5, 1e-6)  # the command's own claim
    assert {"lira_online", "dcr"} <= set(summary["attacks"])
    assert json.loads((store / "runs" / "00003.json").read_text())["command"]["claim"]["accountant"] == "none"
    before = json.loads((store / "experiment.json").read_text())
    assert set(before["victim_source"]["environment"]["files"]) == {"pipeline.toml", "requirements.lock", "pipeline.py"}
    lock.write_text("numpy==2.2.0\n")
    with pytest.raises(SystemExit) as exit_:
        lira.main(flags)
    (err,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert exit_.value.code == 2 and "holds runs of other victim code" in err and "--keep-runs-of-other-code" in err
    assert json.loads((store / "experiment.json").read_text()) == before  # nothing changed
    assert lira.main([*flags, "--keep-runs-of-other-code"]) == 0
    after = json.loads((store / "experiment.json").read_text())
    assert after["earlier_victim_sources"] == [{"sha256": before["victim_source"]["sha256"], "runs": 4}]
    assert (
        after["victim_source"]["environment"]["files"]["requirements.lock"]
        != (before["victim_source"]["environment"]["files"]["requirements.lock"])
    )


def test_an_interrupted_audit_resumes_with_only_the_missing_runs_and_leaves_no_command_running(tmp_path):
    # Each run's command writes its pid and sleeps 1 s while the file `slow` is there; Ctrl-C (SIGINT to the
    # audit's process group, so the audit is a process of its own) lands while a later run's command runs,
    # in a session of its own: the audit kills it and exits 130. The resume is about the run store: `main`
    # in this process, `slow` removed (its 3 runs need not wait: 3 s of the test's wall).
    script = "import os, time\nopen(f'pids/{os.getpid()}', 'w').close()\n"
    script += "if os.path.exists('slow'):\n    time.sleep(1)\n" + COPY_ROWS
    toml = write_pipeline(tmp_path / "p", script)
    (tmp_path / "p" / "pids").mkdir()
    (tmp_path / "p" / "slow").touch()
    flags = ["--runs-dir", str(tmp_path / "runs"), *TABLE_FLAGS, "--pipeline", str(toml), "--n-shadow", "4"]
    command = [sys.executable, "-m", "audit.lira", *flags, "--executor", "inline"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    runs = lambda: sorted(tmp_path.glob("runs/*/runs/*.json"))  # noqa: E731
    deadline = time.time() + 120
    while time.time() < deadline and not (runs() and len(list((tmp_path / "p" / "pids").iterdir())) == 2):
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("interrupted: 1 of 4 runs are stored in")
    for pid in (int(p.name) for p in (tmp_path / "p" / "pids").iterdir()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # no command left running
    kept = {p: p.stat().st_mtime_ns for p in runs()}
    (tmp_path / "p" / "slow").unlink()
    assert lira.main([*flags, *QUICK]) == 0
    assert len(runs()) == 4 and {p: p.stat().st_mtime_ns for p in kept} == kept
    assert len(list((tmp_path / "p" / "pids").iterdir())) == 2 + 3  # only the 3 missing runs ran again


# -- the same audit as the in-process path ----------------------------------------------------------
#: subset's release as a command, and as an in-process generator (`SubsetGenerator`): its module docstring
SUBSET_AS_COMMAND = Path(__file__).with_name("subset_as_command.py")
IPC = 4


def separate_environment(directory: Path) -> Path:
    """A virtual environment of its own, nothing installed in it: a .pth file in its site-packages names
    this checkout and this interpreter's site-packages, so it imports the suite and its dependencies from
    here without an install. Its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    python = directory / "bin" / "python"
    where = [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    purelib = Path(subprocess.run(where, check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "suite.pth").write_text("\n".join([str(ROOT), *site.getsitepackages()]) + "\n")
    return python


def audited(store: Path) -> dict:
    """A store's plan, runs (arrays and records) and summary."""
    runs = sorted((store / "runs").glob("*.npz"))
    arrays = []
    for path in runs:
        with np.load(path) as z:
            arrays.append({k: z[k] for k in z.files})
    return {
        "keep": np.load(store / "keep.npy"),
        "arrays": arrays,
        "records": [json.loads(path.with_suffix(".json").read_text()) for path in runs],
        "summary": json.loads((store / "audit" / "summary.json").read_text()),
    }


def test_an_image_command_in_another_environment_gives_the_in_process_audit_and_subsets_release(
    pool, tmp_path, monkeypatch, tiny_flags
):
    """Three audits of 4 runs. Digits audited three ways: the built-in `subset`; `SubsetGenerator`, subset's
    choice as a generator of your own, in process; and `--victim command` running subset_as_command.py,
    which makes subset's choice from the members alone, under the interpreter of a virtual environment of
    its own. The command is batched (`batch = 4`: the 4 seeds in one call, whose start imports the suite,
    ~5 CPU-s, once instead of 4 times); a batched call fits each seed as an unbatched one does
    (test_batched_command.py), and `imager`'s tests run an unbatched image command.

    The command and the in-process generator give the same audit, bit for bit: releases, downstream
    logits, test accuracy, summary.json's attacks and verdict. Against the built-in `subset` the releases
    are equal and the release attacks (dcr, dcr_lira) score the same, but the downstream ConvNet is not
    the same model: `subset` trains it from the run's seed, and a command's release (as a generator's)
    trains it from the downstream seed, SeedSequence([seed, DOWNSTREAM_STREAM]); each is
    `train_on_release` of the one release at its own seed, so the model attacks' numbers differ. And
    `subset` names its release's pool rows (init_idx, the `init` sub-group), which a command, seeing
    only the members' images, does not."""
    python = separate_environment(tmp_path / "env")
    toml = write_pipeline(
        tmp_path / "p",
        SUBSET_AS_COMMAND.read_text(),
        kind="images",
        args=["--ipc", str(IPC), "--n-classes", str(pool.n_classes)],
        python=python,
        source=["pipeline.py"],
        batch=4,
    )
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the command finds the suite through its .pth alone
    monkeypatch.syspath_prepend(str(SUBSET_AS_COMMAND.parent))  # the in-process generator's module

    def audit(*victim: str) -> dict:
        runs = tmp_path / f"runs-{len(list(tmp_path.glob('runs-*')))}"
        assert lira.main(["--runs-dir", str(runs), "--victim", *victim, "--n-shadow", "4", *tiny_flags]) == 0
        (store,) = runs.iterdir()
        return audited(store)

    builtin = audit("subset", "--ipc", str(IPC))
    in_process = audit("subset_as_command:SubsetGenerator", "--ipc", str(IPC))
    command = audit("command", "--pipeline", str(toml))

    # the command ran under the other environment's interpreter, on this checkout's code, in one call
    for record in command["records"]:
        assert record["command"]["seeds_in_call"] == [r["seed"] for r in command["records"]]
        ran = json.loads(record["command"]["stdout"])
        assert Path(ran["prefix"]) == tmp_path / "env" and ran["prefix"] != sys.prefix
        assert Path(ran["executable"]).parent == python.parent and Path(ran["victims"]).is_relative_to(ROOT)
    # the same plan and seeds, and each run's release the same images and labels, bit for bit
    assert np.array_equal(builtin["keep"], command["keep"]) and np.array_equal(in_process["keep"], command["keep"])
    assert [r["seed"] for r in builtin["records"]] == [r["seed"] for r in command["records"]]
    train = TrainConfig(steps=10, net=NetConfig(width=8))  # tiny_flags' --train-* on subset's default training
    for ours, theirs, made, record in zip(
        builtin["arrays"], in_process["arrays"], command["arrays"], command["records"]
    ):
        for key in ("release_x", "release_y"):
            assert made[key].dtype == ours[key].dtype and np.array_equal(made[key], ours[key])
            assert np.array_equal(made[key], theirs[key])
        # subset names the release's pool rows; the command and the generator release images alone
        assert np.array_equal(pool.x[ours["init_idx"]], made["release_x"]) and len(ours["init_idx"]) == 10 * IPC
        assert len(made["init_idx"]) == len(theirs["init_idx"]) == 0
        # the command's downstream model is the generator's, bit for bit
        assert np.array_equal(made["logits"], theirs["logits"])
        # and subset's is the same training on the same release, from the run's seed instead of the downstream one
        seed = record["seed"]
        downstream = int(np.random.SeedSequence([seed, DOWNSTREAM_STREAM]).generate_state(1)[0] >> 1)
        release = (made["release_x"], made["release_y"])
        assert np.array_equal(train_on_release(pool, *release, config=train, seed=seed).logits, ours["logits"])
        assert np.array_equal(train_on_release(pool, *release, config=train, seed=downstream).logits, made["logits"])
        assert not np.array_equal(ours["logits"], made["logits"])  # two models, so the model attacks differ
    assert [r["test_accuracy"] for r in command["records"]] == [r["test_accuracy"] for r in in_process["records"]]
    # the same audit as the in-process generator's: every attack's every number, the verdict, the utility
    mine, generator, subset = (a["summary"] for a in (command, in_process, builtin))
    assert set(mine["attacks"]) == set(generator["attacks"]) == set(subset["attacks"])
    for name, attack in mine["attacks"].items():
        assert (attack["auc"], attack["eps_lower"]) == (
            generator["attacks"][name]["auc"],
            generator["attacks"][name]["eps_lower"],
        )
    assert mine["attacks"] == generator["attacks"] and mine["verdict"] == generator["verdict"]
    assert mine["utility"] == generator["utility"]
    # and subset's release attacks, but for subset's `init` sub-group
    for name in ("dcr", "dcr_lira"):
        assert "subgroups" in subset["attacks"][name] and "subgroups" not in mine["attacks"][name]
        assert {k: v for k, v in subset["attacks"][name].items() if k != "subgroups"} == mine["attacks"][name]


#: releases 40 rows of the members' first row, whoever the members are: nothing any attack can see
CONSTANT = """
import csv, sys
members, out = sys.argv[1:3]
with open(members) as f:
    header, first, *_ = list(csv.reader(f))
with open(out, "w", newline="") as f:
    csv.writer(f).writerows([header] + [first] * 40)
"""


def test_the_report_says_the_verdict_was_fixed_before_the_audit_as_the_terminal_does(tmp_path):
    # A release that ignores its members (the members' first row is a natural record, a member of
    # every run under the fixed remainder): the reference runs predict a bound of 0 for every
    # attack, so the verdict's attack and count are fixed in advance (summary.json's
    # verdict.chosen_by "fixed"), and the report's reason must say so, not "chosen on the reference runs".
    # 4 runs, not 8: the release ignores its members at any run count, and at 4 the reference runs (2
    # pseudo-targets) still predict 0 for every attack they tune (each reference_choice's
    # predicted_eps_lower_fdp 0.0 in this audit's summary.json, looked at once)
    toml = write_pipeline(tmp_path / "constant", CONSTANT, args=["{members}", "{out}"])
    runs = tmp_path / "runs"
    flags = ["--pipeline", str(toml), "--epsilon", "1", "--canaries", "4", "--canary-kind", "unseen"]
    flags += ["--plan", "fixed-remainder", "--n-shadow", "4", "--runs-dir", str(runs)]
    assert lira.main([*TABLE_FLAGS, *flags, *QUICK]) == 0
    store = next(runs.iterdir())
    assert json.loads((store / "audit" / "summary.json").read_text())["verdict"]["chosen_by"] == "fixed"
    from audit import report

    assert report.main([str(store), "--n-boot", "200"]) == 0
    verdicts = json.loads((store / "audit" / "report.json").read_text())["experiments"][0]["verdicts"]
    reason = next(v["reason"] for v in verdicts if v["kind"].startswith("epsilon_"))
    assert "fixed before the audit" in reason and "chosen on the reference runs" not in reason
