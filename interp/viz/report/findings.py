"""The report's first screen, read from ``results.json``: the world-model table, the layer verdicts
(planted vs found), the repair result — or a PragWorld job's Table 1, verdicts and before/after
table — each led by a sentence and shown with its intervals."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from interp.stats import proportion_interval
from interp.viz.report.files import is_num, rows_table

#: world-model table columns shown first: (key in results.json, heading)
_WM_COLUMNS = (
    ("next_token", "next-token"),
    ("probe", "probe"),
    ("compression_precision", "compression prec."),
    ("distinction_precision", "distinction prec."),
    ("distinction_recall", "distinction recall"),
)
#: repair metrics shown first: (metric, heading, lower is better)
_REPAIR_COLUMNS = (
    ("heldout_loss", "held-out loss", True),
    ("next_token_position", "next-token (position)", False),
    ("next_token_sequence", "next-token (sequence)", False),
    ("mn_compression_precision", "compression prec.", False),
    ("mn_distinction_precision", "distinction prec.", False),
    ("mn_distinction_recall", "distinction recall", False),
    ("routes_valid", "greedy routes valid", False),
    ("routes_illegal_turn", "greedy routes with an illegal turn", True),
)


def _num_ok(v: Any) -> bool:
    return is_num(v) and not math.isnan(float(v))


def _est(
    v: Any, se: Any = None, lo: Any = None, hi: Any = None, digits: int = 3, share: bool = False, n: Any = None
) -> str:
    """``value [lo, hi]`` (the interval given, else from the SE: the Wilson interval of a ``share``,
    :func:`interp.stats.proportion_interval`, inside [0, 1]; ±1.96 SE otherwise), or ``–``."""
    if not _num_ok(v):
        return "–"
    text = f"{v:.{digits}g}"
    if _num_ok(lo) and _num_ok(hi):
        return f"{text} [{lo:.{digits}g}, {hi:.{digits}g}]"
    if share and 0 <= v <= 1 and (_num_ok(se) or _num_ok(n)):
        lo, hi = proportion_interval(v, se if _num_ok(se) else None, int(n) if _num_ok(n) else None)
        if _num_ok(lo) and _num_ok(hi):
            return f"{text} [{lo:.{digits}g}, {hi:.{digits}g}]"
    if _num_ok(se) and se > 0:
        return f"{text} [{v - 1.96 * se:.{digits}g}, {v + 1.96 * se:.{digits}g}]"
    return text


def _layers_text(layers: Sequence[int]) -> str:
    if not layers:
        return "no layer"
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(str(x) for x in layers)


def _world_model_part(wm: dict[str, Any]) -> str:
    table = wm.get("table") or []
    if not table:
        return ""
    rows = {r.get("model"): r for r in table}
    trained = rows.get("trained model", {})
    bits = [f"{h} {trained[k]:.3g}" for k, h in _WM_COLUMNS if _num_ok(trained.get(k))]
    lead = (
        f"<p>The trained model: {html.escape(', '.join(bits))}; the true world model scores 1 on each "
        "Myhill–Nerode metric, so the gap to 1 is how far the model's implicit map is from the world's.</p>"
        if bits
        else ""
    )
    body = [[r.get("model"), *[_est(r.get(k), r.get(f"{k}_se"), share=True) for k, _ in _WM_COLUMNS]] for r in table]
    settings = wm.get("settings") or {}
    note = (
        f'<p class="note">95 % Wilson intervals from the standard errors (effective sample size, inside [0, 1]); '
        f"Myhill–Nerode: {settings.get('pairs')} state pairs, depth "
        f"{settings.get('depth')}, {html.escape(str(settings.get('estimator')))} estimator.</p>"
        if settings
        else ""
    )
    return "<h3>World model</h3>" + lead + rows_table(["model", *[h for _, h in _WM_COLUMNS]], body, "findings") + note


def _verdict_cell(r: dict[str, Any] | None) -> str:
    if not r:
        return "–"
    ci = r.get("ci") or [None, None]
    return f"{r.get('verdict')} ({_est(r.get('effect'), lo=ci[0], hi=ci[1])})"


def verdict_note(rule: dict[str, Any]) -> str:
    """The sentence under the verdict table: what was measured and the rule, from a sweep summary's
    ``verdict_rule`` (a /1-era results file without one: the old rule, said as such)."""
    what = "Mean effect of zeroing the layer's MLP on the per-token next-token loss (nats), with its interval. "
    if not rule or rule.get("min_effect") is None:
        return what + (
            "95 % per-layer percentile interval over rows (the interp.layer_verdicts/1 rule): "
            "harmful when the interval lies below 0, useful above."
        )
    conf = int(round(100 * float(rule.get("confidence") or 0.95)))
    family = "per layer" if rule.get("per_layer") else "simultaneous over all layers"
    unit = (
        f"{rule.get('n_groups')} groups resampled ({rule.get('groups')})"
        if rule.get("resample") == "groups"
        else "rows resampled"
    )
    d = rule["min_effect"]
    return what + (
        f"{conf} % intervals, {family}; {unit}. Harmful: removing the MLP lowers the loss by more "
        f"than the margin {d:g} ({rule.get('min_effect_reason')}) — the whole interval below −{d:g}; "
        f"useful: the whole interval above +{d:g}; negligible: inside ±{d:g}; inconclusive: otherwise."
    )


def _verdicts_part(results: dict[str, Any]) -> str:
    mlp = (results.get("layers") or {}).get("mlp_zero") or {}
    rows = mlp.get("layers") or []
    if not rows:
        return ""
    plant = results.get("plant") or {}
    planted = [int(x) for x in plant.get("layers") or []] if plant.get("enabled", True) else []
    found = [r["layer"] for r in rows if r.get("verdict") == "harmful"]
    useful = [r["layer"] for r in rows if r.get("verdict") == "useful"]
    control = {r["layer"]: r for r in (plant.get("unplanted_sweep") or {}).get("layers") or []}
    parts = []
    if planted:
        parts.append(
            f"Harm was planted in the MLP of {_layers_text(planted)} "
            f"({html.escape(str(plant.get('corruption')))}, share {plant.get('share')}, {plant.get('steps')} "
            f"steps, everything else frozen)."
        )
        missed, extra = sorted(set(planted) - set(found)), sorted(set(found) - set(planted))
        verdict = (
            "exactly the planted layers"
            if not missed and not extra
            else "; ".join(
                x
                for x in (
                    f"missed {_layers_text(missed)}" if missed else "",
                    f"false alarm on {_layers_text(extra)}" if extra else "",
                )
                if x
            )
        )
        parts.append(
            f"The MLP zero-out sweep of the planted model calls {_layers_text(found)} harmful — "
            f"{verdict} — and {_layers_text(useful)} useful."
        )
        if control:
            ctrl = [k for k, r in control.items() if r.get("verdict") == "harmful"]
            parts.append(f"On the unplanted model it calls {_layers_text(ctrl)} harmful.")
    elif plant.get("why"):
        parts.append(
            f"No harm was planted ({html.escape(str(plant['why']))}). The MLP zero-out sweep calls "
            f"{_layers_text(found)} harmful and {_layers_text(useful)} useful."
        )
    else:
        parts.append(f"The MLP zero-out sweep calls {_layers_text(found)} harmful and {_layers_text(useful)} useful.")
    rest = {v: [r["layer"] for r in rows if r.get("verdict") == v] for v in ("negligible", "inconclusive")}
    if any(rest.values()):
        parts.append("The others: " + "; ".join(f"{_layers_text(ls)} {v}" for v, ls in rest.items() if ls) + ".")
    head = ["layer", "planted"] + (["unplanted model"] if control else []) + ["analysed model"]
    body = [
        [r["layer"], "yes" if r["layer"] in planted else ""]
        + ([_verdict_cell(control.get(r["layer"]))] if control else [])
        + [_verdict_cell(r)]
        for r in rows
    ]
    note = f'<p class="note">{html.escape(verdict_note(mlp.get("verdict_rule") or {}))}</p>'
    return (
        "<h3>Layer verdicts: planted vs found</h3><p>"
        + " ".join(parts)
        + "</p>"
        + rows_table(head, body, "findings")
        + note
    )


def _repair_part(fix: dict[str, Any]) -> str:
    if not fix:
        return ""
    if fix.get("skipped") or not fix.get("layers"):
        return f"<h3>Repair</h3><p>{html.escape(str(fix.get('why', 'nothing was suppressed')))}.</p>"
    comp = {r["metric"]: r for r in fix.get("comparison") or []}
    models = [
        m for m in ("before", "zeroed", "plain", "hls", "unplanted") if any(_num_ok(r.get(m)) for r in comp.values())
    ]
    names = {
        "before": "before (the analysed model)",
        "zeroed": "zeroed at inference",
        "plain": "plain fine-tuning",
        "hls": f"HLS β={fix.get('beta')}",
        "unplanted": "unplanted (the target)",
    }
    parts = [
        f"Suppressed {_layers_text(fix['layers'])} — {html.escape(str(fix.get('why', '')))} — three ways: "
        f"zeroing the MLP at inference, HLS fine-tuning (β = {fix.get('beta')}, {fix.get('steps')} steps, seeds "
        f"{fix.get('seeds')}) and plain fine-tuning on the same clean data and steps."
    ]
    loss = comp.get("heldout_loss")
    if loss:
        bits = [
            f"{names[m].split(' (')[0]} {_est(loss.get(m), lo=loss.get(f'{m}_lo'), hi=loss.get(f'{m}_hi'))}"
            for m in models
        ]
        parts.append("Held-out loss: " + "; ".join(bits) + ".")
    closest = fix.get("closest") or {}
    if closest:
        tally: dict[str, int] = {}
        for c in closest.values():
            for m in [c["closest"]] if isinstance(c["closest"], str) else c["closest"]:
                tally[m] = tally.get(m, 0) + 1
        best = sorted(tally.items(), key=lambda kv: -kv[1])
        parts.append(
            "Closest to the unplanted model: "
            + ", ".join(f"{names.get(m, m).split(' (')[0]} on {n} of {len(closest)} metrics" for m, n in best)
            + " (ties counted for each)."
        )
    body = []
    for key, head, lower in _REPAIR_COLUMNS:
        r = comp.get(key)
        if r:
            body.append(
                [head + (" ↓" if lower else " ↑")]
                + [_est(r.get(m), lo=r.get(f"{m}_lo"), hi=r.get(f"{m}_hi")) for m in models]
            )
    for key, r in comp.items():
        if key == "mlp_out_sq":
            body.append(
                [f"mean MLP_out² (layer {r.get('layer')})"]
                + [_est(r.get(m), lo=r.get(f"{m}_lo"), hi=r.get(f"{m}_hi")) for m in models]
            )
    note = (
        '<p class="note">95 % intervals: over seeds (t) for several fine-tuning seeds, else the evaluation\'s '
        "(from the SE over held-out sequences or states: Wilson for shares, ±1.96 SE otherwise). ↓ lower is "
        "better, ↑ higher is better.</p>"
    )
    return (
        "<h3>Repair</h3><p>"
        + " ".join(parts)
        + "</p>"
        + rows_table(["metric", *[names[m] for m in models]], body, "findings")
        + note
    )


_T1_KEYS = ("robust", "yes", "no", "original", "altered", "flip", "invariant")
_BA_MODELS = ("before", "plain", "hls", "ula", "hls_vs_plain", "ula_vs_plain")
_BA_NAMES = {
    "before": "before",
    "plain": "plain",
    "hls": "HLS",
    "ula": "ULA",
    "hls_vs_plain": "HLS − plain",
    "ula_vs_plain": "ULA − plain",
}


#: the per-class columns of a yes/no sweep's verdict table
_CLASS_HEAD = ("yes-rows: effect", "no-rows: effect", "prior shift")


def _class_cells(r: dict[str, Any]) -> list[str]:
    """A layer's per-gold-class effects (with their verdicts) and its prior-shift flag, as cells."""

    def cell(k: str) -> str:
        return (
            f"{r.get(f'{k}_verdict', '')} ({_est(r.get(f'{k}_effect'), lo=r.get(f'{k}_low'), hi=r.get(f'{k}_high'))})"
        )

    flag = f"yes: {r.get('bias_reason')} (removal → {r.get('towards')})" if r.get("bias") else "no"
    return [cell("yes"), cell("no"), flag]


def sweep_findings(run: dict[str, Any]) -> str:
    """The first screen of a sweep folder (its ``run.json``, :meth:`interp.jobs.run_records.SweepRun.summary`):
    the verdict table with, for a yes/no sweep, the per-class effects, the prior-shift flag, the
    direct effect and the confirmation, and the sentences the verdicts carry."""
    rows = run.get("layers") or []
    if not rows or not isinstance(rows[0], dict) or "verdict" not in rows[0]:
        return ""
    per_class, direct, confirm = ("bias" in rows[0]), ("direct_effect" in rows[0]), ("confirmed" in rows[0])
    head = ["layer", "verdict (mean effect [band])", "paper's raw rule"] + (list(_CLASS_HEAD) if per_class else [])
    head += (["direct effect [band]", "total − direct"] if direct else []) + (["confirmed"] if confirm else [])
    body = []
    for r in rows:
        line = [r["layer"], _verdict_cell(r), r.get("raw_verdict")] + (_class_cells(r) if per_class else [])
        if direct:
            line += [
                _est(r.get("direct_effect"), lo=r.get("direct_low"), hi=r.get("direct_high")),
                _est(r.get("repair")),
            ]
        if confirm:
            line += [
                ("yes" if r.get("confirmed") else "no") + f" ({r.get('discovery_verdict')} → "
                f"{r.get('confirmation_verdict') or '–'})"
                if r.get("discovery_verdict") in ("harmful", "useful")
                else "–"
            ]
        body.append(line)
    words = "".join(f"<p>{html.escape(w)}</p>" for w in run.get("words") or [])
    what = html.escape(str(run.get("metric") or ""))
    return (
        f"<h3>Layer verdicts ({html.escape(str(run.get('kind')))}, {what})</h3>"
        + words
        + rows_table(head, body, "findings")
    )


def _pragworld_part(pw: dict[str, Any]) -> str:
    """The PragWorld job's findings (:mod:`interp.jobs.pragworld`): Table 1 beside the paper, the
    layer verdicts and the before/after table, each led by a sentence."""
    if not pw:
        return ""
    rows = pw.get("rows") or {}
    t1 = pw.get("table1") or []
    ours = [r for r in t1 if "(paper)" not in str(r.get("model"))]
    lead = []
    for r in ours:
        lead.append(
            f"{html.escape(str(r['model']))}: robust {_est(r.get('robust'), lo=r.get('robust_lo'), hi=r.get('robust_hi'))}, "
            f"yes {_est(r.get('yes'), lo=r.get('yes_lo'), hi=r.get('yes_hi'))}, "
            f"no {_est(r.get('no'), lo=r.get('no_lo'), hi=r.get('no_hi'))}"
        )
    body = [
        [
            r.get("model"),
            *[_est(r.get(k), lo=r.get(f"{k}_lo"), hi=r.get(f"{k}_hi")) for k in _T1_KEYS],
            _est(r.get("unparseable")),
        ]
        for r in t1
    ]
    out = [
        f"<h3>PragWorld Table 1 (manual split, first {rows.get('eval')} rows)</h3><p>"
        + "; ".join(lead)
        + ".</p>"
        + rows_table(["model", *_T1_KEYS, "unparseable"], body, "findings")
        + '<p class="note">%; brackets: 95 % cluster bootstrap over PragWorld groups. The paper\'s rows: all 500 '
        "rows, generation prompt, reference grouping (98 groups).</p>"
    ]
    lay = pw.get("layers") or {}
    mz = lay.get("mlp_zero") or {}
    if mz:
        de = lay.get("direct_effect") or {}
        text = (
            f"MLP zero-out over {len(mz.get('layers') or [])} layers on {rows.get('sweep')} rows calls "
            f"{_layers_text(mz.get('harmful') or [])} harmful and {_layers_text(mz.get('useful') or [])} useful. "
            f"HLS suppresses {_layers_text(lay.get('hls_layers') or [])} ({html.escape(str(lay.get('hls_why')))}); "
            f"ULA amplifies {_layers_text(lay.get('ula_layers') or [])} ({html.escape(str(lay.get('ula_why')))}). "
        )
        if de.get("layers"):
            text += (
                f"Direct-effect patching of {de.get('patched')} pairs ({html.escape(str(de.get('rule')))}; the "
                f"reference's filter kept {de.get('reference_pairs')}, skipped {html.escape(str(de.get('skipped')))}) "
                f"calls {_layers_text(de.get('harmful') or [])} harmful and {_layers_text(de.get('useful') or [])} useful."
            )
        dl = {r["layer"]: r for r in de.get("layers") or []}
        per_class = any("bias" in r for r in mz["layers"])
        body = [
            [r["layer"], _verdict_cell(r), r.get("raw_verdict"), _verdict_cell(dl.get(r["layer"]))]
            + (_class_cells(r) if per_class else [])
            for r in mz["layers"]
        ]
        words = "".join(f"<p>{html.escape(w)}</p>" for w in mz.get("words") or [])
        out.append(
            "<h3>Layer verdicts</h3><p>"
            + text
            + "</p>"
            + words
            + rows_table(
                [
                    "layer",
                    "MLP zero-out: verdict (effect on P(gold))",
                    "paper's raw rule (accuracy)",
                    "direct effect: verdict",
                ]
                + (list(_CLASS_HEAD) if per_class else []),
                body,
                "findings",
            )
        )
    ba = pw.get("before_after") or []
    if ba:
        ft = pw.get("finetune") or {}
        keep = [
            r
            for r in ba
            if str(r.get("metric")).startswith(("label_", "benchmark_"))
            or (r.get("metric") in ("sweep_effect_p_gold", "direct_effect_p_gold"))
            or (
                r.get("metric") == "mlp_out_sq"
                and r.get("layer") in set(lay.get("hls_layers") or []) | set(lay.get("ula_layers") or [])
            )
        ]
        models = [m for m in _BA_MODELS if any(_num_ok(r.get(m)) for r in keep)]
        body = [
            [r["metric"] + ("" if r.get("layer") is None else f" (layer {r['layer']})")]
            + [_est(r.get(m), lo=r.get(f"{m}_lo"), hi=r.get(f"{m}_hi")) for m in models]
            for r in keep
        ]
        out.append(
            f"<h3>Before / after fine-tuning</h3><p>{', '.join(ft.get('objectives') or [])} × seeds "
            f"{ft.get('seeds')}, {ft.get('steps')} steps of {ft.get('batch_size')} synthetic rows "
            f"(lr {ft.get('lr')}, LoRA {'on' if (ft.get('lora') or {}).get('enabled') else 'off'}, "
            f"β = {ft.get('beta')}, α = {ft.get('alpha')}); evaluated on the first {rows.get('eval_after')} "
            f"manual rows (prompts) and {rows.get('sweep_after')} rows (sweep).</p>"
            + rows_table(["metric", *[_BA_NAMES[m] for m in models]], body, "findings")
            + '<p class="note">before: its 95 % cluster-bootstrap interval; an objective: mean over seeds '
            "with a t interval over seeds; − plain: the per-seed difference (same batches).</p>"
        )
    return "\n".join(out)


def findings_html(results: dict[str, Any]) -> str:
    """The report's first screen, from ``results.json``: the world-model table, the layer verdicts
    (planted vs found) and the repair result with intervals — or, for a PragWorld job on a
    pretrained model, its Table 1, layer verdicts and before/after table — each led by a
    sentence; empty when the run has none of them."""
    parts = [
        _pragworld_part(results.get("pragworld") or {}),
        _world_model_part(results.get("world_model") or {}),
        _verdicts_part(results),
        _repair_part(results.get("fix") or {}),
    ]
    return "\n".join(p for p in parts if p)
