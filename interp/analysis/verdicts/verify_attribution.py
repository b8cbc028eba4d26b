"""Attribution estimates checked against exact measurements (``--verify-top K``): the ``K`` sites
of largest estimated effect measured exactly, for a layer sweep (:func:`verify_layers`) and for an
activation-patching map (:func:`verify_cells`), and the rows as a text table (:func:`verify_text`,
what ``verify.csv`` holds)."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor

from interp.analysis.engines.scoring import Metric
from interp.analysis.engines.sweeps import SweepResult


def verify_layers(
    estimate: SweepResult, k: int, exact: Any, n_boot: int = 2000, seed: int = 0, **rule: Any
) -> list[dict[str, Any]]:
    """``--verify-top K`` for a layer sweep: the ``k`` layers of largest |mean attribution|, each
    measured exactly by ``exact(layers) -> SweepResult`` (same examples). Per layer: ``rank``,
    ``attribution`` and ``exact`` mean effects, ``same_sign``, the ``verdict`` from the estimates
    and ``exact_verdict`` from the exact run (same bootstrap; ``rule``: the verdict settings of
    :func:`~interp.analysis.verdicts.layers.layer_verdicts`, e.g. ``min_effect``). The exact run's
    family is the K verified layers, the estimate's every layer."""
    from interp.analysis.engines.attribution import rank_sites
    from interp.analysis.verdicts.layers import layer_verdicts

    top = rank_sites(estimate, k)
    measured = exact([int(x) for x in top["layer"]])
    ev = layer_verdicts(measured, n_boot=n_boot, seed=seed, **rule).frame.set_index("layer")
    av = layer_verdicts(estimate, n_boot=n_boot, seed=seed, **rule).frame.set_index("layer")
    mean = measured.frame.groupby("layer")["effect"].mean()
    return [
        {
            "rank": int(r.rank),
            "layer": int(r.layer),
            "attribution": float(r.attribution),
            "exact": float(mean[int(r.layer)]),
            "same_sign": bool(np.sign(r.attribution) == np.sign(mean[int(r.layer)])),
            "verdict": str(av.loc[int(r.layer), "verdict"]),
            "exact_verdict": str(ev.loc[int(r.layer), "verdict"]),
        }
        for r in top.itertuples(index=False)
    ]


def verify_cells(
    bridge: Any, estimate: Any, k: int, clean: Tensor, corrupted: Tensor, metric: Metric
) -> list[dict[str, Any]]:
    """``--verify-top K`` for an activation-patching map: the ``k`` cells of largest |mean
    attribution|, each patched exactly (:func:`~interp.analysis.engines.attribution.exact_cells`)."""
    from interp.analysis.engines.attribution import exact_cells, rank_sites

    axis = estimate.axis
    top = rank_sites(estimate, k)
    cells = [(int(r.layer), int(getattr(r, axis))) for r in top.itertuples(index=False)]
    exact = exact_cells(bridge, clean, corrupted, metric, estimate.meta["component"], cells).mean(dim=1)
    return [
        {
            "rank": int(r.rank),
            "layer": c[0],
            axis: c[1],
            "attribution": float(r.attribution),
            "exact": float(e),
            "same_sign": bool(np.sign(r.attribution) == np.sign(float(e))),
        }
        for r, c, e in zip(top.itertuples(index=False), cells, exact.tolist())
    ]


def verify_text(rows: list[dict[str, Any]]) -> str:
    """The ``verify.csv`` rows as an aligned text table."""
    if not rows:
        return ""
    cols = [c for c in rows[0] if c != "rank"]
    lines = ["verified exactly (top |attribution|):", "rank  " + "  ".join(f"{c:>13}" for c in cols)]
    for r in rows:
        cells = [f"{r[c]:>+13.4f}" if isinstance(r[c], float) else f"{str(r[c]):>13}" for c in cols]
        lines.append(f"{r['rank']:>4}  " + "  ".join(cells))
    return "\n".join(lines)


__all__ = ["verify_cells", "verify_layers", "verify_text"]
