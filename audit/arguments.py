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

    return parse


def probability(text: str) -> float:
    """An argument type: a number in (0, 1)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}")
    return value


def positive_number(text: str) -> float:
    """An argument type: a finite number > 0 (an epsilon)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def delta_in_unit(text: str) -> float:
    """An argument type: a number in [0, 1) (a delta; 0 for pure DP)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}")
    return value
