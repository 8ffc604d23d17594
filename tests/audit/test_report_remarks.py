"""The report says what the terminal says: the test of the claimed mechanism's own curve, the figures
no better than guessing ("(chance)") and the warnings of too few runs are on report.html (and in
report.json) exactly where the audit's terminal printed them (`audit.reporting.remarks`)."""

import contextlib
import io
import json
import re
from html import escape
from pathlib import Path

import pytest

from audit import lira
from audit.cli import report_command
from tiny_audits import TINY, VICTIMS

#: tiny training, printing the terminal lines
LOUD = [flag for flag in TINY if flag != "--quiet"]
#: dpsgd's runs record the mechanism their accountant composed: the terminal tests its own curve
DPSGD = ["--victim", "dpsgd", "--epsilon", "4", "--epochs", "1", "--net-width", "8", "--executor", "inline"]
#: the terminal's TPR figures and the rate each is at
TPR = {"TPR@1%FPR": "0.01", "TPR@0.1%FPR": "0.001"}


def printed_and_reported(runs_dir: Path, flags: list[str]) -> tuple[str, dict, str]:
    """(the terminal's lines, report.json's experiment, report.html) of one tiny audit."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert lira.main(["--runs-dir", str(runs_dir), "--n-shadow", "4", *flags]) == 0
    (root,) = [p for p in runs_dir.iterdir() if (p / "audit" / "summary.json").is_file()]
    with contextlib.redirect_stdout(io.StringIO()):
        assert report_command.main([str(root)]) == 0
    (entry,) = json.loads((root / "audit" / "report.json").read_text())["experiments"]
    return printed.getvalue(), entry, (root / "audit" / "report.html").read_text()


@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    return {
        "dpsgd": printed_and_reported(tmp_path_factory.mktemp("dpsgd"), DPSGD),
        "dm": printed_and_reported(tmp_path_factory.mktemp("dm"), [*VICTIMS["dm"], *LOUD]),
    }


def terminal_chance(printed: str) -> dict[str, set[str]]:
    """attack -> the rates its terminal line marks "(chance)"."""
    marks = {}
    for line in printed.splitlines():
        found = re.match(r"^  (\S+) +AUC ", line)
        if found:
            figures = re.findall(r"(TPR@[\d.]+%FPR) [\d.]+( \(chance\))?", line)
            marks[found.group(1)] = {TPR[name] for name, chance in figures if chance}
    return marks


def page_chance(page: str, attack: str) -> set[str]:
    """The rates whose TPR cell of the attack's row in the page's metrics table is marked "(chance)"."""
    row = re.search(rf"<tr><td>{re.escape(attack)}</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row)  # AUC, then TPR at 10%, 1% and 0.1% FPR
    return {rate for rate, cell in zip(("0.1", "0.01", "0.001"), cells[1:4]) if "(chance)" in cell}


@pytest.mark.parametrize("victim", ["dpsgd", "dm"])
def test_the_report_shows_the_own_curve_the_chance_marks_and_the_warnings_the_terminal_prints(audits, victim):
    printed, entry, page = audits[victim]
    lines = printed.splitlines()
    own = [line.removeprefix("  own curve: ") for line in lines if line.startswith("  own curve: ")]
    warnings = [line.removeprefix("  warning: ") for line in lines if line.startswith("  warning: ")]
    chance = terminal_chance(printed)

    assert entry["own_curve"] == (own[0] if own else None)
    assert (escape(own[0]) in page) if own else ("own curve</span>" not in page)
    assert entry["warnings"] == warnings
    assert all(escape(f"warning: {w}") in page for w in warnings)
    assert page.count('<li class="warning">') == len(warnings)
    assert chance and chance.keys() <= entry["attacks"].keys()
    for attack, rates in chance.items():
        assert set(entry["at_chance"][attack]) == rates
        assert page_chance(page, attack) == rates, attack
    if victim == "dpsgd":  # the runs record their mechanism; 2 x ~1,500 non-members are too few at 0.1% FPR
        assert own and own[0].startswith("the claimed mechanism (noise multiplier ")
        assert warnings and any(chance.values())
    else:  # dm records no mechanism
        assert not own
