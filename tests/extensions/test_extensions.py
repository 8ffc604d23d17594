"""The one loader of victims, attacks and bounds of your own: each refusal is one line naming the
label and the path or entry point, as the command lines print it."""

import importlib.metadata

import pytest

from extensions import entry_points, first_line, load_entry_point, load_path

FORM = "an attack path is module:function, e.g. my_package.attacks:my_attack"


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    (tmp_path / "plugin_mod.py").write_text("VALUE = 3\n")
    (tmp_path / "raising_mod.py").write_text("raise RuntimeError('broken\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_path_names_the_object(module_dir):
    assert load_path("plugin_mod:VALUE", label="attack", form=FORM) == 3


@pytest.mark.parametrize(
    "label, path, message",
    [
        ("attack", "plugin_mod", f"attack plugin_mod: {FORM}"),
        ("attack", ":VALUE", f"attack :VALUE: {FORM}"),
        (
            "--victim",
            "no_such_module:X",
            "--victim no_such_module:X: cannot import 'no_such_module' "
            "(ModuleNotFoundError: No module named 'no_such_module')",
        ),
        ("--victim", "raising_mod:X", "--victim raising_mod:X: cannot import 'raising_mod' (RuntimeError: broken)"),
        ("attack", "plugin_mod:nope", "attack plugin_mod:nope: module 'plugin_mod' has no 'nope'"),
    ],
)
def test_a_path_that_does_not_load_is_refused_in_one_line(module_dir, label, path, message):
    with pytest.raises(ValueError) as error:
        load_path(path, label=label, form=FORM)
    assert str(error.value) == message


def test_an_entry_point_loads_or_is_refused_in_one_line(module_dir):
    good = importlib.metadata.EntryPoint(name="three", value="plugin_mod:VALUE", group="g")
    assert load_entry_point(good, label="bound") == 3
    bad = importlib.metadata.EntryPoint(name="half", value="plugin_mod:NOPE", group="g")
    with pytest.raises(ValueError) as error:
        load_entry_point(bad, label="bound")
    assert str(error.value).startswith("bound half: its entry point 'plugin_mod:NOPE' does not load (AttributeError: ")
    assert "\n" not in str(error.value)


def test_an_unknown_group_has_no_entry_points_and_an_error_has_its_first_line():
    assert entry_points("membership_audit.no_such_group") == {}
    assert first_line(ValueError("\n one\ntwo")) == "one" and first_line(ValueError()) == ""
