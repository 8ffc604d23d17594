"""The house rules of the package layout: imports point down (attacks and victims never import the
audit; the run store never imports the victims; the extension loader imports none of them), no
module imports itself back through others, the statistics import nothing that reads files, and
reading or reporting audits does not import torch. An import inside a function counts as much as
one at the top: it runs the same import, later."""

import ast
import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("attacks", "audit", "extensions", "shadow_runs", "victims")
#: package (or module) -> packages it must not import, at module level or inside a function
FORBIDDEN = {
    "extensions": ("attacks", "audit", "shadow_runs", "victims"),  # the loader all of them share: the bottom
    "attacks": ("audit", "victims", "shadow_runs"),
    "victims": ("audit", "attacks"),
    "shadow_runs": ("victims", "audit", "attacks"),  # the whole run store, every module of it
}


def module_names() -> dict[str, Path]:
    names = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(path: Path, name: str, known: dict[str, Path], *, inside_functions: bool = True) -> set[str]:
    """The package modules `name` imports: at module level, and (`inside_functions`) inside its
    functions and methods too, which run the same import later."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree) if inside_functions else tree.body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    return {m for m in found if m in known and m != name}


def test_the_import_graph_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "late.py"
    module.write_text("import audit.summary\n\n\ndef f():\n    from audit.releases import files\n")
    known = {"audit.summary": ROOT, "audit.releases": ROOT, "audit.releases.files": ROOT}
    assert imports_of(module, "audit.late", known) == {"audit.summary", "audit.releases", "audit.releases.files"}
    assert imports_of(module, "audit.late", known, inside_functions=False) == {"audit.summary"}


def import_graph() -> dict[str, set[str]]:
    known = module_names()
    return {name: imports_of(path, name, known) for name, path in known.items()}


def test_imports_point_down():
    for name, imports in import_graph().items():
        for owner, forbidden in FORBIDDEN.items():
            if name == owner or name.startswith(owner + "."):
                wrong = sorted(m for m in imports if m.split(".")[0] in forbidden)
                assert not wrong, f"{name} imports {wrong}"


#: the layers inside `victims`, lowest first, as `AUDIT_LAYERS` below: a module imports modules of its
#: own layer or below (the longest matching prefix decides; the bare package `victims`, which imports
#: every pipeline to register it, stands above them all)
VICTIM_LAYERS = (
    ("victims",),  # the shared parts: the protocol, data, networks, training, releasing a set, ...
    ("victims.dp", "victims.condensation"),  # a folder per concept, built on the shared parts
    ("victims.pipelines",),  # the victims
    ("victims.bugs",),  # the catalogue of DP bugs: each a pipeline's broken twin, so above the pipelines
)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """`name`'s layer: that of the longest prefix of `layers` it matches; None for a bare package
    (its __init__ re-exports or registers) or a module no prefix matches."""
    matches = [
        (len(prefix), layer)
        for layer, prefixes in enumerate(layers)
        for prefix in prefixes
        if "." in name and within(name, prefix)
    ]
    return max(matches)[1] if matches else None


def test_imports_inside_victims_point_down_and_its_folders_stand_apart():
    """The shared parts import no concept folder and no pipeline; a concept folder (victims.dp,
    victims.condensation) imports no pipeline and no other concept folder."""
    folders = VICTIM_LAYERS[1]
    for name, imports in import_graph().items():
        if not name.startswith("victims.") or layer_of(name, VICTIM_LAYERS) is None:
            continue
        layer = layer_of(name, VICTIM_LAYERS)
        upward = sorted(m for m in imports if (layer_of(m, VICTIM_LAYERS) or -1) > layer)
        assert not upward, f"{name} (layer {layer}) imports {upward} from a layer above"
        if layer == 1:
            own = next(f for f in folders if within(name, f))
            across = sorted(m for m in imports if layer_of(m, VICTIM_LAYERS) == 1 and not within(m, own))
            assert not across, f"{name} imports {across}: a concept folder is built on the shared parts alone"


def test_the_victims_layers_catch_a_shared_part_importing_a_concept_or_a_pipeline():
    assert layer_of("victims", VICTIM_LAYERS) is None and layer_of("victims.data", VICTIM_LAYERS) == 0
    assert layer_of("victims.dp.privacy", VICTIM_LAYERS) == 1 and layer_of("victims.bugs", VICTIM_LAYERS) == 3
    assert layer_of("victims.condensation", VICTIM_LAYERS) == 1
    assert layer_of("victims.pipelines.dm", VICTIM_LAYERS) == 2


def defined_names(path: Path) -> set[str]:
    """The names a module's top level defines itself: its functions, classes and assigned names."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_a_name_of_victims_is_imported_from_the_module_that_defines_it():
    """`Pool` from `victims.pool`, not through `victims.data`, which imports it: a module of `victims`
    passes on no name it imports (its package's __init__ may)."""
    known = module_names()
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            source = getattr(node, "module", None) or ""
            if not isinstance(node, ast.ImportFrom) or not source.startswith("victims.") or source not in known:
                continue
            if known[source].name == "__init__.py":
                continue
            own = defined_names(known[source])
            taken = sorted(a.name for a in node.names if a.name not in own and f"{source}.{a.name}" not in known)
            assert not taken, f"{name} imports {taken} from {source}, which imports them from elsewhere"


def test_no_import_cycle():
    graph = import_graph()
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


#: the layers inside `audit`, lowest first: a module imports modules of its own layer or below, never
#: above. Each entry is a module or a folder directly under `audit`, so a folder sits in one layer
#: whole: no module of a lower layer imports any module of it (the bare package `audit` re-exports)
AUDIT_LAYERS = (
    # math, the claim checked, reading audits, running victims
    (
        "audit.stats",
        "audit.experiment",
        "audit.claim",
        "audit.result",  # an audit's result: summary.json as a value
        "audit.results",
        "audit.executor",
        "audit.placement",
        "audit.provenance",
    ),
    ("audit.evaluate", "audit.reporting", "audit.epsilon", "audit.metrics", "audit.pair_design"),
    ("audit.summary", "audit.outputs", "audit.pipeline"),  # what an audit writes
    ("audit.releases", "audit.rounds"),  # a release you made: its files, inputs, target and audit; an audit in rounds
    ("audit.cli",),  # the command lines
    (
        "audit.lira",
        "audit.loss",
        "audit.ganleak",
        "audit.compare",
        "audit.report",
        "audit.release",
        "audit.api",  # audit.run and audit.load
        "audit.selftest",  # the self-test: its mechanisms, designs and command line, nothing else imports
    ),  # the `python -m` entry points
)


def audit_layer(name: str) -> int | None:
    return layer_of(name, AUDIT_LAYERS)


def test_a_folder_of_audit_sits_in_one_layer():
    """The table names what lies directly under `audit`, so that a module reaching up into a folder
    (audit.summary into audit.releases, audit.results into audit.releases.inputs) is refused."""
    assert [p for layer in AUDIT_LAYERS for p in layer if p.count(".") != 1] == []
    assert audit_layer("audit.releases.inputs") == audit_layer("audit.releases.target") == audit_layer("audit.releases")
    assert audit_layer("audit.releases.inputs") > audit_layer("audit.summary") > audit_layer("audit.results")
    assert audit_layer("audit.selftest.designs") > audit_layer("audit.stats.guesses")


def test_every_audit_module_has_a_layer():
    assert [n for n in import_graph() if n.startswith("audit.") and audit_layer(n) is None] == []


def test_no_import_runs_back_up_inside_audit():
    for name, imports in import_graph().items():
        if audit_layer(name) is None:
            continue
        upward = sorted(m for m in imports if (audit_layer(m) or -1) > audit_layer(name))
        assert not upward, f"{name} (layer {audit_layer(name)}) imports {upward} from a layer above"


#: modules that read (or write) files: audited directories, releases, the run store, datasets and
#: sources; a name covers its submodules. The statistics import none of them (`audit.stats`), at
#: any depth: they take numbers (an `audit.experiment.Experiment`, score arrays) and return numbers.
FILE_READERS = (
    "audit.results",  # audited experiment directories
    "audit.releases",  # a release's files and inputs, and its audit
    "audit.outputs",  # what an audit writes and reads back
    "audit.reporting.evidence",  # the report's score files
    "audit.cli",  # the command lines
    "shadow_runs.store",  # the run store
    "shadow_runs.atomic_files",
    "victims.data",  # the datasets
    "victims.source",  # the victims' source files, hashed
)


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports at any depth."""
    seen, stack = set(), [start]
    while stack:
        name = stack.pop()
        for nxt in graph.get(name, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def reads_files(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in FILE_READERS)


def test_the_file_reader_rule_follows_imports_at_any_depth():
    graph = {"audit.stats.x": {"audit.stats.y"}, "audit.stats.y": {"audit.results"}, "audit.results": set()}
    assert reads_files("audit.releases.files") and not reads_files("audit.releasesx")
    assert "audit.results" in reached(graph, "audit.stats.x")


def test_the_statistics_import_nothing_that_reads_files():
    graph = import_graph()
    assert all(any(n == r or n.startswith(r + ".") for n in graph) for r in FILE_READERS)  # no stale name
    for name in sorted(n for n in graph if n == "audit.stats" or n.startswith("audit.stats.")):
        readers = sorted(m for m in reached(graph, name) if reads_files(m))
        assert not readers, f"{name} imports, directly or not, modules that read files: {readers}"


def test_reading_and_reporting_audits_does_not_import_torch():
    code = (
        "import sys; import audit.results, audit.reporting.build, audit.cli.report_command, audit.cli.compare_command, "
        "audit.stats.significance, attacks.registry, shadow_runs.plan, shadow_runs.store; "
        "print(sorted(m for m in ('torch', 'victims', 'opacus', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_public_metric_and_bound_names_stay_importable_where_users_import_them():
    import audit.epsilon
    import audit.metrics
    import audit.stats.epsilon
    import audit.stats.metrics

    assert audit.epsilon.epsilon_lower_bound is audit.stats.epsilon.epsilon_lower_bound
    assert audit.metrics.tpr_at_fpr is audit.stats.metrics.tpr_at_fpr


def test_an_installed_package_brings_every_subpackage():
    """A wheel holds the packages pyproject.toml's find includes: every package directory must match."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {
        ".".join(p.parent.relative_to(ROOT).parts) for top in PACKAGES for p in (ROOT / top).rglob("__init__.py")
    }
    assert {"victims.pipelines", "audit.cli"} <= packages
    assert sorted(p for p in packages if not any(fnmatch.fnmatchcase(p, pattern) for pattern in include)) == []
