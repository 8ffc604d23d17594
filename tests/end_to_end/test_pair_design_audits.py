"""The worst-case neighbour design for tables through the CLI (`python -m audit.lira`): the built-in
pair (`--dataset pair-3bin`) with its own target and a user's pair from a schema file, each with
the `marginals` victim; the pair test's summary key and terminal line; the design's refusals."""

import json

import pandas as pd
import pytest

from audit import lira
from victims.tabular.pools import write_schema_file
from victims.tabular.schema import Column, Schema

DESIGN = ["--plan", "fixed-remainder", "--canaries", "1", "--canary-kind", "record"]
CHEAP = ["--victim", "marginals", "--epsilon", "1", "--executor", "inline"]


def audit(tmp_path, capsys, *flags) -> tuple[dict, str]:
    argv = ["--runs-dir", str(tmp_path / "runs"), *CHEAP, *DESIGN, *flags]
    assert lira.main(argv) == 0
    (root,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return json.loads((root / "audit" / "summary.json").read_text()), capsys.readouterr().out


def test_the_built_in_pair_gives_the_pair_test_beside_the_verdict(tmp_path, capsys):
    # 24 runs, seed 0: 12 targets judged, 12 references choose; at claim (1, 1e-2) marginals' release is
    # far inside it, so no bound reaches the claim
    summary, out = audit(
        tmp_path, capsys, "--dataset", "pair-3bin", "--n-shadow", "24", "--claimed-epsilon", "1",
        "--claimed-delta", "1e-2", "--quiet",
    )  # fmt: skip
    assert summary["evaluation"]["canaries"]["record"] == "a=1,b=1,c=1"  # pair-3bin's own target, in schema order
    assert summary["verdict"] is not None  # the one-run verdict is still given, as before
    pair = summary["pair_test"]
    assert pair["decision"] == "figure" and pair["confidence"] == 0.95 and pair["delta"] == 1e-2
    assert pair["attack"] in pair["predicted_mu"]
    assert pair["predicted_mu"][pair["attack"]] == max(v for v in pair["predicted_mu"].values() if v is not None)
    assert pair["n_in"] + pair["n_out"] == 12 and pair["references"]["n_in"] + pair["references"]["n_out"] == 12
    assert 0 <= pair["tp"] <= pair["n_in"] and 0 <= pair["fp"] <= pair["n_out"]
    assert 0.0 <= pair["mu_lower"] < 0.533 and 0.0 <= pair["epsilon_lower"] <= 1.0
    assert 0.0 <= pair["mu_lower_baseline"] <= pair["mu_lower"] + 0.5
    # the μ of a Gaussian mechanism that is exactly (1, 1e-2)-DP (Dong, Roth & Su, Corollary 2.13): 0.5325
    assert pair["claim"]["mu_gaussian"] == pytest.approx(0.5325, abs=1e-4)
    assert pair["claim"]["epsilon_exceeded"] is False and pair["claim"]["mu_gaussian_exceeded"] is False
    assert set(pair["theorems"]) == {"mu_lower", "epsilon_lower", "baseline", "mu_gaussian"}
    (line,) = [line for line in out.splitlines() if line.startswith("  pair test")]
    assert "12 target runs judged, 12 reference runs choosing" in line
    assert f"from {pair['attack']} (TP {pair['tp']}/{pair['n_in']}, FP {pair['fp']}/{pair['n_out']})" in line
    assert "does not exceed the claimed eps 1 at delta 0.01" in line


def test_an_audit_of_another_design_has_no_pair_test(tmp_path, capsys):
    summary, out = audit(tmp_path, capsys, "--dataset", "pair-3bin", "--n-shadow", "8", "--quiet", "--canaries", "4",
                         "--canary-kind", "unseen")  # fmt: skip
    assert "pair_test" not in summary and "pair test" not in out
    assert "record" not in summary["evaluation"]["canaries"]  # the entry is as before for every other kind


def test_an_audit_in_rounds_runs_the_pair_design_look_by_look_without_a_pair_test(tmp_path, capsys):
    # --until-decided under the design: looks at 16 and 32 runs (doubling from --first-look), each the one-run
    # verdict of a fixed design at its share. Seed 0, claim (0.5, 1e-2) against marginals at --epsilon 1, whose own
    # curve is (0.40, 1e-2)-DP: the first look's ceiling is 0 (not testable), the second's 0.79, consistent, so the
    # looks run to the budget. No pair_test: the runs a sequential audit stops at depend on the targets' scores.
    summary, out = audit(
        tmp_path, capsys, "--dataset", "pair-3bin", "--n-shadow", "32", "--until-decided", "--first-look", "16",
        "--claimed-epsilon", "0.5", "--claimed-delta", "1e-2", "--quiet",
    )  # fmt: skip
    rounds = summary["sequential"]
    assert rounds["schedule"] == [16, 32] and [look["runs"] for look in rounds["looks"]] == [16, 32]
    assert [look["verdict"] for look in rounds["looks"]] == ["epsilon_not_testable", "epsilon_consistent"]
    assert rounds["stopped"] == "budget spent" and rounds["runs_used"] == summary["n_shadow"] == 32
    assert summary["evaluation"]["canaries"]["record"] == "a=1,b=1,c=1"
    assert "pair_test" not in summary and "pair test" not in out


#: a user's pair: a binary feature and a binary label, D all ("lo", 0), the target ("hi", 1)
PAIR = Schema(
    columns=(Column("x", "categorical", categories=("lo", "hi")), Column("y", "categorical", categories=(0, 1))),
    label="y",
)


def pair_file(tmp_path, rows: int):
    pd.DataFrame({"x": ["lo"] * rows, "y": [0] * rows}).to_csv(tmp_path / "d.csv", index=False)
    pd.DataFrame({"x": ["lo", "hi"], "y": [0, 1]}).to_csv(tmp_path / "test.csv", index=False)
    return write_schema_file(tmp_path / "pair.json", PAIR, "d.csv", "test.csv")


def test_a_user_s_pair_from_a_schema_file_and_a_named_target(tmp_path, capsys):
    schema = pair_file(tmp_path, 5)
    summary, _ = audit(tmp_path, capsys, "--dataset", str(schema), "--n-shadow", "16", "--target-record", "y=1, x=hi")
    assert summary["evaluation"]["canaries"]["record"] == "x=hi,y=1"
    assert summary["pair_test"]["n_in"] + summary["pair_test"]["n_out"] == 8


@pytest.mark.parametrize(
    "flags, error",
    [
        (
            ["--target-record", "a=2,b=1,c=1"],
            "--target-record: column 'a' holds '2', outside its public categories [0, 1]",
        ),
        (["--target-record", "a=1,b=1"], "--target-record names no value for column 'c' (the schema's: a, b, c)"),
        (["--target-record", "a=1,b=1,c=1,d=0"], "--target-record: column 'd' is not in the schema (a, b, c)"),
        (["--target-record", "a=1,b,c=1"], "--target-record 'a=1,b,c=1': entry 'b' is not column=value"),
        (["--canaries", "2"], "--canary-kind record plants one target record: --canaries must be 1, got 2"),
    ],
    ids=["outside-domain", "missing-column", "unknown-column", "not-column-value", "two-canaries"],
)
def test_bad_pairs_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, flags, error):
    argv = ["--dataset", "pair-3bin", "--runs-dir", str(tmp_path / "runs"), *CHEAP, *DESIGN, "--n-shadow", "16"]
    with pytest.raises(SystemExit) as e:
        lira.main([*argv, *flags])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"python -m audit.lira: error: {error}"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--dataset", "fair"], "--canary-kind record needs --target-record 'column=value,...' for --dataset fair"),
        (["--dataset", "pair-3bin", "--canary-kind", "unseen", "--target-record", "a=1,b=1,c=1"],
         "--target-record applies to --canary-kind record only, not unseen"),
        (["--dataset", "digits"], "--canary-kind record makes table records; --dataset digits "
         "holds images (its kinds: mislabeled, outlier, duplicate, gradient, blank, marked)"),
    ],
    ids=["no-target", "target-without-record", "images"],
)  # fmt: skip
def test_a_record_canary_without_its_table_or_target_exits_2(tmp_path, capsys, flags, error):
    argv = ["--runs-dir", str(tmp_path / "runs"), *CHEAP, *DESIGN, "--n-shadow", "16"]
    with pytest.raises(SystemExit) as e:
        lira.main([*argv, *flags])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"python -m audit.lira: error: {error}"
    assert not (tmp_path / "runs").exists()


def test_an_empty_d_exits_2_with_one_line(tmp_path, capsys):
    schema = pair_file(tmp_path, 0)  # a header, no rows: D is empty
    argv = ["--dataset", str(schema), "--runs-dir", str(tmp_path / "runs"), *CHEAP, *DESIGN, "--n-shadow", "16"]
    with pytest.raises(SystemExit) as e:
        lira.main([*argv, "--target-record", "x=hi,y=1"])
    assert e.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"python -m audit.lira: error: {schema} (d.csv): no rows"
    assert not (tmp_path / "runs").exists()
