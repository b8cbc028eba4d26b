"""The README's demo block: Markdown generated from an ``interp run`` folder's ``results.json``, so the
numbers quoted cannot drift from the run (``experiments/demo_results.py`` writes and checks it).

:func:`demo_block` makes the block; :func:`replace_block` puts it between the markers
:data:`BEGIN` … :data:`END` of a page and :func:`current_block` reads the one a page holds.
"""

from __future__ import annotations

import re

#: the marker before the generated block in README.md and the docs
BEGIN = "<!-- BEGIN demo-results -->"
#: the marker after it
END = "<!-- END demo-results -->"
#: (key in the world-model table, column header) of the demo block's table
TABLE1 = (
    ("next_token", "next-token"),
    ("probe", "probe"),
    ("compression_precision", "compression prec."),
    ("distinction_precision", "distinction prec."),
    ("distinction_recall", "distinction rec."),
)


def _pm(row: dict, key: str) -> str:
    v, se = row.get(key), row.get(f"{key}_se")
    if v is None or v != v:  # missing or NaN: no such cell (no probe of the oracle; no pair distinguished)
        return "—"
    return f"{v:.2f} ± {se:.2f}" if se is not None and se == se else f"{v:.2f}"


def _ci(v: float, lo: float | None, hi: float | None, fmt: str = ".3g") -> str:
    return f"{v:{fmt}}" if lo is None or hi is None else f"{v:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _seconds(s: float) -> str:
    m, sec = divmod(int(round(s)), 60)
    return f"{m} min {sec} s" if m else f"{sec} s"


def demo_block(results: dict) -> str:
    """The Markdown between the markers, from an ``interp run`` folder's ``results.json`` (a dict): the
    machine and stage timings, the world-model table, greedy routes, the planted and found harmful
    layers and the repair."""
    m, secs, wm = results["machine"], results["seconds"], results["world_model"]
    train = results["train"]
    origin = "the shipped demo model" if train.get("shipped") else f"trained here ({_seconds(secs['train'])})"
    after = sum(v for k, v in secs.items() if k != "train")
    lines = [
        f"`interp run` ({'`make demo`' if train.get('shipped') else '`interp run --retrain`'}), "
        f"{m['date']}, {m['cpu']} ({m['cores']} cores, {m['threads']} threads), fp32 matmul peak "
        f"{m['matmul_peak_gflops']:g} GFLOP/s: model {origin}; the stages after it "
        f"{_seconds(after)} ("
        + ", ".join(f"{k.replace('_', ' ')} {v:.0f} s" for k, v in secs.items() if k != "train")
        + ").",
        "",
        "| model | " + " | ".join(name for _, name in TABLE1) + " |",
        "|---" * (len(TABLE1) + 1) + "|",
    ]
    for row in wm["table"]:
        lines.append(f"| {row['model']} | " + " | ".join(_pm(row, k) for k, _ in TABLE1) + " |")
    s = wm["settings"]
    lines += ["", f"Myhill–Nerode: {s['estimator']} estimator, {s['pairs']} state pairs, depth {s['depth']}.", ""]
    nav = wm.get("navigation", {})
    rows = ["| then | result |", "|---|---|"]
    if nav:
        r, ideal, end = nav["routes"], nav["ideal_routes"], nav["end_at_destination"]
        fails = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(r["failures"].items())) or "none"
        rows.append(
            f"| greedy routes between {r['routes']} held-out pairs | {r['valid']:.1%} valid (ideal predictor "
            f"{ideal['valid']:.0%}; failures: {fails}); P(end \\| at the destination) "
            f"{end['trained model']['p_end']:.3f} ± {end['trained model']['p_end_se']:.3f} (ideal "
            f"{end['ideal predictor']['p_end']:.3f} ± {end['ideal predictor']['p_end_se']:.3f}) |"
        )
    plant, fix = results.get("plant") or {}, results.get("fix") or {}
    sweep = results["layers"]["mlp_zero"]
    rule = sweep.get("verdict_rule", {})
    harmful = [x for x in sweep["layers"] if x["verdict"] == "harmful"]
    if plant.get("layers"):
        found = (
            "; ".join(
                f"layer {x['layer']} (zeroed, held-out loss {x['effect']:+.3g} nats [{x['ci'][0]:+.3g}, {x['ci'][1]:+.3g}])"
                for x in harmful
            )
            or "none"
        )
        rows.append(
            f"| harm planted in layer{'s' if len(plant['layers']) > 1 else ''} "
            f"{', '.join(map(str, plant['layers']))}'s MLP ({plant['share']:.0%} {plant['corruption'].replace('_', ' ')}, "
            f"{plant['steps']} steps) | harmful by the MLP zero-out sweep "
            f"(margin ±{rule.get('min_effect', 0):g}, {rule.get('confidence', 0.95):.0%} band over all layers): "
            f"{found}; the unplanted control: {plant['unplanted_sweep']['harmful'] or 'none'} |"
        )
    if fix.get("comparison"):
        comp = {(c["metric"], c.get("layer")): c for c in fix["comparison"]}
        names = [n for n in ("before", "zeroed", "plain", "hls", "unplanted") if n in comp[("heldout_loss", None)]]

        def cells(metric, layer=None, fmt=".3g"):
            c = comp.get((metric, layer))
            if c is None:
                return None
            return ", ".join(
                f"{'planted' if n == 'before' else n} {_ci(c[n], c.get(f'{n}_lo'), c.get(f'{n}_hi'), fmt)}"
                for n in names
                if c.get(n) is not None
            )

        rows.append(
            f"| repair of layer{'s' if len(fix['layers']) > 1 else ''} {', '.join(map(str, fix['layers']))} "
            f"({fix['steps']} steps, seeds {fix['seeds']}): held-out loss | {cells('heldout_loss')} |"
        )
        for metric, label in (
            ("routes_valid", "greedy routes valid"),
            ("mn_compression_precision", "compression precision"),
        ):
            if cells(metric):
                rows.append(f"| {label} | {cells(metric)} |")
        for layer in fix["layers"]:
            if cells("mlp_out_sq", layer):
                rows.append(f"| layer {layer}'s mean squared MLP output | {cells('mlp_out_sq', layer)} |")
    lines += rows
    return "\n".join(lines)


def replace_block(text: str, new: str, where: str) -> str:
    """``text`` with the lines between :data:`BEGIN` and :data:`END` replaced by ``new``; a
    :class:`ValueError` naming ``where`` when ``text`` has no such block."""
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"{where}: no {BEGIN} … {END} block")
    return pattern.sub(lambda _: f"{BEGIN}\n{new}\n{END}", text, count=1)


def current_block(text: str, where: str) -> str:
    """The lines between :data:`BEGIN` and :data:`END` in ``text`` (a :class:`ValueError` naming
    ``where`` when there is none)."""
    m = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not m:
        raise ValueError(f"{where}: no {BEGIN} … {END} block")
    return m.group(1)


__all__ = ["BEGIN", "END", "TABLE1", "current_block", "demo_block", "replace_block"]
