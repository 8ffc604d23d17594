"""The report's baseline line for a table: a table's naive baseline is `tabular-subset` of the same
rows, found among the audited experiments and --baseline, and named when none is given; images keep `subset`."""

import pytest

from audit import lira
from audit.reporting.build import Settings, build_report
from audit.results import load_audited

#: two tiny audits of fair: 4 runs each, 200 released rows, a 5-round downstream classifier
TINY_TABLE = ["--dataset", "fair", "--rows", "200", "--classifier-iterations", "5", "--n-shadow", "4"]
QUIET = ["--executor", "inline", "--quiet"]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("tables")
    for victim in ("marginals", "tabular-subset"):
        assert lira.main(["--victim", victim, "--runs-dir", str(runs_dir), *TINY_TABLE, *QUIET]) == 0
    return {p.name.rsplit("-fair-", 1)[0]: load_audited(p) for p in runs_dir.iterdir()}


def baseline_verdict(audited, baseline=None) -> dict:
    """The baseline verdict of `audited`'s entry, `baseline` given as --baseline: the report searches the same
    candidates as with it a RUN_DIR (build_report's [*experiments, baseline]) and draws one ROC figure, not one
    overlay per shared attack as well (measured by calling build_report both ways on this module's two audits, the
    subset as a RUN_DIR and as baseline=: the whole entry the same, 12.2 s of CPU down to 1.2; 2026-11-29)."""
    (entry,) = build_report([audited], baseline=baseline, settings=Settings(n_boot=10)).data["experiments"]
    return entry["verdicts"][1]


def test_a_table_s_audit_alone_names_tabular_subset_of_its_rows_as_the_missing_baseline(tables):
    marginals = tables["marginals"]
    assert marginals.table and marginals.size == 200 and marginals.baseline == "tabular-subset"
    verdict = baseline_verdict(marginals)
    assert verdict["kind"] == "no_subset_baseline"
    assert "no `tabular-subset` experiment of the same dataset and size (200 rows) was given" in verdict["reason"]


def test_a_table_s_audit_is_compared_with_tabular_subset_of_the_same_rows(tables):
    verdict = baseline_verdict(tables["marginals"], tables["tabular-subset"])
    assert verdict["kind"] in ("gain_over_subset", "no_gain_over_subset") and "tabular-subset" in verdict["reason"]
    # the baseline is not compared with itself (images keep `subset`: tests/audit/test_report.py)
    (entry,) = build_report([tables["tabular-subset"]], settings=Settings(n_boot=10)).data["experiments"]
    assert [v["kind"] for v in entry["verdicts"]] == ["no_epsilon_claim"]
