"""The command line is a contract no diff of a dataclass shows: every flag of the audit entry
points, generated or not, is listed in tests/snapshots/flags.txt, so renaming a victim's field (and
with it a flag) or adding one shows up as a change to that file. After an intended change:
`UPDATE_SNAPSHOTS=1 pytest tests/contracts/test_flags.py`, and review the diff."""

import argparse
import os
from pathlib import Path

from audit.cli import flags, release_command
from audit.cli.victim_flags import victim_classes
from victims.overrides import config_fields, flag_name

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "flags.txt"


def flag_table() -> str:
    lines = []
    for prog, parser in (
        ("audit.lira", flags.build_parser("audit.lira", "", argv=[])),
        ("audit.release", release_command.build_parser([])),
    ):
        for action in parser._actions:
            if action.option_strings and not action.dest.startswith("victim__") and action.dest != "help":
                kind = getattr(action.type, "__name__", None) or ("flag" if action.nargs == 0 else "str")
                default = "" if action.default in (None, argparse.SUPPRESS) else f" = {action.default!r}"
                lines.append(f"{prog} {'/'.join(action.option_strings)} {kind}{default}")
    users: dict[str, list[str]] = {}
    for name, cls in victim_classes([]).items():
        if not cls.__module__.startswith("victims."):
            continue  # an installed plugin's flags are its own
        for path, kind, f in config_fields(cls):
            users.setdefault(f"{flag_name(path)} {kind.__name__}", []).append(name)
    lines += [f"victim {flag}: {' '.join(sorted(names))}" for flag, names in sorted(users.items())]
    return "\n".join(lines) + "\n"


def test_the_flags_are_those_of_the_snapshot():
    table = flag_table()
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(table)
    assert table == SNAPSHOT.read_text(), "the flags changed: rerun with UPDATE_SNAPSHOTS=1 and review the diff"
