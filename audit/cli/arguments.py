"""Command-line pieces the entry points share: a parser whose errors are one line with exit
status 2, and argument types whose messages name the bad value."""

from __future__ import annotations

import argparse
import difflib
import sys
import typing

from audit.claim import delta_argument, epsilon_argument, number_argument


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """argparse's help, each flag's text ending "(default: X)" unless it already names its default
    or the flag has none (None, or a switch that is off unless given)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
            return text
        return f"{text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, formatter_class=DefaultsHelpFormatter, **kwargs) -> None:
        super().__init__(*args, formatter_class=formatter_class, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        """One line on stderr, exit status 2 (argparse's default also prints the usage)."""
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's parse, but an unrecognized argument is reported before a missing required one
        (a misspelled required flag is both, and the misspelling is what to fix), and the line
        suggests the closest flag for each misspelled one."""
        argv = sys.argv[1:] if args is None else list(args)
        extras = self._unrecognized(argv)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._did_you_mean(extras)}")
        return super().parse_args(argv, namespace)

    def _unrecognized(self, argv: list[str]) -> list[str]:
        """The arguments of `argv` that no flag takes: argparse's own parse with nothing required
        (its other errors, a bad value say, exit as they would in the full parse)."""
        requirers = [*self._actions, *self._mutually_exclusive_groups]
        required = [r.required for r in requirers]
        try:
            for r in requirers:
                r.required = False
            return self.parse_known_args(argv)[1]
        finally:
            for r, was in zip(requirers, required):
                r.required = was

    def _did_you_mean(self, extras: list[str]) -> str:
        """' (did you mean --flag?)' for the unrecognized flags among `extras` that are close to a
        flag of this parser (difflib's default cutoff, on the names without their dashes)."""
        flags = {f.lstrip(self.prefix_chars): f for a in self._actions for f in a.option_strings}
        hints = []
        for text in extras:
            given = text.split("=", 1)[0]
            if given[:1] not in self.prefix_chars or self._negative_number_matcher.match(given):
                continue  # a value, not a flag
            close = difflib.get_close_matches(given.lstrip(self.prefix_chars), flags, n=1)
            if close:
                hints.append((given, flags[close[0]]))
        if not hints:
            return ""
        if len(hints) == 1:
            return f" (did you mean {hints[0][1]}?)"
        return f" (did you mean {', '.join(f'{flag} for {given}' for given, flag in hints)}?)"


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


def probability(text: str) -> float:
    """An argument type: a number in (0, 1)."""
    return number_argument(text, accepts=lambda v: 0 < v < 1, requirement="a number in (0, 1)")


def add_claim_flags(parser: argparse.ArgumentParser) -> None:
    """--claimed-epsilon and --claimed-delta, the claim an audit checks (`audit.claim`): the audit
    commands record it in summary.json, whose verdict is then at the claim's δ; the report checks it."""
    parser.add_argument(
        "--claimed-epsilon",
        type=epsilon_argument,
        default=None,
        help="the ε the pipeline claims, checked by the verdict (default: the victim's formal ε, if any)",
    )
    parser.add_argument(
        "--claimed-delta", type=delta_argument, default=None, help="the δ of that claim (default: the victim's δ, or 0)"
    )
