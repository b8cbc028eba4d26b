"""Layer sweeps on PragWorld examples (paper §6.1–6.2): the pairs and patching maps behind
``interp sweep --model M --data FILE.csv`` (the job — loading, files, figures — is
:func:`interp.jobs.task_sweep.run_pragworld_sweep`).

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
- ``activation-patching``: the same pairs (the same filter), restricted to those whose original
  and altered ids have equal length (TransformerLens's patching runs the two inputs position by
  position, without padding; the others are counted as ``token lengths differ``). The altered
  prompt is the *clean* run (the source of the activations), the original the *corrupted* one (the
  run patched), the metric P(altered gold) — the direction of ``direct-effect``. Maps: the residual
  stream entering each layer patched at one position (layer × position) and each attention head's
  output patched at all positions (layer × head), on ``transformer_lens.patching``
  (:func:`pair_activation_patching`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from interp.analysis.engines.scoring import Batch, forward


def reference_pairs(
    bridge: Any, task: Any, batch_size: int = 32, p_gold: Any = None
) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """``(pairs, skipped)``: the (original row, alteration row) pairs of ``task`` (a
    :class:`interp.tasks.YesNoTask`) that the reference patches (§6.1) — the model answers the
    alteration correctly (P(gold) > 0.5) *and* its answer differs from the original's — and how
    many pairs each reason left out (``no original in group``, ``alteration answered wrongly``,
    ``answer unchanged``). ``p_gold``: each row's P(gold) when already computed (e.g. by the label
    evaluation; then ``bridge`` is not run)."""
    if p_gold is None:
        ids, mask = task.inputs()
        metric = task.metric()
        p_gold = np.concatenate(
            [
                metric(
                    forward(bridge, ids[a : a + batch_size], mask[a : a + batch_size]),
                    Batch(
                        ids[a : a + batch_size],
                        mask[a : a + batch_size],
                        torch.arange(a, min(a + batch_size, len(task))),
                    ),
                )
                .float()
                .cpu()
                .numpy()
                for a in range(0, len(task), batch_size)
            ]
        )
    p_gold = np.asarray(p_gold, dtype=float)
    if p_gold.shape != (len(task),):
        raise ValueError(f"p_gold has shape {p_gold.shape}, expected one value per task row ({len(task)})")
    gold = task.gold
    answer = np.where(p_gold > 0.5, gold, 1 - gold)
    candidates, unpaired = task.pairs()
    pairs: list[tuple[int, int]] = []
    skipped = {"no original in group": unpaired, "alteration answered wrongly": 0, "answer unchanged": 0}
    for o, i in candidates:
        if answer[i] != gold[i]:
            skipped["alteration answered wrongly"] += 1
        elif answer[i] == answer[o]:
            skipped["answer unchanged"] += 1
        else:
            pairs.append((o, i))
    return pairs, skipped


def merge_maps(parts: list[tuple[Any, list[int], int]], rows: list[tuple[int, int]], task: Any) -> Any:
    """One :class:`PatchingMap` from the maps of equal-length groups: ``parts`` holds (map, the
    global pair numbers of its examples, its token length). Positions become offsets from the last
    prompt token (``pos`` ≤ 0, 0 = the scored token; ``position`` keeps the index in the prompt),
    so the shared template tail lines up across lengths; a heatmap cell is the mean over the pairs
    long enough to have it. Labels: the original prompts' token at an offset where all agree (its
    decoded text, a newline as ``\\n``), else ``·``. Each pair's ``group`` is its original's."""
    import pandas as pd

    from interp.analysis.engines.activation_patching import PatchingMap

    first = parts[0][0]
    axis = first.axis
    frames = []
    for m, examples, length in parts:
        f = m.frame.copy()
        f["example"] = np.asarray(examples)[f["example"].to_numpy()]
        if axis == "pos":
            f["position"] = f["pos"]
            f["pos"] = f["pos"] - (length - 1)
        f["length"] = length
        frames.append(f)
    frame = pd.concat(frames, ignore_index=True).sort_values(["layer", axis, "example"], kind="stable")
    frame = frame.reset_index(drop=True)
    cats = task.categories
    frame["category"] = [cats[rows[e][1]] for e in frame["example"]]
    groups = task.groups
    frame["group"] = [groups[rows[e][0]] for e in frame["example"]]
    n = sum(len(e) for _, e, _ in parts)
    meta = dict(first.meta)
    meta.update(
        n_examples=n,
        positions=max(L for _, _, L in parts),
        clean_mean=float(sum(m.meta["clean_mean"] * len(e) for m, e, _ in parts) / n),
        corrupted_mean=float(sum(m.meta["corrupted_mean"] * len(e) for m, e, _ in parts) / n),
        clean="altered prompt",
        corrupted="original prompt",
        rows=[list(r) for r in rows],
        groups="the PragWorld group of the pair's original",
        lengths=sorted({L for _, _, L in parts}),
    )
    if axis == "pos":
        tok = task.tokenization.tokenizer
        width = meta["positions"]
        labels = []
        for off in range(-(width - 1), 1):
            seen = {task.ids[o][len(task.ids[o]) - 1 + off] for o, _ in rows if len(task.ids[o]) - 1 + off >= 0}
            labels.append(tok.decode([seen.pop()]).replace("\n", "\\n") if len(seen) == 1 else "·")
        meta.update(labels=labels, position_axis="offset from the last prompt token (0: the scored token)")
    return PatchingMap(frame, meta)


def pair_activation_patching(
    bridge: Any,
    task: Any,
    pairs: list[tuple[int, int]],
    components: tuple[str, ...] = ("resid_pre", "heads"),
    *,
    method: str = "exact",
    batch_size: int | None = None,
    units: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Activation patching of PragWorld (original, alteration) pairs: ``(maps, info)``.

    ``task``: a :class:`interp.tasks.YesNoTask` (its ids, yes/no tokens and metric); ``pairs``:
    (original row, alteration row) indices into it (e.g. :func:`reference_pairs`). Pairs whose
    two prompts tokenize to different lengths cannot be patched position by position and are
    counted in ``info["skipped"]["token lengths differ"]``. The rest run in groups of equal length
    (chunks of ``batch_size``) through
    :func:`~interp.analysis.engines.activation_patching.activation_patching` — clean = the altered prompt,
    corrupted = the original, metric P(altered gold) — or, with ``method="attribution"``,
    :func:`~interp.analysis.engines.attribution.activation_attribution`; the group maps are merged by
    :func:`merge_maps` (positions counted from the end). ``maps``: component → map; the frame's
    ``example`` numbers the patched pairs in ``info["rows"]`` order. ``units``: a
    :class:`~interp.analysis.engines.unitstore.MapUnits` (finished chunks written, read back on a rerun;
    :func:`~interp.analysis.engines.pair_patching.patch_by_length`).
    """
    from interp.analysis.engines.pair_patching import patch_by_length

    if method not in ("exact", "attribution"):
        raise ValueError(f"method must be 'exact' or 'attribution', got {method!r}")
    kept = [(o, i) for o, i in pairs if len(task.ids[o]) == len(task.ids[i])]
    skipped = {"token lengths differ": len(pairs) - len(kept)}
    if not kept:
        raise ValueError(
            f"none of the {len(pairs)} (original, alteration) pairs has prompts of equal token length; "
            "activation patching runs position by position (use --kind direct-effect, which aligns "
            "positions)"
        )
    gold = task.gold
    parts = patch_by_length(
        bridge,
        [task.ids[i] for _, i in kept],
        [task.ids[o] for o, _ in kept],
        lambda chunk: task.metric([int(gold[kept[k][1]]) for k in chunk]),
        components,
        method=method,
        batch_size=batch_size,
        units=units,
    )
    maps = {c: merge_maps(parts[c], kept, task) for c in components}
    lengths = sorted({len(task.ids[o]) for o, _ in kept})
    info = {"n_pairs": len(kept), "skipped": skipped, "rows": [list(r) for r in kept], "lengths": lengths}
    return maps, info


def reference_patch_pairs(bridge: Any, task: Any) -> tuple[list[Any], list[int], list[Any], np.ndarray, dict[str, int]]:
    """``direct-effect`` on PragWorld rows: ``(pairs, gold, categories, groups, skipped)`` — a
    :class:`~interp.analysis.engines.direct_patching.PatchPair` (original ids, altered ids) per pair the reference
    patches (:func:`reference_pairs`), the altered row's gold (the metric's), its category, the
    original's group; raises when there is none."""
    from interp.analysis.engines.direct_patching import PatchPair

    candidates, skipped = reference_pairs(bridge, task)
    if not candidates:
        raise ValueError(
            f"no (original, alteration) pair where the model answers the alteration correctly and "
            f"changes its answer (skipped: {skipped})"
        )
    pairs = [PatchPair(list(task.ids[o]), list(task.ids[i])) for o, i in candidates]
    gold, cats = task.gold, task.categories
    return (
        pairs,
        [int(gold[i]) for _, i in candidates],
        [cats[i] for _, i in candidates],
        task.pair_groups(candidates),
        skipped,
    )


def reference_activation_patching(
    bridge: Any, task: Any, *, method: str = "exact", batch_size: int | None = None, units: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``activation-patching`` on PragWorld rows: :func:`pair_activation_patching` of the pairs the
    reference patches (:func:`reference_pairs`); ``info["skipped"]`` counts every pair left out by
    reason (the reference's filter and unequal token lengths). Raises when none is left."""
    candidates, skipped = reference_pairs(bridge, task)
    if not candidates:
        raise ValueError(
            f"no (original, alteration) pair where the model answers the alteration correctly and "
            f"changes its answer (skipped: {skipped})"
        )
    if all(len(task.ids[o]) != len(task.ids[i]) for o, i in candidates):
        raise ValueError(
            f"none of the {len(candidates)} (original, alteration) pairs the reference patches has "
            f"prompts of equal token length (skipped before: {skipped}); activation patching runs "
            "position by position — --kind direct-effect aligns the positions instead"
        )
    maps, got = pair_activation_patching(bridge, task, candidates, method=method, batch_size=batch_size, units=units)
    skipped.update(got["skipped"])
    got["skipped"] = skipped
    return maps, got


__all__ = [
    "merge_maps",
    "pair_activation_patching",
    "reference_activation_patching",
    "reference_pairs",
    "reference_patch_pairs",
]
