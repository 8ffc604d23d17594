"""The notebooks, executed end to end (nbclient, a real Jupyter kernel) on tiny audits, so they
cannot rot. The notebooks in git carry no outputs."""

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tiny_audits import DM_FLAGS, N_SHADOW, TINY, audited_runs

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    return audited_runs(tmp_path_factory.getbasetemp())[0]


def execute(name, env, monkeypatch):
    """Run every cell of notebooks/<name> in a fresh kernel (environment `env` added); return the notebook."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS.parent)}}
    ).execute()
    return notebook


def keywords(flags: list[str]) -> dict:
    """audit.run's keywords for flags: ["--quiet", "--n-shadow", "4"] -> {"quiet": True, "n_shadow": "4"}."""
    found, name = {}, None
    for flag in flags:
        if flag.startswith("--"):
            name = flag[2:].replace("-", "_")
            found[name] = True
        else:
            found[name] = flag
    return found


def outputs(notebook, kind):
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs if kind(o)]


@pytest.mark.parametrize("name", ["roc_curves.ipynb", "table_audit.ipynb", "walkthrough.ipynb"])
def test_notebooks_are_stored_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.outputs and c.execution_count is None for c in notebook.cells if c.cell_type == "code")


def test_roc_notebook_plots_the_given_runs(runs_dir, monkeypatch):
    notebook = execute("roc_curves.ipynb", {"AUDIT_RUN_DIRS": str(runs_dir)}, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs(notebook, lambda o: o.output_type == "stream"))
    assert "dm ipc=1 init=real" in text and "subset ipc=1" in text
    # linear + log-log; one panel per experiment; dm's and subset's sub-groups: 3 figures with images
    images = outputs(notebook, lambda o: "image/png" in o.get("data", {}))
    assert len(images) == 4


def test_walkthrough_goes_from_audit_run_to_the_verdict(runs_dir, monkeypatch):
    env = {
        "AUDIT_RUNS_DIR": str(runs_dir),
        "AUDIT_N_SHADOW": N_SHADOW,
        "AUDIT_FLAGS": json.dumps(keywords(TINY)),  # audit.run's keywords
        "AUDIT_DM_FLAGS": json.dumps(keywords(DM_FLAGS)),
        "AUDIT_REPORT_FLAGS": "--n-boot 100 --n-boot-eps 10",
    }
    notebook = execute("walkthrough.ipynb", env, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs(notebook, lambda o: o.output_type == "stream"))
    assert "eps_lower" in text and "eps_ceiling" in text and "no ε claim was checked" in text
    assert "targets [0, 1] of 4 runs, 3000 canaries (plan independent-coins-v1, inclusion rate 0.5)" in text
    # Either baseline verdict is a valid outcome; with these fixed seeds the numbers give "less leakage".
    assert "measurably less leakage than a random real subset of the same size" in text
    data = json.loads((runs_dir / "report.json").read_text())
    assert [e["victim"] for e in data["experiments"]] == ["dm", "subset"]
    assert os.path.isfile(runs_dir / "report.html")


def test_table_notebook_audits_a_table_and_plots_its_roc(tmp_path, monkeypatch):
    # the smallest table audit of tests/end_to_end/test_tabular_audits.py (SMALL, 4 runs), with a claim
    flags = {"epsilon": 1, "rows": 300, "classifier_iterations": 10, "executor": "inline", "quiet": True}
    env = {"AUDIT_RUNS_DIR": str(tmp_path), "AUDIT_N_SHADOW": "4", "AUDIT_FLAGS": json.dumps(flags)}
    notebook = execute("table_audit.ipynb", env, monkeypatch)
    text = "".join(o.get("text", "") for o in outputs(notebook, lambda o: o.output_type == "stream"))
    assert "marginals on fair: " in text
    assert "  verdict: claimed ε = 1 at δ = 1e-05: leakage consistent with the claimed ε; ε ≥ " in text
    # one figure, linear and log-log side by side
    assert len(outputs(notebook, lambda o: "image/png" in o.get("data", {}))) == 1
