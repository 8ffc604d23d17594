"""The built-in victims: one module per pipeline, each registering its victim(s) with
`victims.base.register_victim` as it is imported. The shared parts they are built from (the
protocol, data, training, networks, ...) are the other modules of `victims`, with a folder per
concept (`victims.dp`: accounting, the Gaussian release; `victims.condensation`), which never import
a pipeline (but `victims.dp.bugs`, the pipelines' broken twins).

Importing this package imports every module in it, so a new built-in victim is one new file here
(docs/contracts.md, "Adding a built-in victim")."""

import importlib
import pkgutil

#: the pipeline modules, by name (`victims.pipelines.<name>`)
MODULES = tuple(sorted(info.name for info in pkgutil.iter_modules(__path__)))

for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
