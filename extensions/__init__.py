"""What victims, attacks and bounds of your own are loaded by: a `module:name` path or an entry point
of an installed package, each refused in one line `LABEL NAME: why` (`label`: "--victim", "attack",
"bound"). Imports nothing of the suite: every package may import it."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any


def first_line(e: BaseException) -> str:
    """The first line of `e`'s message ("" for none): an error of someone else's code, in one line."""
    return (str(e).strip().splitlines() or [""])[0]


def entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The installed packages' entry points of `group`, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}


def load_entry_point(entry: importlib.metadata.EntryPoint, *, label: str) -> Any:
    """The object `entry` names; ValueError "LABEL NAME: its entry point ... does not load (...)"."""
    try:
        return entry.load()
    except Exception as e:  # a plugin's import can fail in any way; report it in one line
        raise ValueError(
            f"{label} {entry.name}: its entry point {entry.value!r} does not load ({type(e).__name__}: {first_line(e)})"
        ) from None


def load_path(path: str, *, label: str, form: str) -> Any:
    """The object a `module:name` path names; ValueError "LABEL PATH: why" for a path without both
    parts (`form` says what one is), a module that does not import, or a name it lacks."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{label} {path}: {form}")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or whatever the module raises as it runs
        raise ValueError(
            f"{label} {path}: cannot import {module_name!r} ({type(e).__name__}: {first_line(e)})"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"{label} {path}: module {module_name!r} has no {attribute!r}") from None
