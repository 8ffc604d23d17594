"""One small pair of audited experiments (dm and the subset of the same size) shared by the report,
release-free notebook and chromium tests.

The experiments live under pytest's base temporary directory; whichever test module asks first
trains them (about 10 s), later modules rerun the same commands, which only re-score the stored runs.
"""

from __future__ import annotations

from pathlib import Path

from audit import lira

#: tiny training (tests/conftest.py's TINY) and a 2-iteration DM: 4 runs each, 2 targets each
TINY = ["--train-steps", "10", "--train-net-width", "8", "--executor", "inline", "--quiet"]
DM_FLAGS = ["--iterations", "2"]
VICTIMS = {"dm": ["--victim", "dm", "--ipc", "1", *DM_FLAGS], "subset": ["--victim", "subset", "--ipc", "1"]}
N_SHADOW = "4"


def audited_runs(base: Path) -> tuple[Path, dict[str, Path]]:
    """(runs dir, victim -> experiment directory) of the two tiny audits under `base`."""
    runs_dir = base / "tiny-audits"
    for flags in VICTIMS.values():
        assert lira.main(["--runs-dir", str(runs_dir), "--n-shadow", N_SHADOW, *flags, *TINY]) == 0
    found = {p.name.split("-")[0]: p for p in runs_dir.iterdir() if (p / "audit" / "summary.json").is_file()}
    return runs_dir, found
