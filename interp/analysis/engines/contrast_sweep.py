"""Patching on contrast examples (IOI): the clean prompt restores the corrupted one.

The job behind ``interp sweep --data FILE.jsonl`` is :func:`interp.jobs.task_sweep.run_contrast_sweep`; the
MLP zero-out sweep needs nothing beyond the task's ids and metric. Here, the two patching kinds,
with the direction of the IOI literature (Wang et al. 2022 §3; TransformerLens's patching demos):
the **clean** run is the prompt, the **corrupted** run its corrupted prompt (the ABC prompt: three
other names), the metric the clean prompt's logit difference correct − foil (IO − S), and a
patched activation is copied from the clean run into the corrupted one —

- ``direct-effect`` (:func:`contrast_pairs`): per layer ℓ, the clean residual stream entering ℓ at
  every aligned position (:func:`~interp.analysis.engines.direct_patching.direct_effect_patching`: equal tokens of
  the two prompts; the differing name tokens keep the corrupted activations), effect = metric of
  the patched corrupted run − metric of the corrupted run;
- ``activation-patching`` (:func:`contrast_activation_patching`): one activation at a time, layer ×
  position (``resid_pre``) and layer × head (``heads``, all positions), on
  ``transformer_lens.patching`` (:func:`~interp.analysis.engines.activation_patching.activation_patching`),
  examples grouped by token length (a prompt and its corrupted prompt always have the same, the
  task checks it) and the maps merged with positions counted from the last token, as the PragWorld
  pairs are (:mod:`interp.analysis.engines.pragworld_sweep`).
"""

from __future__ import annotations

from typing import Any

from interp.analysis.engines.direct_patching import PatchPair


def contrast_pairs(task: Any) -> list[PatchPair]:
    """One :class:`~interp.analysis.engines.direct_patching.PatchPair` per example: ``original`` = the corrupted
    prompt's ids (the run scored and patched), ``altered`` = the prompt's (the source)."""
    if task.corrupted_ids is None:
        raise ValueError("patching a contrast task needs a corrupted prompt in every example (the 'corrupted' key)")
    return [PatchPair(list(c), list(p)) for c, p in zip(task.corrupted_ids, task.ids)]


def contrast_activation_patching(
    bridge: Any,
    task: Any,
    components: tuple[str, ...] = ("resid_pre", "heads"),
    *,
    method: str = "exact",
    batch_size: int | None = None,
    metric: str | None = None,
    units: Any = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Activation patching of every example of a contrast task (module docstring): ``(maps,
    info)``, ``maps`` component → :class:`~interp.analysis.engines.activation_patching.PatchingMap` whose
    ``example`` is the task row. ``metric``: ``logit_diff`` (default) or ``prob``;
    ``method="attribution"``: :func:`~interp.analysis.engines.attribution.activation_attribution`;
    ``units``: finished chunks written and read back
    (:func:`~interp.analysis.engines.pair_patching.patch_by_length`)."""
    from interp.analysis.engines.pair_patching import patch_by_length
    from interp.analysis.engines.pragworld_sweep import merge_maps
    from interp.tasks.contrast import GROUP_UNIT

    if method not in ("exact", "attribution"):
        raise ValueError(f"method must be 'exact' or 'attribution', got {method!r}")
    if task.corrupted_ids is None:
        raise ValueError("activation patching of a contrast task needs a corrupted prompt in every example")
    parts = patch_by_length(
        bridge,
        task.ids,
        task.corrupted_ids,
        lambda chunk: task.metric_of(metric, rows=chunk),
        components,
        method=method,
        batch_size=batch_size,
        units=units,
    )
    rows = [(i, i) for i in range(len(task))]
    maps = {c: merge_maps(parts[c], rows, task) for c in components}
    for m in maps.values():
        m.meta.update(clean="prompt", corrupted="corrupted prompt", groups=GROUP_UNIT, rows=list(range(len(task))))
    return maps, {
        "n_pairs": len(task),
        "skipped": {},
        "rows": [[i, i] for i in range(len(task))],
        "lengths": sorted({len(x) for x in task.ids}),
    }


__all__ = ["contrast_activation_patching", "contrast_pairs"]
