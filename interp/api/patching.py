"""``interp.patch``: activation patching of a task's prompts into their corrupted prompts (a
contrast task's corrupted prompt; a PragWorld original into its alteration), over layer × position
and layer × head, exact or by attribution; the result shows itself in a notebook (heat maps with
the cells whose interval clears the margin, and the CircuitsVis attention of the top heads).
Direct-effect patching (PragWorld §6.1) is a layer sweep: ``interp.sweep(model, task,
kind="direct-effect")``. The API runs the CLI's job (``interp sweep --kind
activation-patching``), so the folder is the CLI's."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from interp.analysis.config.sweep_config import VerdictRule
from interp.analysis.config.sweep_job import SweepJob
from interp.api.model import Model, as_model
from interp.api.provenance import provenance
from interp.api.results import Figure, SavedResult, describe_task
from interp.jobs.task_sweep import run_task_sweep

#: ``over`` → the map it reads first
OVER = {"position": "resid_pre", "head": "heads"}
#: ``kind`` → the job's method
KINDS = {"activation": "exact", "attribution": "attribution"}


@dataclass
class Patching(SavedResult):
    """Activation-patching maps: ``maps`` (``"resid_pre"``: layer × position offset from the last
    token; ``"heads"``: layer × head) of :class:`~interp.analysis.engines.activation_patching.PatchingMap`,
    ``info`` (settings, provenance), ``folder``. :attr:`frame`: one tidy row per (map, layer,
    position or head, example) with ``value``, ``effect``, ``recovered``. :meth:`restored`: the heat
    map (share of the clean − corrupted gap one patched activation restores)."""

    maps: dict[str, Any]
    info: dict[str, Any]
    folder: Path
    over: str = "head"
    model: Model | None = None
    #: the task the maps were computed on (not saved; the attention view reads its first prompt)
    task: Any = None

    @property
    def frame(self) -> pd.DataFrame:
        parts = []
        for comp, m in self.maps.items():
            f = m.frame.copy()
            f.insert(0, "map", comp)
            parts.append(f)
        return pd.concat(parts, ignore_index=True)

    def restored(self, over: str | None = None) -> pd.DataFrame:
        """The heat map of ``over`` (``"head"`` or ``"position"``; default the call's)."""
        return self.maps[_map_of(over or self.over)].restored()

    def top_heads(self, k: int = 6) -> list[tuple[int, int]]:
        """The ``k`` heads whose patching restores the most of the gap (largest |share|)."""
        grid = self.maps["heads"].restored().stack()
        top = grid.abs().sort_values(ascending=False).index[:k]
        return [(int(layer), int(head)) for layer, head in top]

    def plot(self, over: str | None = None) -> Figure:
        """The heat map of ``over`` as drawn in the folder (``patching_<map>.png``)."""
        return Figure(self.folder / f"patching_{_map_of(over or self.over)}.png")

    def show(self, k: int = 6) -> None:
        """In a notebook: the heat map of the call's ``over``, then the attention patterns of the
        ``k`` top heads on the first prompt (CircuitsVis; needs the model, i.e. a result of
        :func:`patch` or :func:`interp.load` with ``model=``)."""
        from IPython.display import HTML, display

        display(self.plot())
        if self.model is None:
            print("(attention view: load with interp.load(folder, model=...) to draw it)")
            return
        display(HTML(self.attention_html(k)))

    def attention_html(self, k: int = 6) -> str:
        """The CircuitsVis attention view of the top ``k`` heads on the first patched prompt (one
        HTML fragment with its script; GQA models read their per-query-head patterns)."""
        import torch

        from interp.viz.circuits import bundle_script, display_token, fragment, head_attention_views

        if self.model is None:
            raise ValueError("the attention view needs the model: interp.load(folder, model=...)")
        tok = self.model.tokenizer
        rows = self.info.get("pair_rows") or [0]
        ids = self._first_prompt_ids(int(rows[0]) if not isinstance(rows[0], list) else int(rows[0][0]))
        tokens = [[display_token(t, True) for t in tok.convert_ids_to_tokens(ids)]]
        views = head_attention_views(
            self.model.bridge, torch.tensor([ids]), tokens, self.top_heads(k), id_prefix="patch-top"
        )
        return bundle_script(views) + fragment(views)

    def _first_prompt_ids(self, row: int) -> list[int]:
        task = self.task
        if task is None:
            raise ValueError("the attention view needs the task the maps were computed on (a result of interp.patch)")
        return list(task.ids[row])

    def recorded_model(self) -> dict[str, Any] | None:
        """The fingerprint of the model the maps were computed on, as the files record it."""
        return next(iter(self.maps.values())).meta.get("model")

    @classmethod
    def read(cls, folder: Path, info: dict[str, Any]) -> Patching:
        """The maps a folder holds (``patching_<map>.csv`` / ``.json``)."""
        from interp.viz.circuits import load_patching_map

        maps = {c: load_patching_map(folder, f"patching_{c}") for c in ("resid_pre", "heads")}
        return cls(maps=maps, info=info, folder=folder, over=info.get("over", "head"))

    def __str__(self) -> str:
        return (
            f"activation patching ({self.info.get('method')}) of {self.info.get('model')}, "
            f"{self.info.get('n_pairs')} pairs; top heads {self.top_heads()}"
        )


def _map_of(over: str) -> str:
    if over not in OVER:
        raise ValueError(f"over must be one of {', '.join(OVER)}, got {over!r}")
    return OVER[over]


def patch(
    model: Model | str,
    task: Any,
    *,
    kind: str = "activation",
    over: str = "head",
    batch_size: int | None = 16,
    rule: VerdictRule | None = None,
    seed: int = 0,
    out: str | Path | None = None,
) -> Patching:
    """Patch each prompt's activations into its corrupted prompt, every layer × position and
    layer × head (``kind="activation"``: exact, TransformerLens's ``patching`` procedure, stacked;
    ``"attribution"``: AtP's first-order estimate); ``over`` picks the map shown first. The cells are
    judged by ``rule`` (family-wise over the map). ``out``: the folder (default a temporary one)."""
    if kind not in KINDS:
        raise ValueError(
            f"kind must be one of {', '.join(KINDS)} (direct-effect patching is a layer sweep: "
            f"interp.sweep(model, task, kind='direct-effect')), got {kind!r}"
        )
    _map_of(over)
    rule = rule or VerdictRule()
    m = as_model(model)
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="interp-patch-"))
    extra = {
        "task": describe_task(task),
        "over": over,
        "provenance": provenance(model=m.fingerprint(), seed=seed),
    }
    job = SweepJob.of(
        kind="activation-patching",
        method="attribution" if kind == "attribution" else "reuse",
        n=None,
        seed=seed,
        batch_size=batch_size,
        rule=rule,
    )
    run_task_sweep(m.source, getattr(task, "source", None), lambda _: task, extra, job, bridge=m.bridge, out=folder)
    info = json.loads((folder / "run.json").read_text())
    result = Patching.read(folder, info)
    result.over, result.model, result.task = over, m, task
    return result


__all__ = ["KINDS", "OVER", "Patching", "patch"]
