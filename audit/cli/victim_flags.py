"""Victim flags, generated from the victim dataclasses: one `--flag` per (nested) field, so the
victim registry is the single source of the flags (snapshotted in tests/snapshots/flags.txt).
`victim_overrides(args)` reads them into field paths ("train__steps") -> values, from which
`victims.overrides.build_victim` builds the victim; callers add to that mapping, never to argparse's.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import sys
from typing import Any

from victims import get_victim, victim_names
from victims.overrides import config_fields, flag_name, takes


def _dest(path: tuple[str, ...]) -> str:
    return "victim__" + "__".join(path)


def given_victim(argv: list[str] | None) -> str | None:
    """The value of --victim on the command line `argv` (None: sys.argv), before the full parse:
    a victim given as a module:Class path brings its own flags."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--victim")
    return pre.parse_known_args(sys.argv[1:] if argv is None else argv)[0].victim


def victim_classes(argv: list[str] | None = None) -> dict[str, type]:
    """name -> class of every victim whose flags the parser offers: the built-in ones, the
    installed plugins that load, and the module:Class victim on the command line if it loads (one
    that does not is reported by the --victim argument itself)."""
    classes = {}
    for name in (*victim_names(), given_victim(argv)):
        if name is not None and name not in classes:
            try:
                classes[name] = get_victim(name)
            except ValueError:
                pass
    return classes


def victim_argument(allowed: tuple[str, ...] | None = None):
    """An argument type for --victim: a built-in or installed victim (of `allowed`, if given) or a
    module:Class path to a class that follows the victim protocol; the message names the value."""

    def parse(text: str) -> str:
        try:
            get_victim(text)
        except ValueError as e:
            close = difflib.get_close_matches(text, allowed, n=1) if allowed and ":" not in text else None
            if close is not None:  # suggest only a victim this command audits
                hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(allowed)}"
                raise argparse.ArgumentTypeError(f"unknown victim {text!r} ({hint})") from None
            raise argparse.ArgumentTypeError(str(e)) from None
        if allowed is not None and text in victim_names() and text not in allowed:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not audited by this command (choose from {', '.join(allowed)}, or a module:Class path)"
            )
        return text

    parse.__name__ = "victim"  # how the flag table (tests/snapshots/flags.txt) names this type
    return parse


def add_victim_flags(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> None:
    """One flag per victim field (`victim_classes(argv)`). A field several victims share (same name
    and type) is one flag; where their help texts differ, each victim's text is shown, prefixed
    with the victims' names. With a victim given on `argv`, `--help` lists only that victim's flags
    (the others are still parsed, and refused by name for it)."""
    given = given_victim(argv)
    group = parser.add_argument_group("victim flags (each applies to the victims that have it)")
    flags: dict[str, tuple[tuple[str, ...], type, dataclasses.Field]] = {}
    helps: dict[str, dict[str, list[str]]] = {}  # dest -> help text -> victims that use it
    defaults: dict[str, dict[str, list[str]]] = {}  # dest -> default -> victims that have it (None: not shown)
    choices: dict[str, dict] = {}  # dest -> every victim's choices, in order (each victim checks its own)
    classes = victim_classes(argv)
    for name, cls in classes.items():
        instance = _instance(cls)
        for path, kind, f in config_fields(cls):
            flags.setdefault(_dest(path), (path, kind, f))
            helps.setdefault(_dest(path), {}).setdefault(f.metadata.get("help", ""), []).append(name)
            defaults.setdefault(_dest(path), {}).setdefault(_default(instance, path, f), []).append(name)
            choices.setdefault(_dest(path), {}).update(dict.fromkeys(f.metadata.get("choices", ())))
    for dest, (path, kind, f) in flags.items():
        texts = helps[dest]
        help_text = (
            next(iter(texts))
            if len(texts) == 1
            else "; ".join(f"{', '.join(names)}: {text}" for text, names in texts.items() if text)
        )
        shown = given not in classes or "__".join(path) in takes(classes[given])  # what build_victim accepts
        kwargs = {
            "dest": dest,
            "default": argparse.SUPPRESS,
            "help": (help_text + _defaults_text(defaults[dest])).replace("%", "%%") or None
            if shown
            else argparse.SUPPRESS,
        }  # argparse formats help with %
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = kind
            if choices[dest]:
                kwargs["choices"] = tuple(choices[dest])
            else:
                kwargs["metavar"] = kind.__name__.upper()
        group.add_argument(flag_name(path), **kwargs)


def _instance(cls: type):
    """`cls()`, the victim with its defaults; None for a victim class (a module:Class of the user's)
    that needs arguments."""
    try:
        return cls()
    except Exception:
        return None


def _default(instance, path: tuple[str, ...], f: dataclasses.Field) -> str | None:
    """The value of the field at `path` in `instance` (`_instance`); None if there is none, or if the
    field's own default is None (a value worked out later, as its help says: from --preset, ...)."""
    if f.default is None or instance is None:
        return None
    value = functools.reduce(getattr, path, instance)
    return None if value is None else str(value)


def _defaults_text(defaults: dict[str | None, list[str]]) -> str:
    """' (default: X)' where every victim with a default has X, else ' (defaults: X for a, b; Y for c)'."""
    shown = {value: names for value, names in defaults.items() if value is not None}
    if len(shown) == 1 and None not in defaults:
        return f" (default: {next(iter(shown))})"
    listed = "; ".join(f"{value} for {', '.join(names)}" for value, names in shown.items())
    return f" (defaults: {listed})" if shown else ""


def victim_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The victim flags given on the command line: field path ("train__steps") -> value."""
    return {k[len("victim__") :]: v for k, v in vars(args).items() if k.startswith("victim__")}
