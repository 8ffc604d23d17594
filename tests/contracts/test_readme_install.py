"""The README's first command installs everything its usage block runs: with the packages of every
extra that command does not install hidden, each usage line's entry point imports and its victim
accepts its dataset (tables included)."""

import importlib.metadata
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

#: run in a fresh interpreter: hide the modules argv[1] names, then check each (module, victim, dataset)
CHECK = """
import importlib, json, sys
hidden, commands = json.loads(sys.argv[1])
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in hidden:
            raise ModuleNotFoundError(f"No module named {name!r} (an extra the install leaves out)", name=name)
sys.meta_path.insert(0, Hide())
from victims import load_pool
from victims.overrides import build_victim
for module, victim, dataset in commands:
    try:
        importlib.import_module(module)
        build_victim(victim, {}).check(load_pool(dataset))
    except Exception as e:
        print(f"{module} --victim {victim} --dataset {dataset}: {e}")
"""


def first_install(readme: str) -> set[str]:
    """The extras the README's first command installs (`pip install -e .` or `-e ".[a,b]"`)."""
    first = re.search(r"```bash\n(.*?)\n```", readme, re.S).group(1)
    found = re.search(r'pip install -e "?\.(?:\[([\w,-]+)\])?"?(?:\s|$)', first)
    assert found, f"no `pip install -e .` in the README's first command: {first}"
    return set(filter(None, (found.group(1) or "").split(",")))


def usage_commands(readme: str) -> list[tuple[str, str, str]]:
    """(module, victim, dataset) of every `python -m audit.X` line of the README's usage block."""
    block = readme.split("## Usage", 1)[1].split("```", 2)[1]
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] == ["python", "-m"]:
            dataset = words[words.index("--dataset") + 1] if "--dataset" in words else "digits"
            commands.append((words[2], words[words.index("--victim") + 1], dataset))
    return commands


def hidden_modules(extras: dict[str, list[str]], installed: set[str], core: list[str]) -> list[str]:
    """The top-level modules of the extras' packages that neither `installed` extras nor `core` bring."""

    def name(requirement: str) -> str:
        return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")

    kept = {name(r) for r in core} | {name(r) for extra in installed for r in extras[extra]}
    left_out = {name(r) for extra, reqs in extras.items() if extra not in installed for r in reqs} - kept
    modules = importlib.metadata.packages_distributions()
    return sorted(m for m, dists in modules.items() if {d.lower().replace("_", "-") for d in dists} & left_out)


def failures(hidden: list[str], commands: list[tuple[str, str, str]]) -> list[str]:
    argv = [sys.executable, "-c", CHECK, json.dumps([hidden, commands])]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()


def test_the_readme_s_install_brings_every_usage_line_tables_included():
    commands = usage_commands(README)
    assert ("audit.lira", "marginals", "fair") in commands and ("audit.ganleak", "cgan", "digits") in commands
    extras = PROJECT["optional-dependencies"]
    hidden = hidden_modules(extras, first_install(README), PROJECT["dependencies"])
    assert "mlxtend" in hidden and "pandas" not in hidden  # extras left out are hidden, dependencies are not
    assert failures(hidden, commands) == []


def test_a_table_s_packages_in_an_extra_the_install_leaves_out_fail_the_tables_line():
    extras = {"tabular": ["statsmodels>=0.14"]}
    assert first_install('```bash\npip install -e ".[mnist,tabular]" && x\n```') == {"mnist", "tabular"}
    (failed,) = failures(hidden_modules(extras, set(), ["torch"]), [("audit.lira", "marginals", "fair")])
    assert failed.startswith("audit.lira --victim marginals --dataset fair:") and "statsmodels" in failed
