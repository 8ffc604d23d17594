"""Command-line pieces the entry points share: a parser whose errors are one line with exit
status 2, and argument types whose messages name the bad value."""

from __future__ import annotations

import argparse
import math
import typing


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        """One line on stderr, exit status 2 (argparse's default also prints the usage)."""
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")


def int_at_least(low: int):
    """An argument type: an integer >= low."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    parse.__name__ = f"int>={low}"  # how the flag table (tests/snapshots/flags.txt) names this type
    return parse


def _number(text: str, *, accepts, requirement: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not accepts(value):  # NaN fails every comparison, so an unparsable text lands here too
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {text!r}")
    return value


def probability(text: str) -> float:
    """An argument type: a number in (0, 1)."""
    return _number(text, accepts=lambda v: 0 < v < 1, requirement="a number in (0, 1)")


def positive_number(text: str) -> float:
    """An argument type: a finite number > 0 (an epsilon)."""
    return _number(text, accepts=lambda v: 0 < v < math.inf, requirement="a finite number > 0")


def delta_in_unit(text: str) -> float:
    """An argument type: a number in [0, 1) (a delta; 0 for pure DP)."""
    return _number(text, accepts=lambda v: 0 <= v < 1, requirement="a number in [0, 1)")
