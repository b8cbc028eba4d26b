"""Heuristic baselines for the natural dialogue items: what a shortcut would answer.

A model's accuracy on the location-tracking items (:mod:`interp.worlds.dialogue.natural`) means
little alone: a reader that answers "the last place mentioned" is right whenever the last move
was the queried object's. The heuristics below read only an example's ``meta`` (the places the
conversation mentions, in order, and the object's first place), so they are columns beside a
model's results and characterise its errors (Kim & Schuster 2023 report the same controls: the
initial state, and a random choice among the mentioned places):

- ``recent``: the most recently mentioned place;
- ``first``: the first place mentioned;
- ``initial``: where the queried object was first put (the initial state);
- ``random``: one of the mentioned places (distinct), drawn with a seed per example.

A cloze example's heuristic answer is a place; a yes/no example's is " yes" exactly when that
place is the one asked about. :func:`heuristic_frame` gives each example's answers and whether
each is right (equal to ``correct``) or the foil; :func:`heuristic_table` their accuracy, foil
rate and robust accuracy (share of groups whose every example is right) overall, per category
and per flip / invariant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

#: the heuristics, in column order
HEURISTICS = ("recent", "first", "initial", "random")


def _random_place(places: Sequence[str], key: str) -> str | None:
    distinct = list(dict.fromkeys(places))
    if not distinct:
        return None
    digest = hashlib.sha256(key.encode()).digest()
    return distinct[int.from_bytes(digest[:8], "little") % len(distinct)]


def heuristic_places(meta: Mapping[str, Any], key: str = "") -> dict[str, str | None]:
    """Each heuristic's place for one example (module docstring); ``key`` seeds ``random``
    (the same key → the same draw). Needs ``meta["mentions"]`` and ``meta["initial"]``."""
    if "mentions" not in meta or "initial" not in meta:
        raise ValueError(
            "a dialogue heuristic needs the example's meta['mentions'] and meta['initial'] "
            f"(written by interp data dialogue); got keys {sorted(meta)}"
        )
    mentions = list(meta["mentions"])
    return {
        "recent": mentions[-1] if mentions else None,
        "first": mentions[0] if mentions else None,
        "initial": meta["initial"],
        "random": _random_place(mentions, key),
    }


def _as_answer(place: str | None, meta: Mapping[str, Any]) -> str | None:
    if place is None:
        return None
    if meta.get("form") == "yesno":
        return " yes" if place == meta.get("ask_place") else " no"
    return " " + place


def heuristic_frame(examples: Sequence[Any], seed: int = 0) -> pd.DataFrame:
    """One row per example: ``group``, ``category``, ``effect``, ``correct``, ``foil`` and, for
    each heuristic ``h``, ``h`` (its answer as a token text), ``h_right`` and ``h_foil`` (equal
    to the correct / the foil answer). ``examples``: contrast examples of ``interp data dialogue``."""
    rows = []
    for i, e in enumerate(examples):
        meta = e.meta
        row: dict[str, Any] = {
            "group": e.group,
            "category": meta.get("category", e.template),
            "effect": meta.get("effect"),
            "correct": e.correct,
            "foil": e.foil,
        }
        for h, place in heuristic_places(meta, f"{seed}:{i}:{e.group}").items():
            answer = _as_answer(place, meta)
            row[h], row[f"{h}_right"], row[f"{h}_foil"] = answer, answer == e.correct, answer == e.foil
        rows.append(row)
    return pd.DataFrame(rows)


def _subsets(frame: pd.DataFrame) -> list[tuple[str, np.ndarray]]:
    out = [("all", np.ones(len(frame), bool))]
    out += [(str(c), (frame["category"] == c).to_numpy()) for c in dict.fromkeys(frame["category"])]
    out += [
        (e.lower(), (frame["effect"] == e).to_numpy()) for e in ("Flip", "Invariant") if (frame["effect"] == e).any()
    ]
    return out


def robust(right: Sequence[bool] | np.ndarray, groups: Sequence[Any] | np.ndarray) -> float:
    """Share of groups whose every row is right (PragWorld's robust accuracy, as a fraction)."""
    by = pd.Series(np.asarray(right, bool)).groupby(np.asarray(groups, dtype=object)).all()
    return float(by.mean()) if len(by) else float("nan")


def heuristic_table(
    frame: pd.DataFrame, extra: Mapping[str, Callable[[pd.DataFrame], np.ndarray]] | None = None
) -> pd.DataFrame:
    """Per subset (``all``, each category, ``flip``, ``invariant``): ``n``, ``groups`` and for each
    heuristic its ``accuracy``, ``foil_rate`` and ``robust`` accuracy (the robust column only
    for ``all``: a group's categories are split across the other subsets). ``extra``: more
    columns of right/wrong, e.g. ``{"model": lambda f: f["model_right"]}`` to put a model's
    per-example rightness beside the heuristics'."""
    cols = {h: (frame[f"{h}_right"].to_numpy(bool), frame[f"{h}_foil"].to_numpy(bool)) for h in HEURISTICS}
    for name, fn in (extra or {}).items():
        right = np.asarray(fn(frame), bool)
        cols[name] = (right, ~right)  # a two-way choice: wrong is the foil
    rows = []
    for name, mask in _subsets(frame):
        row: dict[str, Any] = {"subset": name, "n": int(mask.sum()), "groups": int(frame.loc[mask, "group"].nunique())}
        for h, (right, foil) in cols.items():
            row[f"{h}_accuracy"] = float(right[mask].mean()) if mask.any() else float("nan")
            row[f"{h}_foil_rate"] = float(foil[mask].mean()) if mask.any() else float("nan")
            row[f"{h}_robust"] = robust(right, frame["group"].to_numpy()) if name == "all" else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


__all__ = ["HEURISTICS", "heuristic_frame", "heuristic_places", "heuristic_table", "robust"]
