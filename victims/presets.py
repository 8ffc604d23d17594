"""Fields a preset fills, at construction: the hook of a frozen victim dataclass whose fields left
at None take their value from a preset (`--preset` of psg and the condensation victims), so that
the instance holds every value from the moment it exists and nothing is set on it afterwards."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any


def filled_from_preset(cls: type) -> type:
    """Class decorator, above `@dataclass`, for a class with a classmethod `preset_values(values)`: each
    field passed or defaulted as None takes the preset's value before the dataclass's __init__ runs, so
    the instance, its equality and its configuration are those of the values written out. A subclass
    is decorated again; where one is not, `require_filled` names the field left at None."""
    init = cls.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        given = signature.bind(self, *args, **kwargs).arguments
        del given["self"]
        values = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        values.update(given)
        filled = {name: value for name, value in cls.preset_values(values).items() if values[name] is None}
        init(self, **{**given, **filled})

    cls.__init__ = __init__
    return cls


def require_filled(config: Any) -> None:
    """ValueError naming the first field `config`'s preset gives that is still None: a subclass
    whose own __init__ was not decorated. Called by `__post_init__` once the preset is checked."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    for name in type(config).preset_values(values):
        if values[name] is None:
            raise ValueError(f"--{name.replace('_', '-')} has no value: {type(config).__name__} lacks its preset hook")
