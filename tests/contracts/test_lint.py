"""The code's form is checked, not argued: `ruff format --check` (the layout `ruff format` gives)
and `ruff check` (pyflakes and pycodestyle, line length 120; pyproject.toml, [tool.ruff]) pass on
the whole repository, so a new violation fails the suite and with it .ci/run."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_code_is_formatted():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_finds_nothing():
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr
