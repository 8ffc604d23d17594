"""A victim built from overrides of its configuration: field paths ("train__steps") to values, as
the command line (`audit.cli.victim_flags`) and a release audit (`audit.releases`) give them."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Mapping

from victims.base import get_victim


@functools.cache
def config_fields(cls: type) -> tuple[tuple[tuple[str, ...], type, dataclasses.Field], ...]:
    """(path, type, field) for every scalar field of a victim dataclass, nested ones flattened (worked
    out once per class: a command line's parser asks for every victim's)."""
    return tuple(_scalar_fields(cls, ()))


def _scalar_fields(cls: type, prefix: tuple[str, ...]):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _scalar_fields(kind, prefix + (f.name,))
            continue
        if isinstance(kind, types.UnionType):  # `int | None`
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        yield prefix + (f.name,), kind, f


@functools.cache
def takes(cls: type) -> frozenset[str]:
    """The field paths ("train__steps") a victim takes: `build_victim` refuses any other, and its
    `--help` lists no other (`audit.cli.victim_flags.add_victim_flags`)."""
    return frozenset("__".join(path) for path, _, _ in config_fields(cls))


def flag_name(path: tuple[str, ...]) -> str:
    return "--" + "-".join(path).replace("_", "-")


def build_victim(name: str, overrides: Mapping[str, Any]):
    """The victim `name` with `overrides` (field path -> value, as `victim_overrides` reads them)
    in place of its defaults; raises ValueError on a field it lacks or a bad value."""
    cls = get_victim(name)
    given = dict(overrides)
    stray = sorted(set(given) - takes(cls))
    if stray:
        raise ValueError(f"{flag_name(tuple(stray[0].split('__')))} does not apply to victim {name!r}")

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
