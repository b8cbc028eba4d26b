"""Vafa et al. (2024), Table 1 and Table 2 at small scale, end to end: what ``experiments/table1.py`` runs.

Three GPT-2s of one size are trained on one synthetic city from three traversal distributions
(:data:`KINDS`: shortest paths, noisy shortest paths, random walks) with the same token budget
(:func:`interp.worlds.split.sample_token_budget`) and steps, each after a short-routes curriculum
(:func:`interp.jobs.experiment.train_curriculum`). Each, an untrained model, the ideal predictors of
the random-walk and shortest-path data and the true world model are scored on held-out routes of
their own traversal (:func:`interp.metrics.table.evaluate_lm`: next-token test, probe, Myhill–Nerode
with the ``exact`` and ``sampled`` estimators) and by detours (:func:`interp.metrics.navigation.detour_test`).

Writes ``cfg.out``: ``table1_{exact,sampled}.{csv,md}``, ``detours.{csv,md}``, ``results.json`` and the
figure (:func:`interp.viz.tables.draw_table1`). Training resumes from ``<out>/<kind>/last`` when present.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.jobs.experiment import CurriculumConfig, train_curriculum
from interp.metrics.navigation import detour_test, pairs_from_sequences
from interp.metrics.table import evaluate_lm, results_table, save_table, to_markdown
from interp.models import ModelConfig, build_gpt2, load_checkpoint, save_checkpoint
from interp.models.lm import BridgeLM, IdealLM, WorldLM
from interp.results import write_json
from interp.train import TrainConfig, train
from interp.viz.tables import detour_markdown, draw_table1
from interp.worlds.encoding import encode_sequences
from interp.worlds.split import sample_token_budget, split_sequences
from interp.worlds.streets import StreetsWorld, SyntheticCityConfig, TraversalConfig

#: the three traversal distributions a model is trained on (Vafa et al., App. F)
KINDS = ("shortest_paths", "noisy_shortest_paths", "random_walks")
#: each traversal's name in the tables
LABELS = {
    "shortest_paths": "shortest paths",
    "noisy_shortest_paths": "noisy shortest paths",
    "random_walks": "random walks",
}


@dataclass
class Table1Config:
    """Settings of :func:`run_table1` (the options of ``experiments/table1.py``, same names and defaults).

    ``rows`` × ``cols``: the city; ``tokens``: training tokens per model; ``steps`` /
    ``tokens_per_step``: training (the batch is ``tokens_per_step`` / mean route length);
    ``curriculum``: ``MAX_TOKENS:STEPS`` stages before it (:func:`parse_curriculum`; None: 23:1000,43:1000,
    quick 23:100,43:100; ``""``: none); ``max_directions``: route length cap; ``pairs``: Myhill–Nerode
    state pairs; ``routes``: origin–destination pairs for detours; ``max_nodes``: the exact estimator's
    suffix-tree cap; ``quick``: budget 150k tokens, 300 steps, 60 pairs, 100 routes (:meth:`resolved`)."""

    out: str = "runs/table1"
    rows: int = 8
    cols: int = 8
    tokens: int = 1_600_000
    steps: int = 3000
    tokens_per_step: int = 2048
    curriculum: str | None = None
    max_directions: int = 60
    pairs: int = 300
    routes: int = 300
    max_nodes: int = 1024
    seed: int = 0
    quick: bool = False

    def resolved(self) -> Table1Config:
        """With ``quick`` the smaller budget; the default curriculum filled in (one given is kept)."""
        if self.quick:
            self.tokens, self.steps, self.pairs, self.routes = 150_000, 300, 60, 100
        if self.curriculum is None:
            self.curriculum = "23:100,43:100" if self.quick else "23:1000,43:1000"
        return self


def parse_curriculum(text: str) -> CurriculumConfig:
    """``"23:1000,43:1000"`` → stages of at most 23 then 43 tokens, 1,000 steps each; ``""``: no stage."""
    try:
        stages = [tuple(map(int, st.split(":"))) for st in text.split(",") if st]
        if any(len(st) != 2 for st in stages):
            raise ValueError
    except ValueError:
        raise ValueError(f"curriculum {text!r}: expected MAX_TOKENS:STEPS stages separated by commas") from None
    return CurriculumConfig(max_tokens=tuple(m for m, _ in stages), steps=tuple(n for _, n in stages))


def run_table1(cfg: Table1Config, figure: str | Path, say: Callable[[str], Any] = print) -> dict[str, pd.DataFrame]:
    """Train, score and write as the module docstring says; the figure goes to ``figure``, progress to
    ``say``. Returns the Table 1 frames by estimator (``exact``, ``sampled``)."""
    cfg = cfg.resolved()
    figure = Path(figure)
    curriculum = parse_curriculum(cfg.curriculum or "")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    city = SyntheticCityConfig(rows=cfg.rows, cols=cfg.cols, seed=cfg.seed)
    worlds = {
        k: StreetsWorld.from_city(city, TraversalConfig(kind=k, max_directions=cfg.max_directions)) for k in KINDS
    }
    world = worlds["random_walks"]  # all three share one DFA; only the traversals differ
    mcfg = ModelConfig(n_layer=4, d_model=128, n_head=4, n_ctx=cfg.max_directions + 4, seed=cfg.seed)
    say(f"city: {world.describe()}; model {mcfg}")

    data: dict[str, tuple[list[list[str]], list[list[str]]]] = {}
    lms: dict[str, Any] = {}
    own_test: dict[str, list[list[str]]] = {}
    for k in KINDS:
        seqs = sample_token_budget(worlds[k], cfg.tokens, cfg.seed)
        tr, te = split_sequences(world, seqs, 0.1, cfg.seed)
        mean_len = float(np.mean([len(s) + 1 for s in tr]))
        batch = max(4, round(cfg.tokens_per_step / mean_len))
        data[k] = (tr, te)
        tcfg = TrainConfig(
            steps=cfg.steps,
            batch_size=batch,
            lr=2e-3,
            min_lr=2e-5,
            warmup_steps=50,
            eval_every=max(1, cfg.steps // 4),
            checkpoint_every=0,
            seed=cfg.seed,
        )
        say(
            f"\n[{LABELS[k]}] {len(tr)} train / {len(te)} test routes, mean length {mean_len:.1f}, "
            f"batch {batch}, {cfg.steps} steps"
        )
        model = build_gpt2(world.vocab, mcfg)
        tr_ids, te_ids = (encode_sequences(x, world.vocab, mcfg.n_ctx) for x in (tr, te))
        train_curriculum(
            model,
            tr_ids,
            te_ids,
            curriculum,
            tcfg,
            world.vocab.pad_id,
            out / k,
            log=lambda line: say("  " + line),
        )
        res = train(model, tr_ids, te_ids, tcfg, out / k, save_model_fn=lambda m, p: save_checkpoint(m, world, p))
        say(f"  best held-out loss {res.best_eval_loss:.4f} at step {res.best_step}")
        lms[LABELS[k]] = BridgeLM(load_checkpoint(out / k / "best").bridge, world.vocab)
        own_test[LABELS[k]] = te
    save_checkpoint(build_gpt2(world.vocab, mcfg), world, out / "untrained")
    ideal = {f"ideal: {LABELS[k]}": IdealLM(worlds[k]) for k in ("shortest_paths", "random_walks")}
    lms = {
        "untrained transformer": BridgeLM(load_checkpoint(out / "untrained").bridge, world.vocab),
        **lms,
        **ideal,
        "true world model": WorldLM(world),
    }
    own_test["untrained transformer"] = own_test["true world model"] = data["random_walks"][1]
    for k in ("shortest_paths", "random_walks"):
        own_test[f"ideal: {LABELS[k]}"] = data[k][1]
    own_data = {LABELS[k]: data[k] for k in KINDS}

    rows, summaries = _score_models(lms, world, own_test, own_data, data, cfg, say)
    tables = {}
    for estimator in ("exact", "sampled"):
        tables[estimator] = results_table(rows[estimator])
        save_table(tables[estimator], out, stem=f"table1_{estimator}")
        say(f"\nTable 1 ({estimator} estimator)\n" + to_markdown(tables[estimator]))
    table = tables["exact"]

    detours = _detour_tables(lms, world, own_test, [*(LABELS[k] for k in KINDS), *ideal], cfg, out, say)
    write_json(
        out / "results.json",
        {
            "args": asdict(cfg),
            "summaries": summaries,
            "detours": {m: d.table.to_dict(orient="records") for m, d in detours.items()},
            "seconds": round(time.time() - t_start, 1),
        },
    )
    draw_table1(
        table,
        figure,
        title="World-model metrics on a synthetic city (cf. Vafa et al. 2024, Table 1)",
    )
    say(f"\nwrote {out}/table1_exact.md, table1_sampled.md, detours.md and {figure} in {time.time() - t_start:.0f} s")
    return tables


def _score_models(
    lms: dict[str, Any], world: Any, own_test: dict, own_data: dict, data: dict, cfg: Table1Config, say: Callable
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Table 1's cells of every model (exact and sampled estimators), each probed on its own
    traversal distribution (the untrained one and the references on random walks)."""
    rw_train, rw_test = data["random_walks"]
    rows: dict[str, dict] = {"exact": {}, "sampled": {}}
    summaries: dict[str, dict] = {}
    for name, lm in lms.items():
        t0 = time.time()
        # each model is probed on its own traversal distribution (the untrained one on random walks)
        own_train = own_data.get(name, (rw_train, rw_test))[0]
        cells, summaries[name] = evaluate_lm(
            lm,
            world,
            own_test[name][:1000],
            probe_data=(own_train[:1000], own_test[name][:500]),
            pairs=cfg.pairs,
            depth=5,
            estimators=("exact", "sampled"),
            seed=cfg.seed,
            max_nodes=cfg.max_nodes,
        )
        for estimator, row in cells.items():
            rows[estimator][name] = row
        say(f"\n[{name}] " + ", ".join(f"{k}: {v}" for k, v in cells["exact"].items()) + f" ({time.time() - t0:.0f} s)")

    return rows, summaries


def _detour_tables(
    lms: dict[str, Any], world: Any, own_test: dict, names: list[str], cfg: Table1Config, out: Path, say: Callable
) -> dict[str, Any]:
    """The detour test of each of ``names`` on its own held-out pairs; ``detours.md`` / ``.csv`` written."""
    detours = {}
    for name in names:
        pairs = pairs_from_sequences(own_test[name])[: cfg.routes]  # the model's own held-out pairs
        d = detour_test(lms[name], world, pairs, kinds=("random", "adversarial"), seed=cfg.seed)
        detours[name] = d
        say(f"\n[{name}] detours: valid-route rate\n{d.format_table()}")
    det = detour_markdown(detours)
    (out / "detours.md").write_text(det)
    pd.concat([d.table.assign(model=m) for m, d in detours.items()]).to_csv(out / "detours.csv", index=False)
    return detours


__all__ = ["KINDS", "LABELS", "Table1Config", "parse_curriculum", "run_table1"]
