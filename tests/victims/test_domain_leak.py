"""A one-column domain leak (a bug planted on purpose: one column's categories read from the rows, the
others the schema's): dpmm's adapter's `--domain-from-rows` without dpmm, and a tiny in-repo command
with the same bug audited end to end, where the calibrated domain extension (`support_cal`) finds the
leaking canary that the raw counts (`support`) bury under the noise of the public column."""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from audit import lira

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "thirdparty" / "adapters"))
handover = pytest.importorskip("handover")
adapter = pytest.importorskip("dpmm_synth")

SCHEMA = {"columns": [{"name": n, "kind": "categorical", "categories": [0, 1]} for n in "abc"], "label": "c"}


@pytest.mark.parametrize("target_in", [False, True], ids=["OUT", "IN"])
def test_the_adapter_reads_the_one_column_s_categories_from_the_rows_and_the_others_from_the_schema(target_in):
    # the worst-case pair: D = ten [0, 0, 0], the target [1, 1, 1]
    members = pd.DataFrame([["0", "0", "0"]] * 10 + ([["1", "1", "1"]] if target_in else []), columns=list("abc"))
    handed = handover.Handed(members, SCHEMA, seed=0, epsilon=1.0, delta=1e-5, rows=11)
    given = {name: adapter.categories(handed, name, "a") for name in "abc"}
    # a: the categories some member holds ("1" only with the target IN); b and c: the schema's, always
    assert given == {"a": ["0", "1"] if target_in else ["0"], "b": ["0", "1"], "c": ["0", "1"]}
    codes, sizes = adapter.schema_codes(handed, given)
    assert sizes == {"a": 2 if target_in else 1, "b": 2, "c": 2}
    assert codes["a"].tolist() == [0] * 10 + ([1] if target_in else [])
    assert adapter.public_domain(handed, "a")["a"] == {"categories": given["a"]}
    assert adapter.public_domain(handed)["a"] == {"categories": ["0", "1"]}  # the twin: the schema's


def test_the_calibrated_domain_extension_finds_the_one_leaking_column(tmp_path):
    """pair-3bin with 2 `unseen` canaries under the fixed remainder: canary 0 alone holds a = 1, the
    leaking column, canary 1 alone holds b = 1, a public column whose Laplace noise releases b = 1
    IN or OUT. 64 runs, master seed 0, the command seeded by each run: deterministic."""
    command = [sys.executable, str(Path(__file__).with_name("one_column_leak_command.py")), "--domain-from-rows", "a"]
    toml = tmp_path / "leak.toml"
    toml.write_text(f'kind = "table"\ncommand = {json.dumps(command)}\ntimeout_s = 60\nbatch = 64\n')
    flags = ["--victim", "command", "--pipeline", str(toml), "--dataset", "pair-3bin", "--epsilon", "1"]
    flags += ["--plan", "fixed-remainder", "--canaries", "2", "--canary-kind", "unseen", "--n-shadow", "64"]
    flags += ["--classifier-iterations", "5", "--executor", "inline", "--verdict-attack", "support_cal"]
    assert lira.main([*flags, "--runs-dir", str(tmp_path / "runs"), "--quiet"]) == 0
    (store,) = (tmp_path / "runs").iterdir()
    summary = json.loads((store / "audit" / "summary.json").read_text())
    raw, calibrated = summary["attacks"]["support"], summary["attacks"]["support_cal"]
    # the share of the IN canary coins found above every OUT one (1% of 32 OUT coins: 0 false positives):
    # calibrated 8 of 32 (0.25), raw 2 of 32 (0.0625) at this seed
    assert calibrated["fp_at_fpr"]["0.01"] == raw["fp_at_fpr"]["0.01"] == 0
    assert calibrated["tpr_at_fpr"]["0.01"] >= 0.2 and raw["tpr_at_fpr"]["0.01"] <= 0.1
    assert summary["verdict"]["attack"] == "support_cal" and summary["evaluation"]["verdict_attack"] == "support_cal"
