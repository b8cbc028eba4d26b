"""Layer sweeps on PragWorld examples (paper §6.1–6.2): ``interp sweep --model M --data FILE.csv``.

The examples are the rows of a PragWorld CSV (the published manual split, the synthetic split or a
file written by the dialogue world), asked through :class:`interp.tasks.YesNoTask` — the
interpretability **label prompt**, tokenized with the model's own tokenizer settings (BOS only
where that tokenizer adds one, unless ``prepend_bos`` says otherwise), scored by the two-way
softmax over the " yes" / " no" logits at the last prompt token. No chat template by default: the
reference layer analyses scored the bare prompt. ``interp pragworld eval --prompt label`` and
``interp finetune`` (``kind = "pragworld"``) build their ids from the same task.

- ``mlp-zero`` (§6.2): zero each layer's MLP output; the per-example metric is P(gold) in the
  two-way softmax (higher = better). The verdicts report the paper's raw rule on *accuracy*
  (an example is correct when P(gold) > 0.5: A_ℓ vs A_0) beside the bootstrap verdict on P(gold),
  and the mean effect per layer × alteration category (which categories a harmful layer hurts).
- ``direct-effect`` (§6.1): for each (original, alteration) pair of a group, patch the altered
  prompt's residual stream entering layer ℓ into the original's run at aligned positions; the
  score is P(altered gold) minus the unpatched original's. Like the reference, only pairs where the
  model answers the alteration correctly *and* changes its answer from the original are patched;
  the others are counted by reason, never dropped silently.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp.analysis.runner import SweepRun, accelerator, check_layers, is_main, sharded
from interp.train.distributed import rank_and_size
from interp.analysis.scoring import Batch, forward


def run_pragworld_sweep(
    model: str | Path,
    data: str | Path,
    *,
    kind: str = "mlp-zero",
    grouping: str = "clean",
    method: str = "reuse",
    layers: list[int] | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    batch_size: int | None = 16,
    n: int | None = None,
    n_boot: int = 2000,
    chat_template: bool | None = False,
    prepend_bos: bool | None = None,
    log: Any = None,
    placement: Any = None,
) -> SweepRun:
    """Load the model (any checkpoint folder with a tokenizer), the PragWorld file, run the sweep,
    write ``sweep.csv`` / ``verdicts.json`` (with ``by_category``) / ``layers.png`` / ``run.json``
    to ``out`` (default ``<model>/../sweep_<kind>_pragworld/``). ``n``: the first n rows only;
    ``prepend_bos`` / ``chat_template``: :class:`interp.tasks.Tokenization`; ``placement``: where the
    model runs (:class:`interp.models.device.Placement`; default CPU; a launcher's process device)."""
    from interp.analysis.patching import PatchPair, direct_effect_patching
    from interp.analysis.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.benchmarks.pragworld import load_pragworld
    from interp.models.checkpoint import load_bridge
    from interp.results import write_json
    from interp.tasks import YesNoTask
    from interp.viz.layers import draw_layer_effects

    log = log or sys.stderr
    if kind not in ("mlp-zero", "direct-effect"):
        raise ValueError(f"on PragWorld data --kind must be mlp-zero or direct-effect, got {kind!r}")
    pw = load_pragworld(data, grouping=grouping)  # a bad file fails before the model loads
    rows = pw.rows if n is None else pw.rows.iloc[:n]
    if rows.empty:
        raise ValueError(f"no data rows in {data}")
    model = Path(model)
    acc = accelerator()
    bridge = load_bridge(model, device=str(acc.device) if acc is not None else None,
                         placement=None if acc is not None else placement)
    bridge.eval()
    lays = check_layers(layers, int(bridge.cfg.n_layers))
    task = YesNoTask.pragworld(model, rows, prompt="label", prepend_bos=prepend_bos, chat_template=chat_template)
    task.check_fits(int(bridge.cfg.n_ctx))
    ids, mask = task.inputs()
    gold = task.gold
    categories = task.categories
    info: dict[str, Any] = {"model": str(model), "data": str(data), "grouping": grouping, "kind": kind,
                            "seed": seed, "n_rows": len(rows), **task.settings()}

    if kind == "mlp-zero":
        sweep = sharded(lambda part: mlp_zero_sweep(
            bridge, ids[part], task.metric(gold[part]), mask[part], lays, categories=categories[part],
            batch_size=batch_size, method=method, higher_is_better=True), len(rows), acc)
        info.update(n_examples=len(rows), method=method)
    else:
        # the model's own answers decide which pairs the reference patches
        metric = task.metric()
        p_gold = np.concatenate([
            metric(forward(bridge, ids[a:a + 32], mask[a:a + 32]),
                   Batch(ids[a:a + 32], mask[a:a + 32], torch.arange(a, min(a + 32, len(rows))))).float().numpy()
            for a in range(0, len(rows), 32)])
        answer = np.where(p_gold > 0.5, gold, 1 - gold)
        candidates, unpaired = task.pairs()
        pairs, pair_gold, pair_cats = [], [], []
        skipped = {"no original in group": unpaired, "alteration answered wrongly": 0, "answer unchanged": 0}
        for o, i in candidates:
            if answer[i] != gold[i]:
                skipped["alteration answered wrongly"] += 1
            elif answer[i] == answer[o]:
                skipped["answer unchanged"] += 1
            else:
                pairs.append(PatchPair(list(task.ids[o]), list(task.ids[i])))
                pair_gold.append(int(gold[i]))
                pair_cats.append(categories[i])
        info.update(n_pairs=len(pairs), skipped=skipped, n_failed=sum(skipped.values()))
        if skipped and any(skipped.values()):
            print(f"note: patched {len(pairs)} pairs; skipped {skipped}", file=log)
        if not pairs:
            raise ValueError(f"no (original, alteration) pair where the model answers the alteration correctly and "
                             f"changes its answer (skipped: {skipped})")
        sweep = sharded(lambda part: direct_effect_patching(
            bridge, pairs[part], task.metric(pair_gold[part]), lays, categories=pair_cats[part],
            higher_is_better=True, method="attribution" if method == "attribution" else "exact"), len(pairs), acc)
        info.update(n_examples=len(pairs), method="attribution" if method == "attribution" else "loop")

    info["processes"] = rank_and_size(acc)[1]
    verdicts = layer_verdicts(sweep, n_boot=n_boot, seed=seed, threshold=0.5)
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_{kind}_pragworld"
    if not is_main(acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, verdicts, out_dir, out_dir / "layers.png", info)
    sweep.save(out_dir)
    verdicts.save(out_dir / "verdicts.json")
    figure = draw_layer_effects(verdicts, out_dir / "layers.png",
                                title=f"{kind} on {model.name}, PragWorld {Path(data).name} ({len(rows)} rows)")
    if verdicts.by_category is not None:
        verdicts.by_category.to_csv(out_dir / "by_category.csv")
    run = SweepRun(sweep, verdicts, out_dir, figure, info)
    write_json(out_dir / "run.json", run.summary())
    return run


__all__ = ["run_pragworld_sweep"]
