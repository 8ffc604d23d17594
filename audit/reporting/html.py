"""report.html from a `audit.reporting.build.Report`: one self-contained page (inline CSS, figures as
`data:` URIs, one inline script that marks the page with how many figures loaded and shows a
warning if any did not). Verdicts come first."""

from __future__ import annotations

import json
from html import escape

from audit.reporting.figures import data_uri
from audit.reporting.verdict import count, format_p

LEVELS = ("0.1", "0.01", "0.001")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1150px;
color:#1d2327;line-height:1.4;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px}h2{border-bottom:2px solid #dde3e8;padding-bottom:4px;margin-top:36px}
.sub{color:#5a6670;margin-top:0}.card{border-left:6px solid #2e7d32;background:#f3f8f3;padding:10px 16px;margin:12px 0}
.card.alarm{border-color:#c62828;background:#fdf1f1}.card.warn{border-color:#ef6c00;background:#fff6ec}.card.neutral{border-color:#78909c;background:#f4f6f8}
.card h3{margin:0 0 6px 0;font-size:1.05em}.verdict{font-weight:600;font-size:1.08em}
.reason{color:#3d4a54;font-size:.9em}
table{border-collapse:collapse;margin:10px 0;font-size:.88em}
th,td{border:1px solid #d4dbe1;padding:4px 8px;text-align:right}
th{background:#eef2f5}td:first-child,th:first-child{text-align:left}.row{display:flex;gap:24px;flex-wrap:wrap;align-items:flex-start}
img{max-width:100%}.figs img{width:360px}pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:.8em}
#image-warning{color:#c62828;font-weight:600}li.warning{color:#b34700}.note{color:#5a6670;font-size:.85em}
"""

SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var loaded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images-loaded", loaded + "/" + images.length);
  if (loaded < images.length) {
    var warning = document.getElementById("image-warning");
    warning.textContent = (images.length - loaded) + " of " + images.length + " figures failed to load";
    warning.hidden = false;
  }
});
"""

_CARD = {
    "epsilon_violated": "alarm",
    "epsilon_consistent": "",
    "epsilon_not_testable": "warn",
    "no_fair_coins": "warn",
    "gain_over_subset": "",
    "no_gain_over_subset": "warn",
    "no_epsilon_claim": "neutral",
    "no_subset_baseline": "neutral",
    "more_than_subset": "warn",
    "release_leakage": "",
}
#: what "(chance)" after a TPR means (the terminal's legend says the same, `audit.outputs.TERMS`)
CHANCE_NOTE = (
    "(chance): the members found at that FPR are not significantly more than the FPR's share (one-sided "
    "binomial test at 5%): no better than guessing."
)
SUBGROUP_NOTE = (
    "No ε columns here: the mechanism itself picked these images among the members (to copy or start "
    "its release from), and conditioning on its choice can raise TPR/FPR by up to 1/P(choice), so a "
    "sub-group's rates describe leakage but bound no ε."
)


def render(report) -> str:
    data = report.data
    entries = data["experiments"]
    parts = [
        "<h1>Membership-inference audit report</h1>",
        f'<p class="sub">{len(entries)} experiment{"s" * (len(entries) != 1)} · generated '
        f"{escape(data['generated']['utc'])} · membership-audit {escape(str(data['generated'].get('package_version')))}"
        f" · commit {escape(str(data['generated'].get('git_commit'))[:10])}</p>",
        '<p id="image-warning" hidden></p>',
        "<h2>Verdicts</h2>",
        *(_verdict_card(e) for e in entries),
    ]
    if len(entries) > 1:
        parts += _comparison(report)
    for audited, entry in zip(report.experiments, entries):
        parts += _experiment(report, str(audited.path), entry)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Audit report</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + f"\n<script>{SCRIPT}</script>\n</body></html>\n"
    )


def _verdict_card(entry: dict) -> str:
    kinds = {_CARD[v["kind"]] for v in entry["verdicts"]}
    worst = next((k for k in ("alarm", "warn") if k in kinds), "neutral" if kinds == {"neutral"} else "")
    items = "".join(
        f'<li><span class="verdict">{escape(v["text"])}</span><br>'
        f'<span class="reason">{escape(v["reason"])}</span></li>'
        for v in entry["verdicts"]
    )
    if entry["own_curve"]:  # the terminal's "own curve:" line
        items += f'<li><span class="verdict">own curve</span>: {escape(entry["own_curve"])}</li>'
    items += "".join(f'<li class="warning">warning: {escape(w)}</li>' for w in entry["warnings"])
    return (
        f'<div class="card {worst}"><h3>{escape(entry["label"])}</h3><ul>{items}</ul>'
        f'<span class="note">{escape(entry["victim"])} on {escape(str(entry["dataset"]))}, '
        + (
            f"your release against {count(entry['n_shadow'], 'reference run')}"
            if entry.get("release_audit")
            else f"{count(entry['n_shadow'], 'run')}, {count(len(entry['target_runs']), 'target')}"
        )
        + "</span></div>"
    )


def _utility(entry: dict) -> str:
    u = entry["utility"]
    if entry.get("release_audit"):
        shadows = u.get("reference_runs")
        text = f"test accuracy of the ConvNet trained on your release {u['test_accuracy_mean']:.3f}"
        if shadows:
            text += (
                f"; on the reference runs' releases {shadows['mean']:.3f} ± {shadows['std']:.3f} "
                f"(mean ± sd over {count(shadows['n_runs'], 'run')})"
            )
        return text
    return (
        f"downstream test accuracy {u['test_accuracy_mean']:.3f} ± {u['test_accuracy_std']:.3f} "
        f"(mean ± sd over {count(u['n_runs'], 'run')})"
    )


def _img(png: bytes, alt: str, cls: str = "") -> str:
    return f'<img class="{cls}" alt="{escape(alt)}" src="{data_uri(png)}">'


def _comparison(report) -> list[str]:
    entries = report.data["experiments"]
    attacks = list(report.overlays) or sorted({a for e in entries for a in e["attacks"]})
    rows = []
    for attack in attacks:
        for i, e in enumerate(entries):
            m, u = e["attacks"].get(attack), e["utility"]
            first = f'<td rowspan="{len(entries)}">{escape(attack)}</td>' if i == 0 else ""
            cells = (
                "<td>-</td>" * 5
                if m is None
                else (
                    f"<td>{m['auc']:.3f}</td><td>{m['tpr_at_fpr']['0.01']:.3f} ({m['fp_at_fpr']['0.01']})"
                    f"{_chance(e, attack, '0.01')}</td>"
                    f"<td>{m['tpr_at_fpr']['0.001']:.4f} ({m['fp_at_fpr']['0.001']}){_chance(e, attack, '0.001')}</td>"
                    f"<td>{_eps(m.get('eps_lower'))}</td><td>{_eps(m.get('eps_ceiling'))}</td>"
                )
            )
            rows.append(
                f"<tr>{first}<td>{escape(e['label'])}</td>"
                f"<td>{u['test_accuracy_mean']:.3f} ± {u['test_accuracy_std']:.3f}</td>{cells}</tr>"
            )
    parts = [
        "<h2>Comparison</h2>",
        "<table><tr><th>attack</th><th>experiment</th><th>test accuracy</th><th>AUC</th><th>TPR@1% FPR (FP)</th>"
        f"<th>TPR@0.1% FPR (FP)</th><th>ε lower</th><th>ε ceiling</th></tr>{''.join(rows)}</table>",
        '<p class="note">Pooled over each experiment\'s targets; FP: the false positives behind each TPR; ε lower: '
        "the audit's one-run lower confidence bound of each attack on its own (summary.json); "
        "ε ceiling: what a perfect attack would "
        "certify with that experiment's design (- where the coins were not fair). Test accuracy: mean ± sd over "
        f"runs. {CHANCE_NOTE}</p>",
    ]
    if report.overlays:
        parts.append(
            '<div class="row figs">'
            + "".join(_img(png, f"ROC of {a}, all experiments") for a, png in report.overlays.items())
            + "</div>"
        )
    for comparison in report.data["comparisons"]:
        parts.append(_difference_table(comparison))
    return parts


def _difference_table(comparison: dict) -> str:
    victim = comparison["experiments"][0]["label"]
    baseline = comparison["baseline"]["label"]
    rows = []
    for t in comparison["comparisons"][0]["tests"]:
        d = t["difference"]
        interval = "-" if d["low"] is None else f"[{d['low']:+.3f}, {d['high']:+.3f}]"
        rows.append(
            f"<tr><td>{escape(str(t['attack'] or ''))}</td><td>{escape(t['metric'])}</td>"
            f"<td>{d['point']:+.4f}</td><td>{interval}</td><td>{format_p(t['p_adjusted']).removeprefix('= ')}</td>"
            f"<td>{'yes' if t['significant'] else 'no'}</td></tr>"
        )
    return (
        f"<h3>{escape(victim)} − {escape(baseline)}</h3><table><tr><th>attack</th><th>metric</th><th>difference</th>"
        "<th>95% interval</th><th>Holm-adjusted p</th><th>significant</th></tr>" + "".join(rows) + "</table>"
        '<p class="note">Cluster bootstrap over target runs (audit.compare); test accuracy by Welch\'s t-test; '
        "eps_lower is tested only when resampled (--n-boot-eps).</p>"
    )


def _experiment(report, key: str, entry: dict) -> list[str]:
    claim, targets, formal = entry["claim"], entry["target_runs"], entry["formal_epsilon"]
    parts = [
        f"<h2>{escape(entry['label'])}</h2>",
        f'<p class="sub">{escape(entry["path"])} · {count(entry["n_shadow"], "run")}, '
        f"{'target' if len(targets) == 1 else 'targets'} {targets} · formal ε "
        + ("none" if formal is None else f"{formal:.4g}")
        + (f" · checked against {claim['source']} ε = {claim['epsilon']:.4g}, δ = {claim['delta']:g}" if claim else "")
        + "</p>",
        f'<p class="note"><b>Protocol</b>: {escape(entry["protocol"])}</p>',
        f'<div class="row"><div>{_img(report.roc[key], "ROC curves, log-log", "roc")}</div>'
        f"<div>{_metrics_table(entry)}"
        f"<p><b>Utility</b>: {_utility(entry)}</p></div></div>",
    ]
    subgroups = _subgroup_table(entry)
    if subgroups:
        parts += ["<h3>Sub-groups: real images behind the release vs the other members</h3>", subgroups]
    if key in report.releases:
        r = entry["release"]
        parts += [
            (
                f"<h3>Your release ({count(r['n_images'], 'image')}, shown clipped to [0, 1])</h3>"
                if entry.get("release_audit")
                else f"<h3>The released set of run {r['run']} ({count(r['n_images'], 'image')}, shown clipped to "
                "[0, 1])</h3>"
            ),
            _img(report.releases[key], "released synthetic images"),
        ]
    risk = entry["highest_risk"]
    parts.append(f"<h3>Examples at highest risk ({escape(risk['attack'])})</h3>")
    if key in report.risks:
        parts.append(_img(report.risks[key], "examples at highest risk"))
    rows = "".join(
        f"<tr><td>{e['index']}</td><td>{e['label']}</td><td>{e['mean_score']:.3g}</td>"
        f"<td>{e['nonmember_percentile']:.1%}</td><td>{e['member_targets']}</td></tr>"
        for e in risk["examples"]
    )
    parts.append(
        "<table><tr><th>pool index</th><th>label</th><th>mean score as member</th>"
        "<th>non-members scoring lower</th><th>targets holding it</th></tr>" + rows + "</table>"
    )
    parts += [
        "<details><summary>Provenance: configuration, versions, seeds, wall time</summary>",
        f"<pre>{escape(json.dumps(entry['provenance'], indent=1))}</pre></details>",
    ]
    return parts


def _chance(entry: dict, attack: str, rate: str) -> str:
    """The mark after a TPR that the terminal marks too (report.json's `at_chance`): " (chance)", else ""."""
    return " (chance)" if rate in entry["at_chance"].get(attack, ()) else ""


def _eps(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _metrics_table(entry: dict) -> str:
    claim = entry["claim"] or {}
    bounds, ceilings, joint = claim.get("bounds") or {}, claim.get("ceilings") or {}, claim.get("joint_confidence")
    rows = []
    for attack, m in entry["attacks"].items():
        rates = "".join(
            f"<td>{m['tpr_at_fpr'][k]:.4f} ({m['fp_at_fpr'][k]}){_chance(entry, attack, k)}</td>" for k in LEVELS
        )
        extra = f"<td>{bounds[attack]:.2f}</td><td>{ceilings[attack]:.2f}</td>" if attack in bounds else ""
        rows.append(
            f"<tr><td>{escape(attack)}</td><td>{m['auc']:.3f}</td>{rates}<td>{m['advantage']:.3f}</td>"
            f"<td>{m['eps_hat']:.2f}</td><td>{_eps(m.get('eps_lower'))}</td><td>{_eps(m.get('eps_ceiling'))}</td>"
            f"{extra}</tr>"
        )
    first = next(iter(entry["attacks"].values()), {"confidence": 0.95, "delta": 0.0})
    head = (
        f"<th>verdict's ε lower (f-DP test, {joint:.2%} each, δ={claim['delta']:g})</th>"
        "<th>verdict's ε ceiling (f-DP test)</th>"
        if joint is not None
        else ""
    )
    return (
        "<table><tr><th>attack</th><th>AUC</th><th>TPR@10% FPR (FP)</th><th>TPR@1% FPR (FP)</th>"
        f"<th>TPR@0.1% FPR (FP)</th><th>advantage</th><th>ε̂</th><th>ε lower (one-run bound, "
        f"{first['confidence']:.0%}, δ={first['delta']:g})</th><th>ε ceiling (one-run bound)</th>{head}</tr>"
        + "".join(rows)
        + "</table>"
        f'<p class="note">FP: false positives behind each TPR. {CHANCE_NOTE} '
        "ε̂ = max ln(TPR/FPR), a point estimate, not a bound. "
        "ε lower (one-run bound): each attack's one-run bound (Steinke, Nasr & Jagielski 2023; summary.json's "
        "eps_lower) on all the targets' canaries, at its confidence on its own (their maximum is not a statement "
        "at that confidence); ε ceiling (one-run bound): what a perfect attack would certify by that bound with "
        "this design (eps_ceiling). The verdict's columns: the bound the ε verdict rests on, by the f-DP test of "
        "the claim's curve f_{ε,δ} (Mahloujifar, Melis & Chaudhuri 2025), paid for (one attack chosen on the "
        "reference runs at the full confidence, or the loss at a count fixed in advance when the reference runs "
        "predict 0 for every attack, or every attack at a split confidence), and its ceiling: what a "
        "perfect attack would certify by that test (at the audit's δ and full confidence, summary.json's "
        "eps_ceiling_fdp)."
        + (" The joint columns hold for all attacks together and decide the ε verdict." if joint is not None else "")
        + "</p>"
    )


def _subgroup_table(entry: dict) -> str:
    rows = []
    for attack, m in entry["attacks"].items():
        for group, g in (m.get("subgroups") or {}).items():
            rows.append(
                f"<tr><td>{escape(attack)}</td><td>{escape(group)}</td><td>{g['n_members']}</td>"
                f"<td>{g['auc']:.3f}</td><td>{g['tpr_at_fpr']['0.01']:.4f} ({g['fp_at_fpr']['0.01']})</td>"
                f"<td>{g['tpr_at_fpr']['0.001']:.4f} ({g['fp_at_fpr']['0.001']})</td>"
                f"<td>{g['advantage']:.3f}</td></tr>"
            )
    if not rows:
        return ""
    return (
        "<table><tr><th>attack</th><th>group</th><th>members</th><th>AUC</th><th>TPR@1% FPR (FP)</th>"
        "<th>TPR@0.1% FPR (FP)</th><th>advantage</th></tr>" + "".join(rows) + "</table>"
        '<p class="note">Each group against all non-members. init: the real images the release contains or '
        f"started from. {escape(SUBGROUP_NOTE)}</p>"
    )
