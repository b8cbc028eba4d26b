"""How well a model tracks the natural dialogues: accuracy, logit difference and robust / flip /
invariant accuracy per alteration, with group-bootstrap intervals and the heuristic baselines
beside them (issue 39's baseline and fine-tuning tables).

The examples are :func:`interp.worlds.dialogue.natural.dialogue_examples`' (each ``meta`` holds
the category, the effect, the places mentioned and the object's first place). One logit
difference per example (correct − foil at the last prompt token, :func:`evaluate_dialogue` runs
the forwards; :func:`score_dialogue` takes them given) makes each example right when it is > 0.
Per subset — ``all``, each category (``Original``, the seven alterations, ``Paraphrase``),
``flip`` and ``invariant`` — the table holds

- ``accuracy`` and ``logit_diff``: means over the subset's rows;
- ``robust``: the share of the subset's groups whose rows of the subset *and* whose original are
  all right (PragWorld's robust accuracy restricted to a category, as
  :func:`interp.metrics.pragworld.score_pragworld` restricts it; for ``all`` every row of the
  group; for ``Original`` it is the originals' accuracy);
- ``flip`` / ``invariant``: accuracy over the subset's flip / invariant alterations;
- each heuristic's accuracy and robust accuracy (:mod:`interp.metrics.dialogue_heuristics`).

Every interval is the percentile interval of whole-group resamples
(:func:`~interp.analysis.evaluation.contrast.cluster_percentile`; robust: one value per group). The
headline numbers (:meth:`DialogueScore.summary`) are :func:`~interp.metrics.pragworld.score_pragworld`'s
on the same rightness, so robust accuracy is defined once. :func:`paired_difference` compares two
scores of the same examples (two fine-tuning arms) group by group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from jaxtyping import Float

from interp.analysis.evaluation.contrast import cluster_percentile, contrast_scores
from interp.metrics.dialogue_heuristics import HEURISTICS, heuristic_frame
from interp.metrics.pragworld import score_pragworld
from interp.results import save_result

#: the category of a group's unaltered row (:data:`interp.worlds.dialogue.natural.ORIGINAL`)
ORIGINAL = "Original"


@dataclass
class DialogueScore:
    """A scored set of dialogue examples (module docstring): ``frame`` one row per example
    (``group``, ``category``, ``effect``, ``logit_diff``, ``right`` and each heuristic's
    ``<h>_right``), ``table`` one row per subset, ``summary`` the headline numbers
    (:func:`~interp.metrics.pragworld.score_pragworld`'s, in percent) and ``settings``."""

    frame: pd.DataFrame
    table: pd.DataFrame
    headline: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)

    def row(self, subset: str = "all") -> dict[str, Any]:
        """The table's row of ``subset`` as a dict."""
        hit = self.table[self.table["subset"] == subset]
        if hit.empty:
            raise KeyError(f"no subset {subset!r}; there are {', '.join(self.table['subset'])}")
        return hit.iloc[0].to_dict()

    def verdict(self) -> str:
        """Whether the model can do the task, measured: it *can* when its accuracy and its accuracy
        on flips are above chance (the interval's low end > 50 %) and its robust accuracy is above
        every heuristic's; the sentence gives the numbers."""
        r, flips = self.row("all"), self.row("flip")
        best = max(r[f"{h}_robust"] for h in HEURISTICS)
        can = r["accuracy_lo"] > 0.5 and flips["accuracy_lo"] > 0.5 and r["robust"] > best

        def pct(row: dict[str, Any], k: str) -> str:
            return f"{100 * row[k]:.0f}% [{100 * row[k + '_lo']:.0f}, {100 * row[k + '_hi']:.0f}]"

        return (
            f"{'can' if can else 'cannot'} do the task as measured: accuracy {pct(r, 'accuracy')}, flips "
            f"{pct(flips, 'accuracy')}, robust {pct(r, 'robust')} (best heuristic robust {100 * best:.0f}%; "
            "'can' needs accuracy and flips above 50% and robust above every heuristic)"
        )

    def summary(self) -> dict[str, Any]:
        """The headline numbers (accuracy, robust / flip / invariant accuracy with their intervals)."""
        return self.headline

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the summary, the table as records and the settings."""
        records = [{k: _json(v) for k, v in r.items()} for r in self.table.to_dict("records")]
        return {"summary": self.headline, "table": records, "settings": self.settings, "verdict": self.verdict()}

    def save(self, folder: str | Path, stem: str = "dialogue_eval") -> Path:
        """``<stem>.json`` (summary and settings), ``<stem>.csv`` (per example), ``<stem>_table.csv``."""
        return save_result(
            folder, stem, {**self.headline, "settings": self.settings}, **{"": self.frame, "table": self.table}
        )

    def markdown(self, heuristics: bool = True) -> str:
        """The table as Markdown, percentages ``mean [low, high]``; the heuristics' accuracy (and,
        in the ``all`` row, robust accuracy) as the last columns."""
        head = ["subset", "n", "groups", "accuracy %", "logit diff", "robust %", "flip %", "invariant %"]
        if heuristics:
            head += list(HEURISTICS)
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for _, r in self.table.iterrows():
            cells = [str(r["subset"]), str(int(r["n"])), str(int(r["groups"]))]
            cells += [_cell(r, "accuracy", 100.0), _cell(r, "logit_diff", 1.0), _cell(r, "robust", 100.0)]
            cells += [_cell(r, "flip", 100.0), _cell(r, "invariant", 100.0)]
            if heuristics:
                for h in HEURISTICS:
                    acc, rob = r[f"{h}_accuracy"], r[f"{h}_robust"]
                    text = f"{100 * acc:.0f}"
                    cells.append(text + (f" (robust {100 * rob:.0f})" if r["subset"] == "all" else ""))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _json(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _cell(r: Any, name: str, k: float) -> str:
    m, lo, hi = float(r[name]), float(r[f"{name}_lo"]), float(r[f"{name}_hi"])
    if math.isnan(m):
        return "–"
    digits = 0 if k == 100 else 2
    if math.isnan(lo):
        return f"{k * m:.{digits}f}"
    return f"{k * m:.{digits}f} [{k * lo:.{digits}f}, {k * hi:.{digits}f}]"


def _subsets(frame: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    cats = list(dict.fromkeys(frame["category"]))
    cats = sorted(cats, key=lambda c: (c != ORIGINAL, c == "Paraphrase"))  # Original first, Paraphrase last
    out = [("all", np.ones(len(frame), bool))] + [(c, (frame["category"] == c).to_numpy()) for c in cats]
    eff = frame["effect"].astype(str).str.lower()
    return out + [(e, (eff == e).to_numpy()) for e in ("flip", "invariant") if (eff == e).any()]


def subset_robust(right: np.ndarray, frame: pd.DataFrame, mask: np.ndarray) -> pd.Series:
    """Per group with a row in ``mask``: whether its rows in ``mask`` and its original are all right."""
    original = (frame["category"] == ORIGINAL).to_numpy()
    groups = frame["group"].to_numpy(dtype=object)
    keep = np.isin(groups, np.unique(groups[mask].astype(str)).astype(object)) & (mask | original)
    return pd.Series(right[keep]).groupby(groups[keep]).all()


def _interval(values: np.ndarray, groups: np.ndarray, n_boot: int, confidence: float, seed: int) -> tuple:
    if len(values) == 0:
        return math.nan, math.nan, math.nan, 0
    est, lo, hi, g = cluster_percentile(values[:, None], groups, n_boot=n_boot, confidence=confidence, seed=seed)
    return float(est[0]), float(lo[0]), float(hi[0]), g


def _table(frame: pd.DataFrame, n_boot: int, confidence: float, seed: int) -> pd.DataFrame:
    right = frame["right"].to_numpy(bool)
    groups = frame["group"].astype(str).to_numpy()
    eff = frame["effect"].astype(str).str.lower().to_numpy()
    rows = []
    for name, mask in _subsets(frame):
        row: dict[str, Any] = {"subset": name, "n": int(mask.sum())}
        acc = _interval(right[mask].astype(float), groups[mask], n_boot, confidence, seed)
        row["groups"] = acc[3]
        row["accuracy"], row["accuracy_lo"], row["accuracy_hi"] = acc[:3]
        ld = _interval(frame["logit_diff"].to_numpy(float)[mask], groups[mask], n_boot, confidence, seed)
        row["logit_diff"], row["logit_diff_lo"], row["logit_diff_hi"] = ld[:3]
        per_group = subset_robust(right, frame, mask)
        rob = _interval(per_group.to_numpy(float), per_group.index.astype(str).to_numpy(), n_boot, confidence, seed)
        row["robust"], row["robust_lo"], row["robust_hi"] = rob[:3]
        for e in ("flip", "invariant"):
            m = mask & (eff == e)
            row[f"n_{e}"] = int(m.sum())
            row[e], row[f"{e}_lo"], row[f"{e}_hi"] = _interval(
                right[m].astype(float), groups[m], n_boot, confidence, seed
            )[:3]
        for h in HEURISTICS:
            h_right = frame[f"{h}_right"].to_numpy(bool)
            row[f"{h}_accuracy"] = float(h_right[mask].mean()) if mask.any() else math.nan
            row[f"{h}_robust"] = float(subset_robust(h_right, frame, mask).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def _pragworld_summary(frame: pd.DataFrame, n_boot: int, confidence: float, seed: int) -> dict[str, Any]:
    """score_pragworld on the rightness: each row a 'yes' question answered yes when right."""
    from interp.worlds.dialogue.export import CATEGORY_KEYS

    codes = {g: i for i, g in enumerate(dict.fromkeys(frame["group"]))}
    altered = (frame["category"] != ORIGINAL).to_numpy()
    rows = pd.DataFrame(
        {
            "group": frame["group"].map(codes).to_numpy(),
            "gold": 1,
            "altered": altered,
            "effect": [str(e).lower() if a else None for e, a in zip(frame["effect"], altered)],
            "category": [CATEGORY_KEYS.get(c, c) if a else None for c, a in zip(frame["category"], altered)],
            "length_bucket": "all",
        }
    )
    preds = np.where(frame["right"].to_numpy(bool), "yes", "no")
    score = score_pragworld(rows, preds, n_boot=n_boot, seed=seed, level=confidence)
    keep = ("robust", "robust_ci_low", "robust_ci_high", "original", "altered", "flip", "invariant", "total")
    out = {k: score.values.get(k) for k in keep}
    for k in ("original", "altered", "flip", "invariant", "total"):
        out[f"{k}_ci_low"], out[f"{k}_ci_high"] = score.values.get(f"{k}_ci_low"), score.values.get(f"{k}_ci_high")
    out.update(groups=score.values["groups"], rows=score.values["rows"], robust_groups=score.values["robust_groups"])
    return out


def score_dialogue(
    examples: Sequence[Any],
    logit_diff: Float[np.ndarray, " example"] | Sequence[float],
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> DialogueScore:
    """Score dialogue ``examples`` (contrast examples of ``interp data dialogue``, cloze form) from
    each one's ``logit_diff`` (correct − foil; right when > 0): the per-example frame with the
    heuristics' answers, the per-subset table and the summary (module docstring). ``n_boot``
    group resamples seeded by ``seed`` give each ``confidence`` interval."""
    ld = np.asarray(logit_diff, dtype=float)
    if ld.shape != (len(examples),):
        raise ValueError(f"need one logit difference per example: got {ld.shape} for {len(examples)} examples")
    if any(e.meta.get("form", "cloze") != "cloze" for e in examples):
        raise ValueError("score_dialogue scores the cloze form (a place after the conversation); got yes/no examples")
    frame = heuristic_frame(examples, seed=seed)
    frame.insert(0, "example", np.arange(len(examples)))
    frame["logit_diff"] = ld
    frame["right"] = ld > 0
    table = _table(frame, n_boot, confidence, seed)
    settings = {"n_boot": n_boot, "confidence": confidence, "seed": seed, "interval": "percentile, whole groups"}
    return DialogueScore(frame, table, _pragworld_summary(frame, n_boot, confidence, seed), settings)


def evaluate_dialogue(
    model: Any, task: Any, *, batch_size: int = 16, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> DialogueScore:
    """Run ``task`` (a :class:`~interp.tasks.ContrastTask` of dialogue examples, e.g.
    ``interp.contrast(model, examples)``) through ``model`` (an API model or a bridge) and score
    it (:func:`score_dialogue`)."""
    bridge = getattr(model, "bridge", model)
    ld, _ = contrast_scores(bridge, task, batch_size)
    score = score_dialogue(task.examples, ld, n_boot=n_boot, confidence=confidence, seed=seed)
    score.settings.update(task=task.settings(), batch_size=batch_size)
    return score


def paired_difference(
    a: Sequence[DialogueScore] | DialogueScore,
    b: Sequence[DialogueScore] | DialogueScore,
    quantity: str = "robust",
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """``a − b`` in ``quantity`` (``robust``, ``accuracy`` or ``logit_diff``) on the same examples,
    paired by group: each group's value averaged over the scores given (several seeds of one arm),
    the difference per group, its mean and the percentile interval of whole-group resamples.
    ``diff``, ``lo``, ``hi``, ``a``, ``b``, ``groups``."""
    if quantity not in ("robust", "accuracy", "logit_diff"):
        raise ValueError(f"quantity must be robust, accuracy or logit_diff, got {quantity!r}")

    def per_group(scores: Sequence[DialogueScore] | DialogueScore) -> pd.Series:
        scores = [scores] if isinstance(scores, DialogueScore) else list(scores)
        if not scores:
            raise ValueError("paired_difference needs at least one score on each side")
        cols = []
        for s in scores:
            by = s.frame.assign(right=s.frame["right"].astype(float)).groupby("group")
            col = "logit_diff" if quantity == "logit_diff" else "right"
            cols.append(by[col].min() if quantity == "robust" else by[col].mean())
        return pd.concat(cols, axis=1).mean(axis=1)

    ga, gb = per_group(a), per_group(b)
    if set(ga.index) != set(gb.index):
        raise ValueError("paired_difference needs scores of the same examples (their groups differ)")
    gb = gb.reindex(ga.index)
    diff = (ga - gb).to_numpy(float)
    d, lo, hi, g = _interval(diff, ga.index.astype(str).to_numpy(), n_boot, confidence, seed)
    return {"diff": d, "lo": lo, "hi": hi, "a": float(ga.mean()), "b": float(gb.mean()), "groups": g}


def arm_table(arms: Mapping[str, Sequence[DialogueScore]], quantity: str = "accuracy") -> pd.DataFrame:
    """One row per subset, one column per arm (e.g. fine-tuning arms, each a list of seeds' scores
    of the same examples): ``quantity`` (``accuracy``, ``robust``, ``logit_diff``, ``flip``,
    ``invariant``) averaged over the arm's seeds; ``<arm> sd`` its spread over seeds (with more than one)."""
    cols: dict[str, pd.Series] = {}
    for arm, scores in arms.items():
        if not scores:
            continue
        values = pd.concat([s.table.set_index("subset")[quantity] for s in scores], axis=1)
        cols[arm] = values.mean(axis=1)
        if len(scores) > 1:
            cols[f"{arm} sd"] = values.std(axis=1, ddof=1)
    return pd.DataFrame(cols)


def control_layers(harmful: Sequence[int], useful: Sequence[int], n_layers: int, seed: int = 0) -> list[int]:
    """A random-layer control for harmful-layer suppression: as many layers as ``harmful`` (two
    when none, centred on the thirds of the depth), each drawn (seeded) among the layers that are
    neither harmful nor useful within 3 of one harmful layer (anywhere when none is that near;
    useful ones too when no other is left)."""
    rng = np.random.default_rng(seed)
    free = [x for x in range(n_layers) if x not in harmful and x not in useful]
    free = free or [x for x in range(n_layers) if x not in harmful]
    out: list[int] = []
    for h in list(harmful) or [n_layers // 3, 2 * n_layers // 3]:
        near = [x for x in free if abs(x - h) <= 3 and x not in out] or [x for x in free if x not in out]
        if near:
            out.append(int(near[int(rng.integers(len(near)))]))
    return sorted(out)


def paper_rule_layers(rows: pd.DataFrame, k: int = 2) -> pd.DataFrame:
    """PragWorld's own rule for harmful layers (§6.2: a layer is harmful when zeroing its MLP raises
    the score), read off point estimates: ``rows`` are a sweep's per-row effects (``layer``,
    ``effect``; e.g. :attr:`interp.Sweep.frame` of the zero removal, flip and invariant rows
    together), pooled per layer with every row weighted alike; the ``k`` largest *positive* pooled
    effects are marked ``chosen``. No interval is involved — that is the paper's rule, not interp's
    calibrated verdicts (:doc:`/concepts/verdicts`)."""
    missing = {"layer", "effect"} - set(rows.columns)
    if missing:
        raise ValueError(f"paper_rule_layers needs the columns layer and effect; missing {sorted(missing)}")
    pooled = rows.groupby("layer")["effect"].agg(["mean", "size"])
    frame = pooled.rename(columns={"mean": "pooled_effect", "size": "n"}).reset_index()
    frame = frame.sort_values("pooled_effect", ascending=False, kind="stable").reset_index(drop=True)
    frame["chosen"] = False
    frame.loc[frame[frame["pooled_effect"] > 0].head(k).index, "chosen"] = True
    return frame


def alteration_effects(
    rows: pd.DataFrame, *, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """A sweep's effects per alteration: ``rows`` as :attr:`interp.Sweep.frame` (``removal``,
    ``layer``, ``category``, ``group``, ``effect``) → one row per (removal, category, layer) with
    ``n``, ``groups``, ``mean_effect`` and a percentile interval of whole-group resamples. The
    intervals are per cell (not family-wise over layers as the sweep's verdicts are): a description
    of where each alteration's effect lies, not a verdict."""
    missing = {"removal", "layer", "category", "group", "effect"} - set(rows.columns)
    if missing:
        raise ValueError(f"alteration_effects needs a sweep's frame; missing columns {sorted(missing)}")
    out = []
    for (removal, category, layer), f in rows.groupby(["removal", "category", "layer"], sort=True):
        est, lo, hi, g = _interval(
            f["effect"].to_numpy(float), f["group"].astype(str).to_numpy(), n_boot, confidence, seed
        )
        out.append(
            {
                "removal": removal,
                "category": category,
                "layer": int(layer),
                "n": len(f),
                "groups": g,
                "mean_effect": est,
                "ci_low": lo,
                "ci_high": hi,
            }  # fmt: skip
        )
    return pd.DataFrame(out)


def alteration_verdicts(
    rows: pd.DataFrame, *, margin: float = 0.1, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> pd.DataFrame:
    """Calibrated verdicts per alteration: for each removal of ``rows`` (a sweep's frame, as
    :func:`alteration_effects` takes; ``example`` too), every (category, layer) cell judged at once —
    the layer verdicts' statistic (:func:`~interp.analysis.verdicts.bands.cluster_band`: studentized
    bootstrap of whole groups, a max-|t| band simultaneous over *all* cells of the removal, so over
    layers and alterations together) against ±``margin`` (harmful: removing the layer raises the
    score by more than the margin, :func:`~interp.analysis.verdicts.layers.classify`). One row per
    (removal, category, layer): ``n``, ``groups``, ``mean_effect``, ``band_low`` / ``band_high``,
    ``verdict``. Where :func:`alteration_effects` describes each cell alone, this is the family-wise
    reading: a cell called harmful here is not one of the ~5 % that per-cell intervals flag by chance."""
    from interp.analysis.verdicts.bands import cluster_band
    from interp.analysis.verdicts.layers import classify

    missing = {"removal", "layer", "category", "group", "effect", "example"} - set(rows.columns)
    if missing:
        raise ValueError(f"alteration_verdicts needs a sweep's frame; missing columns {sorted(missing)}")
    out = []
    for removal, f in rows.groupby("removal", sort=True):
        # one column per (alteration, layer); an example has values only in its own alteration's columns
        wide = f.pivot_table(index="example", columns=["category", "layer"], values="effect", aggfunc="first")
        groups = f.groupby("example")["group"].first().reindex(wide.index).astype(str).to_numpy()
        band = cluster_band(wide.to_numpy(float), groups, n_boot=n_boot, confidence=confidence, seed=seed)
        verdicts = classify(band.low, band.high, margin)
        for j, (category, layer) in enumerate(wide.columns):
            has = ~np.isnan(wide.iloc[:, j].to_numpy(float))
            out.append(
                {
                    "removal": removal,
                    "category": category,
                    "layer": int(layer),
                    "n": int(has.sum()),
                    "groups": len(set(groups[has])),
                    "mean_effect": float(band.estimate[j]),
                    "band_low": float(band.low[j]),
                    "band_high": float(band.high[j]),
                    "verdict": verdicts[j],
                }  # fmt: skip
            )
    return pd.DataFrame(out)


__all__ = [
    "DialogueScore",
    "alteration_effects",
    "alteration_verdicts",
    "arm_table",
    "control_layers",
    "evaluate_dialogue",
    "paired_difference",
    "paper_rule_layers",
    "score_dialogue",
    "subset_robust",
]
