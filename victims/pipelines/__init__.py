"""The built-in victims: one module per pipeline, each registering its victim(s) as it is imported.
Importing this package imports every module in it, so a new built-in victim is one new file here
(docs/contracts.md, "Adding a built-in victim")."""

import importlib
import pkgutil

#: the pipeline modules, by name (`victims.pipelines.<name>`)
MODULES = tuple(sorted(info.name for info in pkgutil.iter_modules(__path__)))

for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
