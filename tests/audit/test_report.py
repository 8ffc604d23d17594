"""`python -m audit.report` on two tiny audited experiments (dm and the subset of the same size),
and the page as a person sees it: headless Chromium renders it. Each experiment has 4 runs of
which the first 2 are targets (2 x 1500 = 3000 canaries) and the other 2 reference runs."""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from audit import lira, report
from audit.results import experiment_dirs, load_experiment
from audit.stats.guesses import ceiling
from tiny_audits import TINY, VICTIMS, audited_runs

VERDICT_KEYS = {"kind", "text", "reason", "evidence", "rejected_by"}
ENTRY_KEYS = {
    "path",
    "label",
    "victim",
    "dataset",
    "n_shadow",
    "target_runs",
    "formal_epsilon",
    "delta",
    "release_audit",
    "protocol",
    "claim",
    "verdicts",
    "own_curve",
    "at_chance",
    "warnings",
    "attacks",
    "utility",
    "highest_risk",
    "release",
    "provenance",
}
FAST = ["--n-boot", "200"]  # eps_lower is not resampled (the default): its point only, untested


@pytest.fixture(scope="module")
def experiments(tmp_path_factory):
    return audited_runs(tmp_path_factory.getbasetemp())[1]


@pytest.fixture(scope="module")
def both(experiments, tmp_path_factory):
    """The report of dm and subset together, in a directory of its own."""
    out = tmp_path_factory.mktemp("report")
    assert report.main([str(experiments["dm"]), str(experiments["subset"]), "--out", str(out), *FAST]) == 0
    return out


def test_report_json_holds_the_numbers_and_the_verdicts(both, experiments):
    data = json.loads((both / "report.json").read_text())
    assert set(data) == {"settings", "generated", "experiments", "comparisons"}
    dm, subset = data["experiments"]
    assert set(dm) == set(subset) == ENTRY_KEYS
    assert (dm["victim"], subset["victim"]) == ("dm", "subset")
    summary = json.loads((experiments["dm"] / "audit" / "summary.json").read_text())
    assert dm["attacks"] == summary["attacks"]  # summary.json's metrics, as they are
    # No formal or claimed epsilon: said so. dm is compared with the subset of the same size, by audit.compare.
    assert [v["kind"] for v in dm["verdicts"]][0] == "no_epsilon_claim" and dm["claim"] is None
    # Either baseline verdict is a valid outcome of the test; with these fixed seeds the numbers give this one.
    assert dm["verdicts"][1]["kind"] == "gain_over_subset", dm["verdicts"][1]
    assert [v["kind"] for v in subset["verdicts"]] == ["no_epsilon_claim"]  # the baseline is not compared with itself
    assert all(set(v) == VERDICT_KEYS for e in data["experiments"] for v in e["verdicts"])
    (comparison,) = data["comparisons"]
    assert comparison["baseline"]["victim"] == "subset" and comparison["experiments"][0]["victim"] == "dm"
    # 7 attacks (loss, lira_*, rmia*, dcr*) x 3 metrics (AUC, two TPRs; eps_lower not resampled) on the
    # pooled group, and test accuracy: one Holm family of 22 tests.
    assert comparison["comparisons"][0]["n_tests"] == 22
    assert dm["target_runs"] == [0, 1] and "first 2 runs are the targets" in dm["protocol"]
    assert "other 2 runs are reference runs" in dm["protocol"] and "one-run bound" in dm["protocol"]
    # Sub-groups (no ε: the mechanism picked them), release, thumbnails of the highest-risk examples, provenance.
    assert set(dm["attacks"]["lira_online"]["subgroups"]) == {"init", "other_members"}
    assert all("eps_lower" not in g for g in dm["attacks"]["lira_online"]["subgroups"].values())
    assert 0 <= dm["attacks"]["lira_online"]["eps_lower"] <= dm["attacks"]["lira_online"]["eps_ceiling"]
    assert dm["release"] == {"run": 0, "n_images": 10, "shape": [10, 1, 8, 8]}
    risk = dm["highest_risk"]
    assert risk["attack"] == "lira_online" and len(risk["examples"]) == 16
    assert [e["mean_score"] for e in risk["examples"]] == sorted(
        (e["mean_score"] for e in risk["examples"]), reverse=True
    )
    assert len(dm["provenance"]["run_seeds"]) == 4 and dm["provenance"]["wall_s_total"] > 0
    assert dm["provenance"]["config"]["iterations"] == 2 and dm["utility"]["n_runs"] == 4


def test_the_accuracy_gap_to_the_subset_comes_first_in_the_combined_report(both):
    data = json.loads((both / "report.json").read_text())
    dm, tests = data["experiments"][0], data["comparisons"][0]["comparisons"][0]["tests"]
    (accuracy,) = [t for t in tests if t["metric"] == "test_accuracy"]
    # the utility cost is its own first sentence, not the tail of the list of attack metrics
    first = (
        f"Test accuracy {accuracy['difference']['point']:+.3f} against subset ipc=1 (no significant difference, "
        f"adjusted p = {accuracy['p_adjusted']:.3g}). Significantly lower than subset ipc=1 on "
    )
    assert dm["verdicts"][1]["reason"].startswith(first), dm["verdicts"][1]["reason"]
    assert dm["verdicts"][1]["reason"].count("Test accuracy") == 1
    assert first in (both / "report.html").read_text()


def test_report_html_is_self_contained(both):
    page = (both / "report.html").read_text()
    images = re.findall(r"<img [^>]*src=\"([^\"]*)\"", page)
    # per experiment: ROC, release grid, highest-risk thumbnails; 7 overlaid ROCs (one per attack)
    assert len(images) == 3 + 3 + 7 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r"(href|src)=\"(https?:|//|file:)", page) and "<link" not in page
    assert page.index("Verdicts") < page.index("Comparison") < page.index("Examples at highest risk")
    # ε ceiling beside ε lower; the sub-group table has no ε column and says why.
    assert "<th>ε lower</th><th>ε ceiling</th>" in page and "<th>ε ceiling</th>" in page
    subgroups = page[page.index("Sub-groups") : page.index("The released set")]
    assert "ε lower" not in subgroups and "<th>advantage</th>" in subgroups
    assert "No ε columns here: the mechanism itself picked these images" in subgroups


def test_a_claimed_epsilon_is_checked_with_the_attack_chosen_on_the_reference_runs(experiments, tmp_path):
    assert (
        report.main(
            [
                str(experiments["subset"]),
                "--out",
                str(tmp_path),
                "--claimed-epsilon",
                "2",
                "--claimed-delta",
                "1e-5",
                *FAST,
            ]
        )
        == 0
    )
    (entry,) = json.loads((tmp_path / "report.json").read_text())["experiments"]
    claim = entry["claim"]
    assert (claim["epsilon"], claim["delta"], claim["source"]) == (2, 1e-5, "claimed")
    # 4 runs, 2 targets: 2 reference runs, enough pseudo-targets for the attacks that need at
    # most 2 runs (loss, rmia, rmia_offline, dcr), not for LiRA (4). The audit recorded one of them
    # and its f_{ε,δ} guess count: the verdict tests that one attack at the full 95%.
    summary = json.loads((experiments["subset"] / "audit" / "summary.json").read_text())
    chosen = summary["verdict"]["attack"]
    assert summary["verdict"]["rule"] == "tuned" and chosen in {"loss", "rmia", "rmia_offline", "dcr"}
    assert claim["rule"] == "tuned" and claim["joint_confidence"] == 0.95 and set(claim["bounds"]) == {chosen}
    assert claim["guesses"]["k_in"] == summary["verdict"]["guesses"]["k_in"]
    # The ceiling of that rule: m = 2 targets x 1500 = 3000 canaries, the best tuned count at 95%, δ = 1e-5.
    assert claim["n_canaries"] == 3000
    assert claim["ceilings"] == {chosen: ceiling(3000, analysis="fdp", rule="tuned", delta=1e-5, confidence=0.95)}
    assert claim["bounds"][chosen] <= claim["ceilings"][chosen]
    # 2 lies below the ceiling: testable, and a subset of 1 image per class is found by dcr only
    # for its 20 released members, far too few to exceed ε = 2.
    assert 2 < claim["ceilings"][chosen]
    assert entry["verdicts"][0]["kind"] == "epsilon_consistent"


def test_a_claim_above_the_ceiling_is_not_testable(experiments, tmp_path):
    # At δ = 1e-5 the f-DP test of f_{ε,δ} cannot certify ε = 50 with up to 2^24 canaries (15.5 at most).
    assert (
        report.main(
            [
                str(experiments["subset"]),
                "--out",
                str(tmp_path),
                "--claimed-epsilon",
                "50",
                "--claimed-delta",
                "1e-5",
                *FAST,
            ]
        )
        == 0
    )
    (entry,) = json.loads((tmp_path / "report.json").read_text())["experiments"]
    verdict = entry["verdicts"][0]
    assert verdict["kind"] == "epsilon_not_testable" and verdict["text"] == "not testable with this design"
    assert "One-run auditing cannot certify more than ε ≈" in verdict["reason"]
    assert "not testable with this design" in (tmp_path / "report.html").read_text()


def test_the_accuracy_is_over_the_audited_runs_when_the_store_holds_more(experiments, tmp_path):
    # An audit of 6 runs, then one of 4 (1 target) of the same store: 6 run files, 4 audited.
    runs_dir = tmp_path / "runs"
    exp = runs_dir / experiments["subset"].name
    shutil.copytree(experiments["subset"], exp)
    for flags in (["--n-shadow", "6"], ["--n-shadow", "4", "--n-targets", "1"]):
        assert lira.main(["--runs-dir", str(runs_dir), *flags, *VICTIMS["subset"], *TINY]) == 0
    stored = [json.loads(p.read_text()) for p in sorted((exp / "runs").glob("*.json"))]
    summary = json.loads((exp / "audit" / "summary.json").read_text())
    assert len(stored) == 6 and (summary["n_shadow"], summary["target_runs"]) == (4, [0])
    # the 6 stored runs' mean is not the audit's: the check below can tell them apart
    assert np.mean([r["test_accuracy"] for r in stored]) != summary["utility"]["test_accuracy"]
    assert report.main([str(exp), "--out", str(tmp_path), *FAST]) == 0
    (entry,) = json.loads((tmp_path / "report.json").read_text())["experiments"]
    assert entry["utility"] == {
        "test_accuracy_mean": summary["utility"]["test_accuracy"],
        "test_accuracy_std": summary["utility"]["test_accuracy_std"],
        "n_runs": 4,
    }
    assert entry["provenance"]["run_seeds"] == [r["seed"] for r in stored[:4]]
    assert load_experiment(exp).test_accuracy.tolist() == [r["test_accuracy"] for r in stored[:4]]  # audit.compare's
    # one target: singular wherever it is counted
    page = (tmp_path / "report.html").read_text()
    assert "(mean ± sd over 4 runs)" in page and f"{summary['utility']['test_accuracy']:.3f} ± " in page
    assert "subset on digits, 4 runs, 1 target</span>" in page and "4 runs, target [0] · formal ε none" in page
    assert (
        "The first run is the target, whose 1,500 coins are the canaries; the other 3 runs are reference runs"
        in (entry["protocol"])
    )
    assert not re.search(r"\b1 (targets|runs|target runs|canaries|attacks)\b", page)


def test_a_formal_epsilon_is_printed_to_4_digits_and_each_ceiling_is_named(experiments, tmp_path):
    # dm with the formal ε an accountant reports for PSG at ε = 10 (tests/audit/test_verdict.py has the verdict)
    exp = tmp_path / experiments["dm"].name
    shutil.copytree(experiments["dm"], exp)
    summary = json.loads((exp / "audit" / "summary.json").read_text())
    (exp / "audit" / "summary.json").write_text(json.dumps({**summary, "formal_epsilon": 9.991745145076045}))
    out = tmp_path / "out"
    out.mkdir()
    assert report.main([str(exp), "--out", str(out), "--claimed-delta", "1e-5", *FAST]) == 0
    (entry,) = json.loads((out / "report.json").read_text())["experiments"]
    page = (out / "report.html").read_text()
    assert "4 runs, targets [0, 1] · formal ε 9.992 · checked against formal ε = 9.992, δ = 1e-05</p>" in page
    assert "formal ε = 9.992 (δ = 1e-05)" in entry["verdicts"][0]["reason"] and "9.9917" not in page
    # The chosen attack's row holds two ceilings: the one-run bound's (summary.json's eps_ceiling) and the
    # f-DP test's the verdict rests on; each column says which.
    claim, chosen = entry["claim"], summary["verdict"]["attack"]
    assert "<th>ε lower (one-run bound, 95%, δ=0)</th><th>ε ceiling (one-run bound)</th>" in page
    assert (
        "<th>verdict's ε lower (f-DP test, 95.00% each, δ=1e-05)</th><th>verdict's ε ceiling (f-DP test)</th>" in page
    )
    row = (
        f"<td>{summary['attacks'][chosen]['eps_ceiling']:.2f}</td><td>{claim['bounds'][chosen]:.2f}</td>"
        f"<td>{claim['ceilings'][chosen]:.2f}</td></tr>"
    )
    assert row in page and claim["ceilings"][chosen] == ceiling(
        3000, analysis="fdp", rule="tuned", delta=1e-5, confidence=0.95
    )


@pytest.mark.parametrize(
    "case,named",
    [
        ("old plan", "plan 'stratified-complement-pairs-v1'"),
        ("no ceiling", "no eps_ceiling for"),
    ],
)
def test_an_experiment_of_an_earlier_plan_is_refused(experiments, tmp_path, capsys, case, named):
    old = tmp_path / "old"
    shutil.copytree(experiments["dm"], old)
    if case == "old plan":
        meta = json.loads((old / "experiment.json").read_text())
        (old / "experiment.json").write_text(json.dumps({**meta, "plan": "stratified-complement-pairs-v1"}))
    else:
        summary = json.loads((old / "audit" / "summary.json").read_text())
        for entry in summary["attacks"].values():
            del entry["eps_ceiling"]
        (old / "audit" / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(old), "--out", str(tmp_path), *FAST])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "report.json").exists()


def test_a_folder_of_experiments_is_expanded(experiments, tmp_path):
    runs_dir = experiments["dm"].parent
    assert [p.name for p in experiment_dirs([runs_dir])] == sorted(p.name for p in experiments.values())


@pytest.mark.parametrize(
    "flags,named",
    [
        (["{missing}"], "no audit/summary.json"),
        (["{dm}", "--claimed-epsilon", "-1"], "'-1'"),
        (["{dm}", "--claimed-delta", "1"], "'1'"),
        (["{dm}", "--out", "{missing}"], "--out"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(experiments, tmp_path, capsys, flags, named):
    before = sorted(p.name for p in (experiments["dm"] / "audit").iterdir())
    argv = [f.format(missing=tmp_path / "nope", dm=experiments["dm"]) for f in flags]
    with pytest.raises(SystemExit) as exit_info:
        report.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err, err
    assert sorted(p.name for p in (experiments["dm"] / "audit").iterdir()) == before


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def headless(browser, profile, *args):
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1200,2000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_chromium_renders_the_report_with_every_image(both, tmp_path):
    browser = chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI installs it and runs this test")
    page = (both / "report.html").as_uri()
    # The page's own script marks <body> with loaded/total images once the load event has fired.
    dom = headless(browser, tmp_path / "p1", "--virtual-time-budget=10000", "--dump-dom", page).stdout
    marker = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert marker, "the load handler did not run"
    assert marker.group(1) == marker.group(2) == str(len(re.findall(r"<img ", dom))) != "0"
    shot = tmp_path / "report.png"
    headless(browser, tmp_path / "p2", f"--screenshot={shot}", page)
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1200)
    # Not blank: a good share of the screen is not background, and it holds many grey levels.
    assert (pixels.mean(-1) < 0.9).mean() > 0.05 and len(np.unique(pixels.round(2))) > 20
    keep = os.environ.get("AUDIT_REPORT_SCREENSHOT")  # to look at it: AUDIT_REPORT_SCREENSHOT=/tmp/shot.png
    if keep:
        shutil.copy(shot, keep)
