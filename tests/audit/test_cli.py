"""End-to-end runs of the audit CLI on the embedded dataset (tiny training, inline executor)."""

import argparse
import importlib
import json
import subprocess
import sys

import numpy as np
import pytest

from audit import lira, loss, outputs
from attacks.registry import get_attack
from audit.stats.epsilon import epsilon_ceiling
from audit.stats.guesses import ceiling
from audit.api import reread
from shadow_runs.plan import membership_matrix
from victims import load_pool
from audit.cli.victim_flags import victim_classes, victim_overrides
from victims.overrides import build_victim, takes

SUMMARY_KEYS = {
    "victim",
    "dataset",
    "config",
    "n_shadow",
    "target_runs",
    "formal_epsilon",
    "claimed_epsilon",
    "claimed_delta",
    "delta",
    "utility",
    "evaluation",
    "attacks",
    "verdict",
}
METRIC_KEYS = {
    "auc",
    "advantage",
    "tpr_at_fpr",
    "fp_at_fpr",
    "eps_hat",
    "eps_lower",
    "eps_ceiling",
    "confidence",
    "delta",
    "n_members",
    "n_nonmembers",
    "guess_rule",
    "eps_lower_fdp",
    "eps_ceiling_fdp",
    "mu_lower",
    "mu_ceiling",
    "eps_gaussian",
    "eps_lower_mechanism",  # null for a victim that records no mechanism (docs/contracts.md)
    "eps_ceiling_mechanism",
    "guesses",
    "reference_choice",
}
SUBGROUP_KEYS = {"auc", "advantage", "tpr_at_fpr", "fp_at_fpr", "n_members", "n_nonmembers"}  # no epsilon


def snapshot(root):
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


def audit(main, runs_dir, *flags):
    return main(["--runs-dir", str(runs_dir), *flags])


def only_experiment(runs_dir):
    (root,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return root


def test_subset_audit_writes_the_contract_files(tmp_path, tiny_flags):
    assert audit(lira.main, tmp_path, "--victim", "subset", "--ipc", "2", "--n-shadow", "4", *tiny_flags) == 0
    root = only_experiment(tmp_path)
    assert root.name.startswith("subset-digits-")
    experiment = json.loads((root / "experiment.json").read_text())
    assert experiment["victim"] == "subset" and experiment["config"]["ipc"] == 2 and experiment["n_pool"] == 1500
    keep = np.load(root / "keep.npy")
    assert (
        keep.shape == (4, 1500) and experiment["plan"] == "independent-coins-v1" and experiment["inclusion_rate"] == 0.5
    )
    assert np.array_equal(keep, membership_matrix(np.zeros(1500), n_runs=4, master_seed=0))  # independent coins
    assert np.load(root / "pool_labels.npy").shape == (1500,)
    with np.load(root / "runs" / "00003.npz") as z:
        assert z["logits"].shape == (1500, 5, 10) and z["logits"].dtype == np.float32
        assert z["init_idx"].shape == (20,) and keep[3, z["init_idx"]].all()
        # The subset's release is its chosen member images themselves.
        pool = load_pool("digits")
        assert np.array_equal(z["release_x"], pool.x[z["init_idx"]])
        assert np.array_equal(z["release_y"], pool.y[z["init_idx"]])
    meta = json.loads((root / "runs" / "00003.json").read_text())
    assert {"seed", "formal_epsilon", "delta", "test_accuracy", "wall_s", "host"} <= set(meta)

    summary = json.loads((root / "audit" / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS
    assert summary["n_shadow"] == 4 and summary["target_runs"] == [0, 1] and summary["formal_epsilon"] is None
    assert summary["evaluation"]["n_canaries"] == 2 * 1500 and summary["evaluation"]["inclusion_rate"] == 0.5
    assert set(summary["attacks"]) == {
        "loss",
        "lira_online",
        "lira_offline",
        "rmia",
        "rmia_offline",
        "dcr",
        "dcr_lira",
    }  # dcr*: it has a release
    for name, metrics in summary["attacks"].items():
        assert METRIC_KEYS | {"subgroups"} == set(metrics)
        # 2 targets (runs 0 and 1); their 3,000 coins are the canaries
        assert metrics["n_members"] == keep[[0, 1]].sum() and metrics["n_nonmembers"] == (~keep[[0, 1]]).sum()
        assert set(metrics["tpr_at_fpr"]) == set(metrics["fp_at_fpr"]) == {"0.1", "0.01", "0.001"}
        assert set(metrics["subgroups"]) == {"init", "other_members"}
        assert metrics["subgroups"]["init"]["n_members"] == 2 * 20
        assert all(set(group) == SUBGROUP_KEYS for group in metrics["subgroups"].values())
        assert 0 <= metrics["eps_lower"] <= metrics["eps_ceiling"] and metrics["confidence"] == 0.95
        # 2 reference runs: pseudo-targets for the attacks needing at most 2 runs (tuned counts),
        # not for the rest (grid); each rule's ceiling at m = 3000, δ = 0, 95%
        tuned = get_attack(name).min_runs <= 2
        assert metrics["guess_rule"] == ("tuned" if tuned else "grid")
        assert (metrics["reference_choice"] is not None) == tuned
        rule = metrics["guess_rule"]
        assert metrics["eps_ceiling"] == pytest.approx(
            ceiling(3000, analysis="steinke", rule=rule, delta=0.0, confidence=0.95), abs=1e-9
        )
        if not tuned:
            assert metrics["eps_ceiling"] == pytest.approx(epsilon_ceiling(3000), abs=1e-9)
    assert summary["verdict"]["rule"] == "tuned" and summary["verdict"]["confidence"] == 0.95
    assert summary["verdict"]["candidates"] == ["dcr", "loss", "rmia", "rmia_offline"]
    with np.load(root / "audit" / "scores.npz") as z:
        assert z["lira_online"].shape == z["membership"].shape == (2, 1500)
        assert np.array_equal(z["membership"], keep[[0, 1]]) and z["target_runs"].tolist() == [0, 1]
    assert (root / "audit" / "roc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_claim_from_the_command_line_is_what_the_verdict_checks_at_its_delta(tmp_path, tiny_flags, capsys):
    # a non-DP victim (no formal ε, δ null): without a claim no ε claim is checked; with one, summary.json
    # records it and the verdict is taken at the claim's δ, the terminal naming the claim
    flags = ["--victim", "real", "--n-shadow", "4", *tiny_flags]
    assert audit(lira.main, tmp_path, *flags) == 0
    root = only_experiment(tmp_path)
    plain = json.loads((root / "audit" / "summary.json").read_text())
    assert plain["claimed_epsilon"] is None and plain["claimed_delta"] is None and plain["verdict"]["delta"] == 0.0
    assert "no ε claim was checked" in outputs.verdict_line(reread(plain))
    capsys.readouterr()
    claimed = ["--claimed-epsilon", "0.05", "--claimed-delta", "1e-5"]
    assert audit(lira.main, tmp_path, *flags, *claimed) == 0  # re-scores the stored runs
    summary = json.loads((root / "audit" / "summary.json").read_text())
    assert summary["claimed_epsilon"] == 0.05 and summary["claimed_delta"] == 1e-5
    found = summary["verdict"]
    assert found["delta"] == 1e-5 and found["rule"] == "tuned"  # 2 targets x 1500 coins, 2 reference runs
    assert found["eps_ceiling"] == pytest.approx(
        ceiling(3000, analysis="fdp", rule="tuned", delta=1e-5, confidence=0.95), abs=1e-9
    )
    line = outputs.verdict_line(reread(summary))
    assert line.startswith("  verdict: claimed ε = 0.05 at δ = 1e-05: ")
    assert ("violated" in line) == (found["eps_lower"] > 0.05)
    assert summary["attacks"]["loss"]["eps_ceiling"] == plain["attacks"]["loss"]["eps_ceiling"]  # at the victim's δ


def test_quiet_hides_the_progress_bar_and_attack_lines_but_keeps_the_verdict_and_warnings(tmp_path, capsys):
    # --quiet (in tiny_flags too): no progress bar on stderr; of the terminal's lines the verdict, the
    # warnings and the path remain, each as printed without --quiet, but not the per-attack lines or terms
    flags = ["--victim", "real", "--n-shadow", "4", "--train-steps", "10", "--train-net-width", "8"]
    assert audit(lira.main, tmp_path, *flags, "--executor", "inline", "--quiet") == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert audit(lira.main, tmp_path, *flags, "--executor", "inline") == 0  # re-scores the stored runs
    full = capsys.readouterr().out.splitlines()
    lines = quiet.out.splitlines()
    assert lines[0].startswith("  verdict: ") and lines[-1].startswith("  -> ") and lines[-1].endswith("summary.json")
    assert any(line.startswith("  warning: TPR@0.1%FPR") for line in lines), lines
    assert all(line in full for line in lines)  # the same lines, fewer of them
    assert not any(line.startswith(("  loss ", "  terms:")) for line in lines)
    assert any(line.startswith("  loss ") for line in full) and any(line.startswith("  terms:") for line in full)


def test_rerun_rescoring_more_shadows_and_determinism(tmp_path, tiny_flags):
    flags = ["--victim", "real", "--n-shadow", "4", *tiny_flags]
    assert audit(lira.main, tmp_path / "a", *flags) == 0
    root = only_experiment(tmp_path / "a")
    runs_before = snapshot(root / "runs")

    # Same command again: nothing retrained, the same numbers.
    summary = (root / "audit" / "summary.json").read_text()
    assert audit(lira.main, tmp_path / "a", *flags) == 0
    assert snapshot(root / "runs") == runs_before
    assert (root / "audit" / "summary.json").read_text() == summary

    # Same command in a fresh directory: identical numbers (every run is seeded by (seed, r)).
    assert audit(lira.main, tmp_path / "b", *flags) == 0
    assert (only_experiment(tmp_path / "b") / "audit" / "summary.json").read_text() == summary

    # More shadows: only the new runs are trained; the old files are untouched.
    assert audit(lira.main, tmp_path / "a", *[f if f != "4" else "6" for f in flags]) == 0
    after = snapshot(root / "runs")
    assert {p: after[p] for p in runs_before} == runs_before
    assert sorted(p.name for p in set(after) - set(runs_before)) == [
        "00004.json",
        "00004.npz",
        "00005.json",
        "00005.npz",
    ]


def test_loss_and_lira_summaries_share_the_directory(tmp_path, tiny_flags):
    flags = ["--victim", "real", "--n-shadow", "4", *tiny_flags]
    assert audit(loss.main, tmp_path, *flags) == 0
    path = only_experiment(tmp_path) / "audit" / "summary.json"
    assert set(json.loads(path.read_text())["attacks"]) == {"loss"}
    assert audit(lira.main, tmp_path, *flags) == 0
    assert audit(loss.main, tmp_path, *flags) == 0  # keeps LiRA's results computed on the same runs
    assert set(json.loads(path.read_text())["attacks"]) == {
        "loss",
        "lira_online",
        "lira_offline",
        "rmia",
        "rmia_offline",
    }


@pytest.mark.parametrize(
    "flags,named",
    [
        (["--victim", "nope", "--n-shadow", "4"], "'nope'"),
        (["--victim", "real", "--n-shadow", "4", "--dataset", "imagenet"], "'imagenet'"),
        (["--victim", "real", "--n-shadow", "1"], "'1'"),
        (["--victim", "real", "--n-shadow", "many"], "'many'"),
        (["--victim", "real", "--n-shadow", "2"], "--n-shadow 2"),  # LiRA needs a shadow pair
        (["--victim", "dpsgd", "--n-shadow", "4", "--epsilon", "0"], "got 0.0"),
        (["--victim", "dpsgd", "--n-shadow", "4", "--epsilon", "-2"], "got -2.0"),
        (["--victim", "dpsgd", "--n-shadow", "4", "--epsilon", "one"], "'one'"),
        (["--victim", "dpsgd", "--n-shadow", "4", "--epsilon", "inf"], "got inf"),
        (["--victim", "dpsgd", "--n-shadow", "4", "--delta", "0"], "got 0.0"),
        (["--victim", "dpsgd", "--n-shadow", "4", "--delta", "1.5"], "got 1.5"),
        (["--victim", "real", "--n-shadow", "4", "--ipc", "10"], "--ipc does not apply to victim 'real'"),
        (["--victim", "subset", "--n-shadow", "4", "--ipc", "400"], "--ipc 400"),
        (["--victim", "real", "--n-shadow", "4", "--confidence", "1"], "'1'"),
        (["--victim", "real", "--n-shadow", "4", "--workers", "0"], "'0'"),
        (["--victim", "real", "--n-shadow", "4", "--n-targets", "4"], "--n-targets 4"),
        (
            ["--victim", "real", "--n-shadow", "4", "--inclusion-rate", "1"],
            "--inclusion-rate: must be a number in (0, 1), got '1'",
        ),
        (["--victim", "real", "--n-shadow", "4", "--runs-per-task", "0"], "--runs-per-task: must be an integer >= 1"),
        (["--victim", "dm", "--n-shadow", "4", "--preset", "faithful"], "--preset faithful is not available for dm"),
        (["--victim", "kip", "--n-shadow", "4", "--preset", "faithful"], "--preset faithful is not available for kip"),
        (["--victim", "psg", "--n-shadow", "4", "--preset", "fast"], "'fast'"),
        (["--victim", "real", "--n-shadow", "4", "--claimed-epsilon", "0"], "--claimed-epsilon: must be a finite"),
        (["--victim", "real", "--n-shadow", "4", "--claimed-delta", "1"], "--claimed-delta: must be a number in [0"),
        (["--victim", "real", "--n-shadow", "4", "--pool-per-class", "0"], "--pool-per-class: must be an integer >= 1"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_value(tmp_path, capsys, flags, named):
    with pytest.raises(SystemExit) as exit_info:
        audit(lira.main, tmp_path / "runs", *flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()  # nothing written


@pytest.mark.parametrize("threat", [[], ["--threat-model", "white-box"]])
def test_too_few_runs_names_only_the_attacks_that_apply_and_need_more(tmp_path, capsys, threat):
    # audit.lira's attacks include the white-box ones, which a black-box audit does not run; loss,
    # rmia and the white-box attacks need fewer than 4 runs: only those that need more are named
    with pytest.raises(SystemExit) as exit_info:
        audit(lira.main, tmp_path / "runs", "--victim", "dpsgd", "--n-shadow", "2", *threat)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    assert err.strip().endswith("--n-shadow 2 is too few for lira_online, lira_offline, dcr_lira (needs >= 4)"), err
    assert not (tmp_path / "runs").exists()


#: `python -m audit.X` -> the module whose `main` it runs, where that is not audit.X itself
COMMAND_MODULES = {
    "compare": "audit.cli.compare_command",
    "release": "audit.cli.release_command",
    "report": "audit.cli.report_command",
    "selftest": "audit.selftest.command",
}


def _cli(module: str):
    return importlib.import_module(COMMAND_MODULES.get(module, f"audit.{module}")).main


@pytest.mark.parametrize(
    "module,flags,line",
    [
        (
            "lira",
            ["--victim", "pgs", "--n-shadow", "4"],
            "argument --victim: unknown victim 'pgs' (did you mean 'psg'?)",
        ),
        (
            "loss",
            ["--victim", "dpsdg", "--n-shadow", "4"],
            "argument --victim: unknown victim 'dpsdg' (did you mean 'dpsgd'?)",
        ),
        ("release", ["--victim", "pgs"], "argument --victim: unknown victim 'pgs' (did you mean 'psg'?)"),
        # audit.ganleak suggests only the generators it audits
        (
            "ganleak",
            ["--victim", "cgn", "--n-shadow", "4"],
            "argument --victim: unknown victim 'cgn' (did you mean 'cgan'?)",
        ),
        (
            "ganleak",
            ["--victim", "pgs", "--n-shadow", "4"],
            "argument --victim: unknown victim 'pgs' (choose from cgan, datalens, dpcgan, dpkernel)",
        ),
        # A misspelled required flag is reported as the misspelling, not as the flag missing.
        ("lira", ["--n-shadw", "8"], "unrecognized arguments: --n-shadw 8 (did you mean --n-shadow?)"),
        (
            "lira",
            ["--victim", "psg", "--n-shadw", "8"],
            "unrecognized arguments: --n-shadw 8 (did you mean --n-shadow?)",
        ),
        (
            "lira",
            ["--victim", "psg", "--n-shadow", "4", "--n-shadw=8", "--sed", "1"],
            "unrecognized arguments: --n-shadw=8 --sed 1 (did you mean --n-shadow for --n-shadw, --seed for --sed?)",
        ),
        (
            "lira",
            ["--victim", "dpsgd", "--n-shadow", "4", "--epsilonn", "1"],
            "unrecognized arguments: --epsilonn 1 (did you mean --epsilon?)",
        ),  # a generated victim flag
        ("lira", ["--victim", "real", "--n-shadow", "4", "--bogus"], "unrecognized arguments: --bogus"),  # none close
        (
            "ganleak",
            ["--victim", "cgan", "--n-shadow", "4", "--canaries=2", "--canary-kinds", "outlier"],
            "unrecognized arguments: --canary-kinds outlier (did you mean --canary-kind?)",
        ),
        ("release", ["--n-shadw", "4"], "unrecognized arguments: --n-shadw 4 (did you mean --n-shadow?)"),
        ("compare", ["--basline", "a", "b"], "unrecognized arguments: --basline (did you mean --baseline?)"),
        (
            "report",
            ["a", "--clamed-epsilon", "1"],
            "unrecognized arguments: --clamed-epsilon 1 (did you mean --claimed-epsilon?)",
        ),
        ("selftest", ["--sed", "1"], "unrecognized arguments: --sed 1 (did you mean --seed?)"),
    ],
)
def test_a_misspelled_victim_or_flag_exits_2_with_one_line_suggesting_the_name(
    tmp_path, capsys, monkeypatch, module, flags, line
):
    monkeypatch.chdir(tmp_path)  # the default --runs-dir, runs/, would be here
    with pytest.raises(SystemExit) as exit_info:
        _cli(module)(flags)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"python -m audit.{module}: error: {line}\n"
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_unknown_victim_with_no_close_name_lists_the_known_ones(capsys):
    from victims import victim_names

    with pytest.raises(SystemExit) as exit_info:
        lira.main(["--victim", "zzzz", "--n-shadow", "4"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "python -m audit.lira: error: argument --victim: unknown victim 'zzzz' "
        f"(known: {', '.join(victim_names())}; or a module:Class path)\n"
    )


def test_npz_inputs_are_checked_before_anything_is_written(tmp_path, capsys):
    no_y, nan_x = tmp_path / "no_y.npz", tmp_path / "nan.npz"
    np.savez(no_y, x=np.zeros((10, 4, 4)))
    x = np.zeros((10, 4, 4))
    x[3, 1, 1] = np.nan
    np.savez(nan_x, x=x, y=np.arange(10) % 2)
    for path, named in [(no_y, "'y'"), (nan_x, "non-finite"), (tmp_path / "missing.npz", "missing.npz")]:
        with pytest.raises(SystemExit) as exit_info:
            audit(lira.main, tmp_path / "runs", "--victim", "real", "--n-shadow", "4", "--dataset", str(path))
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "runs").exists()


def test_a_store_of_another_config_is_refused_untouched(tmp_path, tiny_flags, capsys):
    flags = ["--victim", "real", "--n-shadow", "4", *tiny_flags]
    assert audit(lira.main, tmp_path, *flags) == 0
    root = only_experiment(tmp_path)
    meta = json.loads((root / "experiment.json").read_text())
    meta["config"]["train"]["steps"] = 11
    (root / "experiment.json").write_text(json.dumps(meta))
    before = snapshot(root)
    with pytest.raises(SystemExit) as exit_info:
        audit(lira.main, tmp_path, *flags[:4] + ["--n-shadow", "6"] + tiny_flags)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and str(root) in err, err
    # the nested key that differs with both values, and what to do
    assert "(stored -> asked: config.train.steps: 11 -> 10); refusing to mix: pass another --runs-dir" in err, err
    assert snapshot(root) == before
    # The experiment directory itself passed as --runs-dir is refused too.
    with pytest.raises(SystemExit):
        audit(lira.main, root, *flags)
    assert snapshot(root) == before


def test_help_lists_the_generated_victim_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        lira.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    for flag in (
        "--victim",
        "--ipc",
        "--epsilon",
        "--delta",
        "--train-steps",
        "--train-net-width",
        "--no-train-augment",
        "--init",
        "--zca",
        "--no-dsa",
    ):
        assert flag in out
    # A flag several victims share with different meanings shows each victim's text.
    flat = " ".join(out.split())
    assert "--iterations INT dc, dsa: fresh matching networks (default: from --preset); dm: image updates" in flat


def test_help_names_the_tables_the_victims_that_take_them_and_every_default():
    from audit.cli.flags import build_parser, dataset_help
    from victims import get_victim, victim_names

    parser = build_parser("audit.lira", "", argv=[])
    formatter = parser._get_formatter()
    helps = {a.option_strings[0]: " ".join(formatter._expand_help(a).split()) for a in parser._actions if a.help}
    # --dataset: the images, the tables, and the victims that take tables as the registry says
    tables = [name for name in victim_names() if getattr(get_victim(name), "tabular", False) is True]
    assert "marginals" in tables and "tabular-subset" in tables and "dm" not in tables
    assert f"tables, for the victims {', '.join(tables)} (command: either kind" in helps["--dataset"]
    assert "fair, randhie (embedded) or SCHEMA.json" in helps["--dataset"] and "(default: digits)" in helps["--dataset"]
    table, images = type("Table", (), {"tabular": True}), type("Images", (), {})
    assert "tables, for the victims mine:Table:" in dataset_help({"mine:Table": table, "dm": images}, None)
    assert "tables" not in dataset_help({"mine:Table": table, "dm": images}, ("dm",))  # audit.ganleak's victims
    # every flag that has a default says it: the run flags, and each victim's own
    required_or_given = {"--victim", "--n-shadow", "--pipeline"}  # --pipeline: command's TOML file, no default
    for flag, text in helps.items():
        action = parser._option_string_actions[flag]
        if action.nargs != 0 and flag not in required_or_given:
            assert "default" in text, flag
    assert helps["--executor"].endswith("(default: ray)") and helps["--rows"].endswith("(default: 1000)")
    assert "(defaults: 1.0 for datalens, dpcgan, dpkernel, dpsgd, marginals, mst; 10.0 for psg)" in helps["--epsilon"]
    assert "(default: from --preset)" in helps["--restarts"] and "(default: 4)" not in helps["--restarts"]


def test_help_with_a_victim_lists_only_the_flags_it_takes():
    from audit.cli.flags import build_parser

    def listed(argv):
        return build_parser("audit.lira", "", argv=argv).format_help()

    # --rows is a table victim's (marginals); command refuses it, so its help does not list it
    assert "--rows INT" in listed([]) and "--rows INT" in listed(["--victim", "marginals"])
    command = listed(["--victim", "command"])
    assert "--rows" not in command and "--pipeline STR" in command and "--ipc" not in command
    # the flag is still parsed, and refused by name for that victim
    args = build_parser("audit.lira", "", argv=["--victim", "command"]).parse_args(
        ["--victim", "command", "--n-shadow", "4", "--rows", "5"]
    )
    assert args.victim__rows == 5
    with pytest.raises(ValueError, match="--rows does not apply to victim 'command'"):
        build_victim("command", victim_overrides(args))
    # one source: for every victim, the victim flags its --help lists are exactly those it accepts
    for name, cls in victim_classes([]).items():
        group = next(
            g
            for g in build_parser("audit.lira", "", argv=["--victim", name])._action_groups
            if g.title.startswith("victim flags")
        )
        listed = {a.dest[len("victim__") :] for a in group._group_actions if a.help != argparse.SUPPRESS}
        assert listed == takes(cls), name


def test_the_module_entry_point_exits_2_without_a_traceback(tmp_path):
    """`python -m audit.lira` passes on main's refusal as it is: exit status 2, one line, no traceback,
    nothing written. One interpreter start checks it, for a value refused after parsing; a misspelled
    flag, refused by the parser in the same main, is test_a_misspelled_victim_or_flag_exits_2_..."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.lira",
            "--victim",
            "dpsgd",
            "--n-shadow",
            "4",
            "--epsilon",
            "-1",
            "--runs-dir",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "python -m audit.lira: error: --epsilon must be a positive number, got -1.0"
    ]
    assert not (tmp_path / "r").exists()


def _victim_from(*argv):
    from audit.cli.flags import build_parser
    from audit.cli.victim_flags import victim_overrides
    from victims.overrides import build_victim

    args = build_parser("test", "").parse_args(["--n-shadow", "2", *argv])
    return build_victim(args.victim, victim_overrides(args))


def test_flags_keep_the_victims_own_nested_defaults():
    from victims.nets import NetConfig
    from victims.pipelines.psg import PSGVictim
    from victims.train import small_set_training

    # No flag: exactly the victim's defaults (PSG matches a width-16 net; 100 downstream steps).
    assert _victim_from("--victim", "psg") == PSGVictim()
    assert PSGVictim().net == NetConfig(width=16) and PSGVictim().train == small_set_training()
    # One nested flag changes that field only, starting from the victim's default.
    psg = _victim_from("--victim", "psg", "--train-lr", "0.05", "--net-depth", "1")
    assert psg.train == small_set_training().__class__(steps=100, lr=0.05)
    assert psg.net == NetConfig(width=16, depth=1)
    # The same flag on another victim starts from that victim's default.
    assert _victim_from("--victim", "dpsgd", "--net-depth", "1").net == NetConfig(width=64, depth=1)


def test_a_condensation_audit_compares_with_the_subset_baseline(tmp_path, tiny_flags, capsys):
    from audit import compare

    flags = ["--ipc", "2", "--n-shadow", "4", *tiny_flags]
    assert audit(lira.main, tmp_path / "subset", "--victim", "subset", *flags) == 0
    assert audit(lira.main, tmp_path / "dm", "--victim", "dm", "--init", "real", "--iterations", "2", *flags) == 0
    dm, subset = only_experiment(tmp_path / "dm"), only_experiment(tmp_path / "subset")
    summary = json.loads((dm / "audit" / "summary.json").read_text())
    # The release attacks run because DM stores its synthetic set; the init points are a sub-group.
    assert {"dcr", "dcr_lira"} <= set(summary["attacks"])
    assert summary["attacks"]["dcr"]["subgroups"]["init"]["n_members"] == 2 * 20
    capsys.readouterr()
    out = tmp_path / "compare.json"
    assert (
        compare.main(
            [
                str(dm),
                "--baseline",
                str(subset),
                "--attack",
                "loss",
                "dcr",
                "--n-boot",
                "50",
                "--n-boot-eps",
                "10",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = capsys.readouterr().out
    assert "| dm ipc=2 init=real | dcr | all |" in table and "| subset ipc=2 | loss | all |" in table
    assert json.loads(out.read_text())["experiments"]


def test_packed_runs_leave_the_same_store_and_summary_keys(tmp_path, tiny_flags):
    """--runs-per-task 2: the same experiment directory (packing is not part of its identity), the
    same files per run, the runs' metadata marked with their pack, and summary.json's numbers those
    of the unpacked audit within float tolerance (here identical to 3 decimals)."""
    flags = ["--victim", "real", "--n-shadow", "4", *tiny_flags]
    assert audit(lira.main, tmp_path / "one", *flags) == 0
    assert audit(lira.main, tmp_path / "packed", *flags, "--runs-per-task", "2") == 0
    one, packed = only_experiment(tmp_path / "one"), only_experiment(tmp_path / "packed")
    assert one.name == packed.name
    assert sorted(p.name for p in (one / "runs").iterdir()) == sorted(p.name for p in (packed / "runs").iterdir())
    assert all(json.loads((packed / "runs" / f"{r:05d}.json").read_text())["runs_in_task"] == 2 for r in range(4))
    a, b = (json.loads((d / "audit" / "summary.json").read_text()) for d in (one, packed))
    assert a.keys() == b.keys() and a["attacks"].keys() == b["attacks"].keys()
    for attack in a["attacks"]:
        assert round(a["attacks"][attack]["auc"], 3) == round(b["attacks"][attack]["auc"], 3)


@pytest.mark.parametrize(
    "argv,expected",
    [
        ([], None),  # black-box: no canaries unless asked
        (["--canaries", "8"], ("mislabeled", 8)),
        (["--threat-model", "white-box"], ("gradient", 4000)),  # the white-box defaults (flags.py)
        (["--threat-model", "white-box", "--canaries", "50"], ("gradient", 50)),
        (["--threat-model", "white-box", "--canary-kind", "mislabeled"], ("mislabeled", 1000)),  # record canaries
        (["--threat-model", "white-box", "--canaries", "0"], None),  # refused later: white-box needs canaries
    ],
)
def test_a_white_box_audit_defaults_to_four_thousand_gradient_canaries(argv, expected):
    from audit.cli.flags import build_parser, canary_config

    config = canary_config(build_parser("test", "").parse_args(["--victim", "dpsgd", "--n-shadow", "2", *argv]))
    assert (None if config is None else (config.kind, config.n)) == expected


@pytest.mark.parametrize(
    "argv, dimension, expected",
    [
        ([], 40394, 4000),  # dpsgd's ConvNet on digits: room for all 4,000
        ([], 1024, 1024),  # datalens on digits: one gradient canary per released coordinate
        (["--canaries", "2000"], 1024, 2000),  # asked for: kept (and refused by the victim's check, one line)
        (["--canary-kind", "mislabeled"], 1024, 1000),  # record canaries need no coordinate of their own
    ],
)
def test_the_white_box_default_takes_no_more_gradient_canaries_than_the_release_has_coordinates(
    argv, dimension, expected
):
    from audit.cli.flags import build_parser, canary_config

    args = build_parser("test", "").parse_args(
        ["--victim", "dpsgd", "--n-shadow", "2", "--threat-model", "white-box", *argv]
    )
    assert canary_config(args, release_dimension=dimension).n == expected


def test_pool_per_class_audits_the_class_balanced_pool_in_the_store_its_npz_would_make(tmp_path, tiny_flags):
    # --pool-per-class 10 on digits: the first 10 images of each of the 10 classes, 100 rows; the same
    # arrays as write_class_balanced_subset's .npz, so the same identity and the same store name
    from victims.data import write_class_balanced_subset

    flags = ["--victim", "real", "--n-shadow", "4", *tiny_flags]
    assert audit(lira.main, tmp_path / "flag", *flags, "--pool-per-class", "10") == 0
    root = only_experiment(tmp_path / "flag")
    experiment = json.loads((root / "experiment.json").read_text())
    assert experiment["dataset"] == "digits-10-per-class" and experiment["n_pool"] == 100
    assert np.bincount(np.load(root / "pool_labels.npy")).tolist() == [10] * 10
    npz = write_class_balanced_subset(load_pool("digits"), 10, tmp_path / "digits-10-per-class.npz")
    assert audit(lira.main, tmp_path / "file", *flags, "--dataset", str(npz)) == 0
    assert only_experiment(tmp_path / "file").name == root.name
    file_experiment = json.loads((only_experiment(tmp_path / "file") / "experiment.json").read_text())
    assert file_experiment["dataset_fingerprint"] == experiment["dataset_fingerprint"]


def test_re_scoring_a_prefix_says_it_replaces_the_summary_of_more_runs(tmp_path, tiny_flags, capsys):
    # a store's summary.json is its last audit's: --n-shadow 4 on a store of 8 runs replaces the
    # 8-run summary, and says so on stderr; the same audit again replaces nothing and says nothing
    flags = ["--victim", "real", *tiny_flags]
    assert audit(lira.main, tmp_path, *flags, "--n-shadow", "8") == 0
    capsys.readouterr()
    assert audit(lira.main, tmp_path, *flags, "--n-shadow", "4") == 0
    err = capsys.readouterr().err
    assert "held the audit of 8 runs (4 targets); it now holds this audit of 4 (2 targets)" in err
    assert json.loads((only_experiment(tmp_path) / "audit" / "summary.json").read_text())["n_shadow"] == 4
    assert audit(lira.main, tmp_path, *flags, "--n-shadow", "4") == 0
    assert "held the audit" not in capsys.readouterr().err


def test_a_declared_attack_the_runs_cannot_score_exits_2_with_one_line(tmp_path, capsys, tiny_flags):
    # a table's attack on images is refused before any run; one that needs what the runs did not store
    # (GAN-Leaks' reconstruction of a subset release) after them, with the runs kept in the store
    runs = tmp_path / "runs"
    flags = ["--victim", "subset", "--ipc", "2", "--dataset", "digits", "--n-shadow", "4", "--executor", "inline"]
    with pytest.raises(SystemExit) as e:
        lira.main([*flags, *tiny_flags, "--runs-dir", str(runs), "--verdict-attack", "pairs"])
    assert e.value.code == 2 and not runs.exists()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "python -m audit.lira: error: --verdict-attack pairs scores a released table; --dataset digits holds images"
    )
    with pytest.raises(SystemExit) as e:
        lira.main([*flags, *tiny_flags, "--runs-dir", str(runs), "--verdict-attack", "whitebox"])
    assert e.value.code == 2 and not runs.exists()
    assert capsys.readouterr().err.strip() == (
        "python -m audit.lira: error: --verdict-attack whitebox is a white-box attack: it needs "
        "--threat-model white-box"
    )
    with pytest.raises(SystemExit) as e:
        lira.main([*flags, *tiny_flags, "--runs-dir", str(runs), "--quiet", "--verdict-attack", "ganleak_fbb"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "python -m audit.lira: error: --verdict-attack ganleak_fbb scored no canary of these runs (they lack what it "
        "reads); the runs stay in the store"
    )
    assert len(list(runs.glob("*/runs/*.npz"))) == 4
