"""HLS on the layers PragWorld's own rule would pick (issue 39), beside a finished
``experiments/pragworld_real.py`` run.

The paper calls a layer harmful when zeroing its MLP raises the accuracy (§6.2), read off point
estimates on the rows it evaluates. interp's calibrated verdicts may name no layer (every interval
crossing the margin); this arm applies the paper's rule instead — on the *selection* split only
(disjoint from the evaluation split): the ``k`` layers whose zero removal raised the logit
difference most, flip and invariant rows pooled (weighted by their counts), positive effects only —
and fine-tunes with HLS on them at the run's steps, lr, weight, batch and seeds, scored on the same
held-out evaluation split, with the cloze's Myhill–Nerode boundary after each seed.

    python experiments/pragworld_paper_rule.py --run runs/pragworld_real --model smollm2-135m-instruct

Writes ``paper_rule_<model>.json`` and ``.md`` into ``--run``: the layers and their effects, the arm's
accuracy / robust / logit-difference tables beside the run's recorded arms (means over seeds; the
run's arms were not saved per example, so this arm is compared by its seed means, not paired).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pandas as pd

import interp
from interp.analysis.evaluation.dialogue import evaluate_dialogue
from interp.analysis.evaluation.dialogue_boundary import dialogue_boundary
from interp.worlds.dialogue.natural import DialogueConfig, dialogue_examples


def paper_rule_layers(layers_dir: Path, k: int) -> pd.DataFrame:
    """The zero removal's mean effect per layer, flip and invariant pooled by row counts; the ``k``
    largest positive ones marked ``chosen``."""
    parts = [
        pd.read_csv(layers_dir / f"sweep_{e}" / "sweep_layers.csv").assign(effect=e) for e in ("flip", "invariant")
    ]
    both = pd.concat(parts)
    pooled = both.groupby("layer").apply(
        lambda f: (f["mean_effect"] * f["n"]).sum() / f["n"].sum(), include_groups=False
    )
    frame = pooled.rename("pooled_effect").reset_index().sort_values("pooled_effect", ascending=False)
    frame["chosen"] = False
    top = frame[frame["pooled_effect"] > 0].head(k).index
    frame.loc[top, "chosen"] = True
    return frame


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a finished pragworld_real.py run folder (results.json)")
    p.add_argument("--model", default="smollm2-135m-instruct", help="which of the run's models")
    p.add_argument("--k", type=int, default=2, help="layers to suppress (default 2)")
    a = p.parse_args(argv)
    run = Path(a.run)
    results = json.loads((run / "results.json").read_text())
    c, seeds, stem = results["config"], results["seeds"], Path(a.model).name
    frame = paper_rule_layers(run / stem / "layers", a.k)
    chosen = [int(x) for x in frame.loc[frame["chosen"], "layer"]]
    if not chosen:
        raise SystemExit("no layer's zero removal raised the logit difference: the paper's rule picks none")
    model = interp.load_model(a.model)

    def make(seed: int, split: str) -> list:
        cfg = DialogueConfig(groups=c["groups"], seed=seed, split=split)
        return list(dialogue_examples(model.tokenizer, cfg).examples)

    train, held = make(0, "train"), make(0, "heldout")
    ioi = interp.ioi(model, n=c["ioi_n"], seed=0)
    scores, bounds, ioi_rows = [], [], {}
    for seed in seeds:
        ft = interp.finetune(model, interp.contrast(model, train), method="hls", suppress=chosen, steps=c["steps"], lr=c["lr"],
                             weight=c["weight"], batch_size=c["batch_size"], seed=seed, eval_task=ioi,
                             out=run / stem / "paper_rule_ckpt", progress=False)  # fmt: skip
        scores.append(evaluate_dialogue(ft.model, interp.contrast(ft.model, held), n_boot=c["n_boot"]))
        bounds.append(dialogue_boundary(ft.model, held, n_boot=c["n_boot"]).summary)
        ioi_rows[str(seed)] = ft.table.to_dict()
        shutil.rmtree(ft.folder)
    recorded = results["models"][a.model]["finetune"]["tables"]
    tables = {}
    for q in ("accuracy", "robust", "logit_diff"):
        t = pd.DataFrame(recorded[q]).set_index("subset")
        t["hls_paper_rule"] = pd.concat([s.table.set_index("subset")[q] for s in scores], axis=1).mean(axis=1)
        tables[q] = t
    out = {"layers": chosen, "effects": frame.to_dict("records"), "seeds": seeds, "boundary": bounds, "ioi": ioi_rows,
           "scores": [s.to_dict() for s in scores], "tables": {q: t.reset_index().to_dict("records") for q, t in tables.items()}}  # fmt: skip
    (run / f"paper_rule_{stem}.json").write_text(json.dumps(out, indent=1, default=str))
    md = [f"# {a.model}: HLS on the paper's rule's layers {chosen} ({c['steps']} steps, seeds {seeds})\n",
          frame.to_markdown(index=False, floatfmt="+.3f"), ""]  # fmt: skip
    md += [f"## {q} (mean over seeds)\n\n{t.to_markdown(floatfmt='.3f')}\n" for q, t in tables.items()]
    (run / f"paper_rule_{stem}.md").write_text("\n".join(md))
    print(f"wrote {run / f'paper_rule_{stem}.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
