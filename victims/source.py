"""The code a victim's runs come from: a SHA-256 over the source of the victim's module and every
module of its own top-level package it imports, directly or not (other packages' versions are
provenance), plus its `environment()` where it has one (`command`). A run store records it
(`victim_source`) and refuses to mix runs of other code (`shadow_runs.store.RunStore.open`)."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import json
import sys
from pathlib import Path


def victim_source(victim_class: type, environment: dict | None = None) -> dict:
    """{"sha256": hex digest, "modules": [module names hashed, sorted]} of `victim_class`'s code; a
    JSON-able `environment` is hashed too and recorded as "environment"."""
    root = victim_class.__module__
    modules = _closure(root)
    digest = hashlib.sha256()
    for name in sorted(modules):
        digest.update(name.encode() + b"\0" + modules[name] + b"\0")
    if environment is None:
        return {"sha256": digest.hexdigest(), "modules": sorted(modules)}
    digest.update(b"environment\0" + json.dumps(environment, sort_keys=True).encode())
    return {"sha256": digest.hexdigest(), "modules": sorted(modules), "environment": environment}


def _closure(root: str) -> dict[str, bytes]:
    """module name -> source bytes, for `root` and the modules of its top-level package it imports."""
    package = root.split(".")[0]
    found: dict[str, bytes] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = _source_path(name)
        if path is None:
            continue
        source = path.read_bytes()
        found[name] = source
        todo.extend(
            m for m in _imports(source, name, is_package=path.name == "__init__.py") if m.split(".")[0] == package
        )
    return found


def _source_path(name: str) -> Path | None:
    module = sys.modules.get(name)
    if module is not None:
        try:
            return Path(inspect.getsourcefile(module))
        except (TypeError, OSError):
            return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


@functools.lru_cache(maxsize=1024)
def _imports(source: bytes, name: str, *, is_package: bool) -> tuple[str, ...]:
    """The modules `source` (of module `name`) imports, absolute names; `from p import m` names both
    p and p.m (m may be a module or an attribute: a name that is no module is skipped later).
    Memoised by the source itself, so an edited module is parsed again."""
    here = name if is_package else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            out.append(base)
            out.extend(f"{base}.{alias.name}" for alias in node.names)
    return tuple(out)
