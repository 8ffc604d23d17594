"""A custodian's own generator, from the README alone: its "Audit your own generator" blocks (the
generator module and the script that writes pool.npz and release.npz) run in a directory outside
the package, then `python -m audit.release` audits the release, and the report's first two
verdicts answer the custodian's two questions."""

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
SUBSET_VERDICTS = {"gain_over_subset", "no_gain_over_subset", "more_than_subset"}


def readme_blocks() -> tuple[str, str, str]:
    """(my_generator.py, the script writing the files, the audit command) from the README."""
    section = README.read_text().split("### Audit your own generator", 1)[1].split("\n## ", 1)[0]
    module, script = re.findall(r"```python\n(.*?)```", section, re.S)
    (command,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return module, script, command.strip()


def test_the_readme_generator_is_audited_by_audit_release_from_outside_the_package(tmp_path, monkeypatch):
    module, script, command = readme_blocks()
    (tmp_path / "my_generator.py").write_text(module)
    (tmp_path / "make_release.py").write_text(script)
    # `PYTHONPATH=. python make_release.py`, run in this process (its directory the working one, first on the
    # path): the script is the custodian's, not the suite's, and a second interpreter would import torch
    # again (its start ~6 CPU-s); the audit below is the README's command in an interpreter of its own.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        runpy.run_path("make_release.py", run_name="__main__")
    finally:
        sys.modules.pop("my_generator", None)  # the audit imports it from its own interpreter
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["pool.npz", "release.npz"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # The README's command, as written, with fewer and smaller runs for the test.
    argv = command.removeprefix("PYTHONPATH=. python").split()
    assert argv[:2] == ["-m", "audit.release"] and "my_generator:ClassGaussian" in argv
    argv[argv.index("--n-shadow") + 1] = "4"
    tiny = ["--train-steps", "20", "--train-net-width", "8", "--executor", "inline", "--quiet", "--runs-dir", "runs"]
    done = subprocess.run(
        [sys.executable, *argv, *tiny], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    (report,) = (tmp_path / "runs").glob("release-*/audit/report.json")
    leakage, baseline = json.loads(report.read_text())["experiments"][0]["verdicts"]  # no claim: two verdicts
    assert leakage["kind"] == "release_leakage" and leakage["text"].startswith(
        "an attacker who wrongly flags 1 in 1,000 non-members finds"
    )
    assert "of your" in leakage["reason"] and "ε ≥" in leakage["reason"]  # fair coins recorded: an ε bound
    assert baseline["kind"] in SUBSET_VERDICTS and "random real subset" in baseline["text"]
    experiment = json.loads(next((tmp_path / "runs").glob("class-gaussian-*/experiment.json")).read_text())
    assert experiment["config"]["ipc"] == 10 and experiment["victim_source"]["modules"] == ["my_generator"]
    assert next((tmp_path / "runs").glob("subset-pool-*/runs/00003.json"))  # 4 random subsets, trained by the audit
