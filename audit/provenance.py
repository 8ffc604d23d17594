"""What the numbers were made with: package versions, the code's git commit and the Python
version, saved beside every experiment (experiment.json) and report (report.json)."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path


def provenance() -> dict:
    """Package versions and the git commit of the code, saved next to the numbers."""
    versions = {}
    for name in ("membership-audit", "torch", "opacus", "ray", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or None
        )
    except OSError:
        commit = None
    return {
        "package_version": versions["membership-audit"],
        "versions": versions,
        "git_commit": commit,
        "python": platform.python_version(),
    }
