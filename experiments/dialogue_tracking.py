"""How a real model tracks "where is the object now" beyond its score (issue 39): linear probes by
layer on the residual stream at the cloze's last token, for the current place, the initial place
and the most recently mentioned place (interp.analysis.evaluation.dialogue_probes), on the selection split's
conversations split by group; and the Myhill–Nerode compression / distinction restricted to the
cloze (interp.analysis.evaluation.dialogue_boundary) on the held-out evaluation split.

    python experiments/dialogue_tracking.py --out runs/dialogue_tracking                  # both models
    python experiments/dialogue_tracking.py --out runs/tracking_quick --models M --groups 6 --layers=-1,0

Writes ``tracking.json`` (every layer's accuracy, standard error, baseline; both rates with their
intervals; the config, machine and provenance) and ``tracking.md`` (per model: the rates, then
accuracy by layer and label).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

import interp
from interp.analysis.evaluation.dialogue_boundary import dialogue_boundary
from interp.analysis.evaluation.dialogue_probes import LABELS, dialogue_probes
from interp.api import provenance
from interp.hardware import machine
from interp.worlds.dialogue.natural import DialogueConfig, dialogue_examples


def table(results: dict) -> pd.DataFrame:
    """Layers as rows, one ``accuracy ± se`` column per label, the labels' majority baselines last."""
    cols = {}
    for label, res in results.items():
        f = res.layers.set_index("layer")
        cols[label] = [f"{a:.2f} ± {s:.2f}" for a, s in zip(f["accuracy"], f["se"])]
        cols[f"{label} baseline"] = [f"{b:.2f}" for b in f["baseline"]]
    return pd.DataFrame(cols, index=next(iter(results.values())).layers["layer"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the run folder (tracking.json, tracking.md)")
    p.add_argument("--models", default="smollm2-135m-instruct,gemma-3-270m", help="comma-separated names or folders")
    p.add_argument("--groups", type=int, default=40, help="conversations (groups) of the selection split (default 40)")
    p.add_argument("--layers", help="probe layers, comma-separated (default all: -1 embeddings … n_layers final)")
    p.add_argument("--seed", type=int, default=1, help="the split's generator seed (default 1: the selection split)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    layers = [int(x) for x in a.layers.split(",")] if a.layers else None
    record = {"config": vars(a), "labels": list(LABELS), "machine": machine(), "provenance": provenance(), "models": {}}
    md = ["# Tracking the object's place: the cloze's Myhill–Nerode boundary and probes by layer\n"]
    for name in a.models.split(","):
        model = interp.load_model(name)
        xs = list(dialogue_examples(model.tokenizer, DialogueConfig(groups=a.groups, seed=a.seed)).examples)
        held = list(dialogue_examples(model.tokenizer, DialogueConfig(groups=a.groups, split="heldout")).examples)
        mn = dialogue_boundary(model, held)
        res = dialogue_probes(model, xs, layers=layers)
        record["models"][name] = {"boundary": mn.summary, "probes": {label: r.summary() for label, r in res.items()}}
        rates = "; ".join(f"{k} {v['value']:.2f} [{v['low']:.2f}, {v['high']:.2f}] ({v['pairs']} pairs)"
                          for k, v in mn.summary.items() if isinstance(v, dict) and v["pairs"])  # fmt: skip
        md += [f"## {name}\n", f"Held-out split ({len(held)} rows, {a.groups} groups): {rates}.\n",
               f"Probes, selection split ({len(xs)} rows; held-out groups; accuracy ± clustered SE):\n",
               table(res).to_markdown(), ""]  # fmt: skip
        (out / "tracking.json").write_text(json.dumps(record, indent=1, default=str))
        (out / "tracking.md").write_text("\n".join(md))
    print(f"wrote {out / 'tracking.json'} and {out / 'tracking.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
