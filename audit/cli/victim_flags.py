"""Victim flags, generated from the victim dataclasses: one `--flag` per (nested) field, so the
victim registry is the single source of the flags; the generated table is snapshotted in
tests/snapshots/flags.txt, so a renamed field shows as a renamed flag in a diff.

`victim_overrides(args)` reads the flags given on a command line into a mapping of field paths
("train__steps") to values; `build_victim(name, overrides)` builds the victim from such a
mapping (a caller adds its own entries to the mapping, never to argparse's namespace).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from typing import Any, Mapping

from victims import get_victim, victim_names


def _flag_fields(cls: type, prefix: tuple[str, ...] = ()):
    """(path, type, field) for every scalar field of a victim dataclass, nested ones flattened."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _flag_fields(kind, prefix + (f.name,))
            continue
        if isinstance(kind, types.UnionType):  # `int | None`
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        yield prefix + (f.name,), kind, f


def _flag(path: tuple[str, ...]) -> str:
    return "--" + "-".join(path).replace("_", "-")


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
            raise argparse.ArgumentTypeError(str(e)) from None
        if allowed is not None and text in victim_names() and text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r} is not audited by this command (choose from {', '.join(allowed)}, "
                                             "or a module:Class path)")
        return text

    parse.__name__ = "victim"  # how the flag table (tests/snapshots/flags.txt) names this type
    return parse


def add_victim_flags(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> None:
    """One flag per victim field (`victim_classes(argv)`). A field several victims share (same name
    and type) is one flag; where their help texts differ, each victim's text is shown, prefixed
    with the victims' names."""
    group = parser.add_argument_group("victim flags (each applies to the victims that have it)")
    flags: dict[str, tuple[tuple[str, ...], type, dataclasses.Field]] = {}
    helps: dict[str, dict[str, list[str]]] = {}  # dest -> help text -> victims that use it
    choices: dict[str, dict] = {}  # dest -> every victim's choices, in order (each victim checks its own)
    for name, cls in victim_classes(argv).items():
        for path, kind, f in _flag_fields(cls):
            flags.setdefault(_dest(path), (path, kind, f))
            helps.setdefault(_dest(path), {}).setdefault(f.metadata.get("help", ""), []).append(name)
            choices.setdefault(_dest(path), {}).update(dict.fromkeys(f.metadata.get("choices", ())))
    for dest, (path, kind, f) in flags.items():
        texts = helps[dest]
        help_text = next(iter(texts)) if len(texts) == 1 else "; ".join(
            f"{', '.join(names)}: {text}" for text, names in texts.items() if text)
        kwargs = {"dest": dest, "default": argparse.SUPPRESS,
                  "help": help_text.replace("%", "%%") or None}  # argparse formats help with %
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = kind
            if choices[dest]:
                kwargs["choices"] = tuple(choices[dest])
            else:
                kwargs["metavar"] = kind.__name__.upper()
        group.add_argument(_flag(path), **kwargs)


def victim_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The victim flags given on the command line: field path ("train__steps") -> value."""
    return {k[len("victim__"):]: v for k, v in vars(args).items() if k.startswith("victim__")}


def build_victim(name: str, overrides: Mapping[str, Any]):
    """The victim `name` with `overrides` (field path -> value, as `victim_overrides` reads them)
    in place of its defaults; raises ValueError on a field it lacks or a bad value."""
    cls = get_victim(name)
    given = dict(overrides)
    own = {"__".join(path) for path, _, _ in _flag_fields(cls)}
    stray = sorted(set(given) - own)
    if stray:
        raise ValueError(f"{_flag(tuple(stray[0].split('__')))} does not apply to victim {name!r}")

    def construct(kind: type, prefix: tuple[str, ...], base=None):
        """`kind` with the given flags under `prefix`; a nested configuration starts from the
        enclosing one's default for it (a victim's own default, e.g. a narrower net), not from
        the nested class's defaults, and is left at that default when none of its flags is given."""
        hints = typing.get_type_hints(kind)
        kwargs = {}
        for f in dataclasses.fields(kind):
            key = "__".join(prefix + (f.name,))
            if dataclasses.is_dataclass(hints[f.name]):
                if any(k.startswith(key + "__") for k in given):
                    if base is not None:
                        default = getattr(base, f.name)
                    else:
                        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                    kwargs[f.name] = construct(hints[f.name], prefix + (f.name,), default)
            elif key in given:
                kwargs[f.name] = given[key]
        return kind(**kwargs) if base is None else dataclasses.replace(base, **kwargs)

    return construct(cls, ())
