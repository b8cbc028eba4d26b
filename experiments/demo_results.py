"""The README's demo tables, generated from a run's ``results.json`` (so they cannot drift).

Prints the Markdown block of an ``interp run`` folder (default ``runs/demo``): the machine and
stage timings, the world-model table (Vafa et al. Table 1 on this world), greedy routes and
P(end | at the destination), the planted and found harmful layers, the repair. ``--write FILE``
replaces the text between ``<!-- BEGIN demo-results -->`` and ``<!-- END demo-results -->`` in
each FILE; ``--check FILE`` exits 1 when a FILE's block differs from the run's.

    python experiments/demo_results.py runs/demo --write README.md
    python experiments/demo_results.py runs/demo --check README.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

BEGIN, END = "<!-- BEGIN demo-results -->", "<!-- END demo-results -->"
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


def block(results: dict) -> str:
    """The Markdown between the markers."""
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
    pattern = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{where}: no {BEGIN} … {END} block")
    return pattern.sub(lambda _: f"{BEGIN}\n{new}\n{END}", text, count=1)


def current_block(text: str, where: str) -> str:
    m = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not m:
        raise SystemExit(f"{where}: no {BEGIN} … {END} block")
    return m.group(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", nargs="?", default="runs/demo", help="run folder with results.json (default runs/demo)")
    ap.add_argument("--write", nargs="+", default=[], metavar="FILE", help="replace the block in these files")
    ap.add_argument("--check", nargs="+", default=[], metavar="FILE", help="exit 1 if a file's block differs")
    args = ap.parse_args(argv)
    path = Path(args.run) / "results.json"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: run `interp run` (make demo) first")
    new = block(json.loads(path.read_text()))
    for f in map(Path, args.write):
        f.write_text(replace_block(f.read_text(), new, str(f)))
        print(f"wrote the demo block of {f}")
    bad = [f for f in args.check if current_block(Path(f).read_text(), f) != new]
    for f in bad:
        print(f"{f}: the demo block differs from {path}", file=sys.stderr)
    if not args.write and not args.check:
        print(new)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
