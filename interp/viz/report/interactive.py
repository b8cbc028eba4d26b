"""The report's CircuitsVis views (:mod:`interp.viz.circuits`): the activation-patching maps found
in the run folder and the attention patterns of a few sequences under the run's checkpoint. What
cannot be shown is added to the report's missing list, never raised."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from interp.viz.report.files import humanise
from interp.viz.report.folder import TITLES, Collected, Section, is_checkpoint


def _default_model(run_dir: Path) -> Path | None:
    for name in ("best", "last"):
        if is_checkpoint(run_dir / name):
            return run_dir / name
    return None


def _default_sequences(run_dir: Path, model: Any, n: int) -> list[list[str]]:
    test = run_dir / "data" / "test.txt"
    if test.is_file():
        out = []
        with test.open() as f:
            for line in f:
                if line.split():
                    out.append(line.split())
                if len(out) == n:
                    break
        return out
    world = getattr(model, "world", None)
    if world is not None:
        import numpy as np

        return [list(s) for s in world.generate(n, np.random.default_rng(0))]
    return []


def circuits_sections(
    run_dir: Path,
    coll: Collected,
    model: Any,
    sequences: Any,
    n_sequences: int,
    max_tokens: int,
    placement: Any = None,
) -> tuple[list[Section], list[Any]]:
    """The report's interactive sections (CircuitsVis attention and the patching maps found in
    ``run_dir``) and the components they embed; ``model`` / ``sequences`` supply the attention views."""
    from interp.viz import circuits

    sections, components = [], []
    # activation patching maps found in the folder
    patch_views = []
    for i, (folder, stem) in enumerate(coll.patching):
        try:
            pmap = circuits.load_patching_map(folder, stem)
            rel = (folder / stem).relative_to(run_dir).as_posix()
            patch_views.append(
                circuits.patching_view(
                    pmap, id=f"interp-cv-patching-{i}", title=f"{TITLES.get(stem, humanise(stem))} — {rel}"
                )
            )
        except Exception as e:  # a report states what it could not show
            coll.missing.append(f"CircuitsVis view of {folder.name}/{stem}: {type(e).__name__}: {e}")
    if patch_views:
        sections.append(Section("Activation patching (CircuitsVis)", circuits.fragment(patch_views), "s-cv-patching"))
        components += patch_views
    # attention patterns of chosen sequences
    if model is False:
        return sections, components
    source = model if model is not None else _default_model(run_dir)
    if source is None:
        coll.missing.append("attention patterns (no checkpoint in the run folder and no model given)")
        return sections, components
    try:
        if isinstance(source, (str, Path)):
            from interp.models.checkpoint import load_checkpoint

            source = load_checkpoint(source, placement=placement)
        seqs = list(sequences) if sequences is not None else _default_sequences(run_dir, source, n_sequences)
        if not seqs:
            coll.missing.append("attention patterns (no sequences: no data/test.txt and none given)")
            return sections, components
        views = circuits.attention_views(source, seqs, max_tokens=max_tokens)
    except Exception as e:  # a report states what it could not show
        coll.missing.append(f"attention patterns: {type(e).__name__}: {e}")
        return sections, components
    where = getattr(source, "path", None)
    from_test = sequences is None and (run_dir / "data" / "test.txt").is_file()
    note = (
        f'<p class="note">Attention patterns (<code>blocks.L.attn.hook_pattern</code>) of {len(seqs)} '
        f"sequence(s){' from data/test.txt' if from_test else ''}"
        f"{f' under {html.escape(str(where))}' if where else ''}, cut to {max_tokens} tokens; one view per layer: "
        f"hover a head to see its pattern, click to fix it.</p>"
    )
    sections.append(Section("Attention patterns (CircuitsVis)", note + circuits.fragment(views), "s-cv-attention"))
    components += views
    return sections, components
