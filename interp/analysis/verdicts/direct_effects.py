"""Direct beside total effect: what a layer's MLP output does to the logit difference *by itself*.

Zeroing layer ℓ's MLP output (:func:`~interp.analysis.engines.sweeps.mlp_zero_sweep`) measures its
**total** effect: the change reaches the logits through every later layer, which may compensate
(self-repair: McGrath et al. 2023, "The Hydra effect"; Rushing & Nanda 2024) or amplify it. Its
**direct** effect is the output read straight through the final norm and the unembedding — the
logit lens of ``mlp_out_ℓ`` at the scored (last) position on the correct − foil direction:

    contribution_ℓ = (N(mlp_out_ℓ) / σ) · (w ⊙ (W_U[:, correct] − W_U[:, foil]))
    direct_ℓ = −contribution_ℓ                     (the change when the output is removed)

with ``w`` the final norm's gain (``1 + weight`` on Gemma, whose RMSNorm is offset:
TransformerLens's ``cfg.rmsnorm_uses_offset``), ``N`` its centring (x − mean(x) for LayerNorm, the identity for
RMSNorm) and **σ the final norm's scale frozen from the clean run** (``ln_final.hook_scale``, the
denominator √(mean(N(x)²) + ε) of the clean final residual). The norm's bias and the unembedding's
bias are the same with or without the layer and cancel. Freezing σ makes the direct effect
linear in the output and additive over components; the real norm would rescale the residual when
a component is removed (Rushing & Nanda 2024 measure that alone repairs up to ~30 % of a head's
direct effect). Removing the *last* layer's MLP output changes nothing downstream but the norm,
so with σ frozen its total effect equals its direct effect exactly (the oracle test).

``total − direct`` is what the later layers (and the norm's rescaling) do with the removal:
negative where they amplify it, positive where they repair it. The direct effect is defined for a
logit-difference metric (``logit_diff``: yes/no gold − other, a contrast task's correct − foil);
a P(gold) sweep has no linear readout to compare with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor

from interp.analysis.engines.scoring import to_model_device
from interp.analysis.verdicts.bands import cluster_band
from interp.hooks import Site, hooked, last_positions
from interp.hooks.sites import hf_model
from interp.models.positions import position_ids


def _readout(bridge: Any) -> tuple[Tensor, Tensor, bool]:
    """``(W_U [vocab, d_model], the final norm's gain [d_model], centred)``: the output embedding,
    the norm's gain (its weight; 1 + weight for an offset RMSNorm, Gemma's), and whether the norm
    subtracts the mean (LayerNorm) or not (RMSNorm)."""
    head = hf_model(bridge).get_output_embeddings()
    norm = bridge.ln_final.original_component
    kind = str(getattr(bridge.cfg, "normalization_type", "") or "")
    if kind not in ("LN", "LNPre", "RMS", "RMSPre"):
        raise ValueError(f"the direct effect reads through the final norm: LayerNorm or RMSNorm, got {kind!r}")
    gain = getattr(norm, "weight", None)
    gain = torch.ones(head.weight.shape[1]) if gain is None else gain
    if getattr(bridge.cfg, "rmsnorm_uses_offset", False):
        gain = 1.0 + gain  # Gemma's RMSNorm multiplies by (1 + weight)
    return head.weight, gain, kind.startswith("LN")


def direct_effects(
    bridge: Any,
    inputs: Int[Tensor, "n pos"],
    correct_ids: Sequence[int] | np.ndarray,
    foil_ids: Sequence[int] | np.ndarray,
    attention_mask: Shaped[Tensor, "n pos"] | None = None,
    layers: Sequence[int] | None = None,
    *,
    batch_size: int | None = 64,
) -> Float[np.ndarray, "n layer"]:
    """``direct[example, j]``: the direct effect of removing ``layers[j]``'s MLP output on
    logit(correct) − logit(foil) at each example's last real position, the final norm's scale frozen
    from the clean run (module docstring). One clean forward per chunk; hooks removed on return."""
    n = int(inputs.shape[0])
    lays = list(range(int(bridge.cfg.n_layers))) if layers is None else [int(x) for x in layers]
    correct, foil = np.asarray(correct_ids, dtype=np.int64), np.asarray(foil_ids, dtype=np.int64)
    if correct.shape != (n,) or foil.shape != (n,):
        raise ValueError(f"need one correct and one foil id per example ({n}), got {correct.shape}, {foil.shape}")
    w_u, gain, centred = _readout(bridge)
    out = np.zeros((n, len(lays)))
    size = n if not batch_size else int(batch_size)
    names = [Site(x, "mlp_out").hook_name for x in lays] + ["ln_final.hook_scale"]
    for a in range(0, n, size):
        idx = np.arange(a, min(n, a + size))
        ids = inputs[idx]
        mask = None if attention_mask is None else attention_mask[idx]
        last = torch.full((len(idx),), ids.shape[1] - 1) if mask is None else last_positions(mask)
        rows = torch.arange(len(idx))
        cache: dict[str, Tensor] = {}

        def keep(name: str, cache: dict[str, Tensor] = cache, rows: Tensor = rows, last: Tensor = last) -> Any:
            def hook(act: Tensor, hook: Any) -> None:
                cache[name] = act.detach()[rows.to(act.device), last.to(act.device)].float()

            return hook

        kwargs: dict[str, Any] = {}
        if mask is not None:
            kwargs = {
                "attention_mask": to_model_device(bridge, mask),
                "position_ids": to_model_device(bridge, position_ids(mask)),
            }
        with torch.no_grad(), hooked(bridge, [(m, keep(m)) for m in names]):
            bridge(to_model_device(bridge, ids), **kwargs)
        sigma = cache["ln_final.hook_scale"].reshape(len(idx), 1)
        dev = sigma.device
        u = gain.detach().float().to(dev) * (
            w_u.detach().float().to(dev)[torch.as_tensor(correct[idx], device=dev)]
            - w_u.detach().float().to(dev)[torch.as_tensor(foil[idx], device=dev)]
        )
        for j, x in enumerate(lays):
            m = cache[Site(x, "mlp_out").hook_name]
            if centred:
                m = m - m.mean(dim=-1, keepdim=True)
            out[idx, j] = (-(m / sigma * u).sum(-1)).cpu().numpy()
    return out


def attach_direct(sweep: Any, direct: np.ndarray, layers: Sequence[int]) -> Any:
    """``sweep`` with a ``direct`` column (the per-example direct effect of its layer)."""
    col = {int(x): j for j, x in enumerate(layers)}
    f = sweep.frame
    f["direct"] = direct[f["example"].to_numpy(dtype=int), [col[int(x)] for x in f["layer"]]]
    sweep.meta["direct"] = "logit lens of mlp_out at the last position on correct − foil, final norm scale frozen"
    return sweep


def add_direct_effects(
    verdicts: Any,
    sweep: Any,
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    per_layer: bool = False,
    resample: str = "groups",
    **_: Any,
) -> Any:
    """Join the mean direct effect per layer (``direct_effect``, ``direct_low`` / ``direct_high``:
    the same cluster band as the verdicts, simultaneous over the layers) and ``repair`` = total −
    direct (the mean zero-out effect minus the direct one: what later layers do with the removal)
    to ``verdicts``; ``meta["direct"]`` says how and in words. Needs the sweep's ``direct`` column
    (:func:`attach_direct`)."""
    f = sweep.frame
    wide = f.pivot(index="example", columns="layer", values="direct").sort_index()
    groups = None
    if resample == "groups" and "group" in f.columns:
        groups = f.groupby("example")["group"].first().reindex(wide.index).to_numpy()
    band = cluster_band(
        wide.to_numpy(dtype=float), groups, n_boot=n_boot, confidence=confidence, seed=seed, simultaneous=not per_layer
    )
    d = pd.DataFrame(
        {
            "layer": [int(x) for x in wide.columns],
            "direct_effect": band.estimate,
            "direct_low": band.low,
            "direct_high": band.high,
        }
    )
    fr = verdicts.frame.drop(columns=[c for c in d.columns if c != "layer" and c in verdicts.frame], errors="ignore")
    fr = fr.merge(d, on="layer", how="left")
    fr["repair"] = fr["mean_effect"] - fr["direct_effect"]
    verdicts.frame = fr
    verdicts.meta["direct"] = {
        "definition": "direct effect of removing the layer's MLP output: −(logit lens of mlp_out at the last "
        "position on correct − foil), the final norm's scale frozen from the clean run; repair = "
        "total (zero-out) − direct",
        "words": [direct_words(fr)],
    }
    return verdicts


def direct_words(frame: pd.DataFrame) -> str:
    """One sentence: the layers whose total and direct effects differ most, and which way."""
    top = frame.reindex(frame["repair"].abs().sort_values(ascending=False).index).head(3)
    bits = [
        f"layer {int(r.layer)}: total {r.mean_effect:+.3g}, direct {r.direct_effect:+.3g} "
        f"({'later layers repair' if np.sign(r.repair) != np.sign(r.direct_effect) else 'later layers amplify'} "
        f"{abs(r.repair):.3g})"
        for r in top.itertuples()
    ]
    return (
        "Direct beside total effect on the logit difference (removal; final norm scale frozen): "
        + "; ".join(bits)
        + "."
    )


__all__ = ["add_direct_effects", "attach_direct", "direct_effects", "direct_words"]
