"""Does a model have signal on PragWorld's yes/no questions? AUC of its label-prompt P(yes) against gold.

Issue 30, item 6. Reads the ``responses.jsonl`` that ``interp pragworld eval --prompt label`` writes
(``p_yes``, ``expected_response``, ``group``, the alteration category) and prints the AUC of P(yes)
for gold yes vs gold no (:func:`interp.stats.rank_auc`; 0.5 = no signal), overall and per alteration
category (originals as ``original``), with a 95 % percentile interval from resampling the groups
(conversations) 2,000 times, seeded. A model that answers "no" to every row can still rank the
rows: AUC reads the ranking, not the threshold.

    M=$(interp models get smollm2-135m-instruct | tail -1)
    interp pragworld eval --model "$M" --data ../shared/data/pragworld/Manual_Dataset_500_Final.csv \\
        --prompt label --chat-template off --out runs/smollm2_label_off
    python experiments/smollm2_pragworld_signal.py runs/smollm2_label_off/responses.jsonl [more.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from interp.datasets.pragworld.data import normalise_category
from interp.stats import rank_auc


def category(row: dict) -> str:
    """The alteration's category key (the published cells normalised), ``original`` for originals."""
    if not row.get("perturbed"):
        return "original"
    key, _ = normalise_category(str((row.get("perturbation") or {}).get("category", "-")))
    return key or "original"


def load(path: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{path}: no rows")
    missing = [k for k in ("p_yes", "expected_response", "group") if k not in rows[0]]
    if missing:
        raise SystemExit(f"{path}: not a label-prompt responses file (missing {missing}); run --prompt label")
    f = pd.DataFrame(
        {
            "p_yes": [r["p_yes"] for r in rows],
            "gold": [str(r["expected_response"]).strip().lower() == "yes" for r in rows],
            "group": [r["group"] for r in rows],
            "category": [category(r) for r in rows],
        }
    )
    return f


def auc_interval(f: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """AUC with a 95 % percentile interval over resampled groups."""
    est = rank_auc(f.p_yes, f.gold)
    groups = f.group.unique()
    by = {g: f[f.group == g] for g in groups}
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        pick = pd.concat([by[g] for g in rng.choice(groups, size=len(groups))])
        boots.append(rank_auc(pick.p_yes, pick.gold))
    boots = np.array([b for b in boots if not np.isnan(b)])
    if len(boots) < n_boot / 2:
        return est, float("nan"), float("nan")
    return est, float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("responses", nargs="+", type=Path, help="responses.jsonl of interp pragworld eval --prompt label")
    p.add_argument("--n-boot", type=int, default=2000, help="group resamples (default 2000)")
    args = p.parse_args(argv)
    print("| responses | rows | category | gold yes / no | mean P(yes) on gold yes / no | AUC [95 %] |")
    print("|---|---|---|---|---|---|")
    for path in args.responses:
        f = load(path)
        parts = [("all", f)] + [(c, g) for c, g in f.groupby("category", sort=True)]
        for name, g in parts:
            a, lo, hi = auc_interval(g, args.n_boot)
            yes, no = g[g.gold], g[~g.gold]
            print(
                f"| {path.parent.name} | {len(g)} | {name} | {len(yes)} / {len(no)} | "
                f"{yes.p_yes.mean():.3f} / {no.p_yes.mean():.3f} | {a:.3f} [{lo:.3f}, {hi:.3f}] |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
