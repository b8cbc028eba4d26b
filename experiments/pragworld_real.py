"""PragWorld's question on a real model (issue 39): natural conversations with the seven alterations,
the layers that hurt tracking, and harmful-layer suppression against plain fine-tuning and a
random-layer control — the command line of :mod:`interp.studies.pragworld_real` (its docstring has
every stage).

    python experiments/pragworld_real.py --out runs/pragworld_real              # the full size
    python experiments/pragworld_real.py --out runs/pw --groups 16 --layer-step 3 --steps 48 --lr 1e-4  # the page's run
    python experiments/pragworld_real.py --out runs/pw_quick --quick            # every arm tiny (the suite)

Writes ``results.json`` and per model ``baseline_<model>.md``, ``layers_<model>.md`` and
``finetune_<model>.md`` into ``--out``; the best fine-tuned model into
``<out>/<model>/finetune/best_checkpoint``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from interp.studies.pragworld_real import QUICK, Config, run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the run folder (results.json and the Markdown tables)")
    p.add_argument("--quick", action="store_true", help="every arm tiny: 4 groups, 2 steps, 2 layers, 1 seed")
    p.add_argument("--models", default="smollm2-135m-instruct,gemma-3-270m", help="comma-separated names or folders")
    p.add_argument("--seeds", default="0,1,2", help="fine-tuning seeds (quick: the first)")
    p.add_argument("--groups", type=int, help="groups per split (default 40; quick 4)")
    p.add_argument("--steps", type=int, help="fine-tuning steps (default 16; quick 2)")
    p.add_argument("--batch-size", type=int, help="fine-tuning batch size (default 8; quick 4)")
    p.add_argument("--lr", type=float, help="fine-tuning learning rate (default 5e-5)")
    p.add_argument("--layers", help="swept layers, comma-separated (default all; quick 0,1)")
    p.add_argument("--layer-step", type=int, help="sweep every k-th layer and the last (per model)")
    p.add_argument("--removals", help="sweep removals, comma-separated, zero first (default zero,mean,scale)")
    p.add_argument("--baseline-only", action="store_true", help="stop after each model's baseline table")
    a = p.parse_args(argv)
    given = {"groups": a.groups, "steps": a.steps, "batch_size": a.batch_size, "lr": a.lr, "layer_step": a.layer_step}
    c = replace(QUICK if a.quick else Config(), **{k: v for k, v in given.items() if v is not None})
    c = replace(c, layers=tuple(int(x) for x in a.layers.split(",")) if a.layers else c.layers)
    c = replace(c, baseline_only=a.baseline_only, removals=tuple(a.removals.split(",")) if a.removals else c.removals)
    seeds = [int(s) for s in a.seeds.split(",")][: 1 if a.quick else None]
    run(a.models.split(","), c, seeds, a.out)
    print(f"wrote {a.out}/results.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
