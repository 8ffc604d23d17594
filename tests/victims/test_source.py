"""The code a store's runs come from (`victims.source`): a built-in victim's modules, a plugin's
own module and package, and a hash that moves with any of them."""

import sys

from victims import get_victim
from victims.source import victim_source


def test_a_built_in_victim_hashes_its_pipeline_and_the_shared_victims_modules_it_imports():
    dm = victim_source(get_victim("dm"))
    shared = {"victims.condensation.condense", "victims.train", "victims.nets", "victims.base"}
    assert {"victims.pipelines.dm"} | shared <= set(dm["modules"])
    assert all(m.startswith("victims.") for m in dm["modules"])
    assert len(dm["sha256"]) == 64 and victim_source(get_victim("dm")) == dm
    assert victim_source(get_victim("dsa"))["sha256"] != dm["sha256"]


def test_a_pipelines_hash_leaves_out_the_other_pipelines_unless_it_imports_them():
    """The package `victims.pipelines` imports every pipeline, but a pipeline does not import the
    package: adding a victim (a new file there) leaves every other victim's hash as it was."""
    pipelines = lambda name: [m for m in victim_source(get_victim(name))["modules"] if "pipelines" in m]  # noqa: E731
    assert pipelines("dm") == ["victims.pipelines.dm"]
    assert pipelines("subset") == ["victims.pipelines.real", "victims.pipelines.subset"]  # it fits as real does


def test_a_plugins_hash_follows_its_own_package_and_not_this_one(tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("SCALE = 2\n")
    (package / "gen.py").write_text(
        "from dataclasses import dataclass\nfrom victims.base import Observations\nfrom . import helpers\n\n"
        "@dataclass(frozen=True)\nclass Gen:\n    name = 'gen'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from mypkg.gen import Gen

    first = victim_source(Gen)
    assert first["modules"] == ["mypkg", "mypkg.gen", "mypkg.helpers"]  # victims.base is not the plugin's
    (package / "helpers.py").write_text("SCALE = 3\n")  # a change in a module it imports
    assert victim_source(Gen)["sha256"] != first["sha256"]
    for name in ("mypkg", "mypkg.gen", "mypkg.helpers"):
        sys.modules.pop(name, None)
