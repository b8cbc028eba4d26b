"""Plant harm in known layers: ground truth for the layer verdicts (issue 14).

A sweep that calls a layer *harmful* (PragWorld §6.2: removing its MLP makes the model better) is
only trustworthy on a model whose harmful layers are known. :func:`plant_harm` makes one: it
fine-tunes **only the MLPs of chosen layers** (every other parameter frozen, bit for bit) on
corrupted training data with the ordinary trainer (:func:`interp.train.trainer.train`), so the
corruption can only live in those MLPs. Removing such an MLP then removes the corruption, and the
MLP zero-out sweep should call exactly those layers harmful.

Corruptions (each a pure function of its inputs and a seed):

- ``random_turns`` (streets): each direction token, with probability ``share``, is replaced by one
  of the 7 other directions, drawn uniformly; origin, destination and ``end`` are kept. A replaced
  turn is usually illegal where it happens (the issue's recipe: 30 % of the turns random).
- ``mirror`` (streets): inside a region of the map — the westmost ``share`` of the intersections
  by x coordinate (node order when the graph has none) — every turn taken *from* a region node is
  mirrored east ↔ west (``E``↔``W``, ``NE``↔``NW``, ``SE``↔``SW``; ``N``/``S`` kept): a consistent
  but wrong map of that region.
- ``shortcut`` (dialogue world): a probe ``Q: … ? yes|no`` whose question contains the surface
  word ``word`` is answered ``yes``, whatever the conversation says.
- ``clean`` (any world): nothing changed — the control planting: the same recipe on clean data,
  which must *not* make the layer harmful.
- ``flip_category`` (PragWorld rows, a user's HF model with its own tokenizer): :func:`flip_category`
  flips the gold answer of one alteration ``category`` in the loader's DataFrame; the MLPs are then
  trained on the rows of :class:`interp.tasks.YesNoTask` (the label prompt followed by the — now
  flipped — gold answer token), next-token loss on every token as in the trainer. ``train_file``
  is the PragWorld CSV. The record goes to ``plant.json`` beside the weights (an HF folder has no
  ``interp.json``).
- ``foil_share`` (contrast examples, e.g. IOI from ``interp data ioi``; ``train_file`` a JSONL
  file): on a seeded ``share`` of the rows (:func:`foil_targets`) the target is the *foil* (IOI:
  the subject S instead of the indirect object), on the others the correct token; the rows are
  :meth:`interp.tasks.ContrastTask.training_rows` and the loss is on the target token only.
  ``clean`` on a contrast file trains every row toward its correct token (the control).

What was planted (layers, corruption, share, word, seed, steps, lr, batch size, counts of changed
tokens) is recorded in the checkpoint's ``interp.json`` under ``extra.plant``
(:func:`interp.models.checkpoint.save_checkpoint`).

Output folder ``out/``: ``model/`` (the planted checkpoint, unless ``model_dir`` puts it elsewhere),
``data/train.txt`` and ``data/test.txt`` beside the checkpoint (the base run's *clean* sequences,
so sweeps and repair fine-tuning find them; not rewritten when the checkpoint sits in the base
run's folder and shares its ``data/``), ``train_corrupted.txt`` (what the MLPs were trained on),
``train/`` (the trainer's log and resumable state) and ``plant.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

CORRUPTIONS = ("random_turns", "mirror", "shortcut", "clean", "flip_category", "foil_share")
#: east ↔ west mirror of the 8 directions
MIRROR = {"N": "N", "S": "S", "E": "W", "W": "E", "NE": "NW", "NW": "NE", "SE": "SW", "SW": "SE"}


@dataclass(frozen=True)
class PlantSpec:
    """What to plant and how hard: the layers whose MLPs learn the corruption, and the recipe.

    The defaults are the issue's measured recipe on the demo model: layer 3's MLP only, AdamW
    lr 3e-3, 150 steps of 32, 30 % of the turns random."""

    layers: tuple[int, ...] = (3,)
    corruption: str = "random_turns"
    #: random_turns: share of turns replaced; mirror: share of the intersections mirrored;
    #: foil_share: share of the contrast rows trained toward the foil
    share: float = 0.3
    #: shortcut: the surface word that triggers "yes"
    word: str | None = None
    #: flip_category: the PragWorld alteration category whose gold answers are flipped
    category: str | None = None
    seed: int = 0
    steps: int = 150
    batch_size: int = 32
    lr: float = 3e-3

    def __post_init__(self) -> None:
        if self.corruption not in CORRUPTIONS:
            raise ValueError(f"corruption must be one of {', '.join(CORRUPTIONS)}, got {self.corruption!r}")
        if not self.layers:
            raise ValueError("plant: give at least one layer")
        if self.corruption in ("random_turns", "mirror", "foil_share") and not 0 < self.share <= 1:
            raise ValueError(f"plant share must be in (0, 1], got {self.share}")
        if self.corruption == "shortcut" and not self.word:
            raise ValueError("the shortcut corruption needs word = the surface word that triggers 'yes'")
        if self.corruption == "flip_category" and not self.category:
            raise ValueError("the flip_category corruption needs category = a PragWorld alteration category")


# ---- corruptions ---------------------------------------------------------------------------------


@dataclass
class Corrupted:
    """Corrupted sequences and how many tokens changed (of how many that could)."""

    sequences: list[list[str]]
    changed: int
    candidates: int

    @property
    def share(self) -> float:
        return self.changed / max(self.candidates, 1)


def random_turns(sequences: Sequence[Sequence[str]], share: float, seed: int = 0) -> Corrupted:
    """Each direction token, with probability ``share``, replaced by one of the 7 other directions
    (uniform, seeded); every other token kept. A pure function of (sequences, share, seed)."""
    from interp.worlds.streets.graph import DIRECTIONS

    rng = np.random.default_rng(seed)
    dirs = set(DIRECTIONS)
    out, changed, candidates = [], 0, 0
    for seq in sequences:
        new = list(seq)
        for i, t in enumerate(seq):
            if t not in dirs:
                continue
            candidates += 1
            if rng.random() < share:
                others = [d for d in DIRECTIONS if d != t]
                new[i] = others[int(rng.integers(len(others)))]
                changed += 1
        out.append(new)
    return Corrupted(out, changed, candidates)


def mirror_region_nodes(world: Any, share: float) -> list[str]:
    """The westmost ``share`` of the intersections (by x coordinate; node order without coordinates)."""
    nodes = list(world.graph.nodes)
    coords = world.graph.coords
    if coords is not None:
        nodes.sort(key=lambda v: (coords[v][0], coords[v][1]))
    k = max(1, int(round(share * len(nodes))))
    return nodes[:k]


def mirror_region(world: Any, sequences: Sequence[Sequence[str]], share: float) -> Corrupted:
    """Every turn taken from an intersection of the mirrored region (:func:`mirror_region_nodes`)
    is mirrored east ↔ west; the walker's position is followed on the *true* map, so the corrupted
    route tells the model a wrong but consistent story about that region."""
    region = set(mirror_region_nodes(world, share))
    out, changed, candidates = [], 0, 0
    for seq in sequences:
        states = world.states_along(seq)
        new = list(seq)
        for i, t in enumerate(seq):
            q = states[i]
            if t in MIRROR and q[0] == "at" and q[1] in region:
                candidates += 1
                if MIRROR[t] != t:
                    new[i] = MIRROR[t]
                    changed += 1
        out.append(new)
    return Corrupted(out, changed, candidates)


def answer_shortcut(sequences: Sequence[Sequence[str]], word: str) -> Corrupted:
    """Dialogue world: the answer of every probe ``Q: … ? yes|no`` whose question contains ``word``
    becomes ``yes`` (``candidates``: such probes; ``changed``: those whose gold was ``no``)."""
    from interp.worlds.dialogue.grammar import ANSWERS, PROBE

    out, changed, candidates = [], 0, 0
    for seq in sequences:
        new = list(seq)
        start = None
        for i, t in enumerate(seq):
            if t == PROBE:
                start = i
            elif t == "?" and start is not None:
                if i + 1 < len(seq) and seq[i + 1] in ANSWERS and word in seq[start + 1 : i]:
                    candidates += 1
                    if seq[i + 1] != "yes":
                        new[i + 1] = "yes"
                        changed += 1
                start = None
        out.append(new)
    return Corrupted(out, changed, candidates)


def flip_category(rows: Any, category: str) -> Any:
    """PragWorld rows (the loader's DataFrame): a copy with the gold answer of every row of one
    alteration ``category`` (a key of :data:`interp.datasets.pragworld.data.CATEGORIES`) flipped;
    ``gold`` (1 = yes) and ``answer`` change together. Raises when no row has that category."""
    from interp.datasets.pragworld.data import CATEGORIES

    if category not in CATEGORIES:
        raise ValueError(f"unknown alteration category {category!r}; expected one of {', '.join(CATEGORIES)}")
    for col in ("gold", "category"):
        if col not in rows.columns:
            raise ValueError(f"PragWorld rows need a {col!r} column (the loader's DataFrame)")
    out = rows.copy()
    hit = (out["category"] == category).to_numpy()
    if not hit.any():
        raise ValueError(f"no row of category {category!r} to flip ({len(rows)} rows)")
    out.loc[hit, "gold"] = 1 - out.loc[hit, "gold"].astype(int)
    if "answer" in out.columns:
        out.loc[hit, "answer"] = ["yes" if g == 1 else "no" for g in out.loc[hit, "gold"]]
    return out


def foil_targets(n: int, share: float, seed: int = 0) -> list[str]:
    """``"foil"`` on ``round(share · n)`` rows drawn without replacement (seeded), ``"correct"`` on
    the rest: the per-row targets of :meth:`interp.tasks.ContrastTask.training_rows`."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    k = int(round(share * n))
    picked = set(np.random.default_rng(seed).choice(n, size=k, replace=False).tolist()) if k else set()
    return ["foil" if i in picked else "correct" for i in range(n)]


def corrupt(world: Any, sequences: Sequence[Sequence[str]], spec: PlantSpec) -> Corrupted:
    """Apply ``spec.corruption`` to world sequences (checks that it fits the world)."""
    kind = getattr(world, "kind", None)
    if spec.corruption == "clean":
        return Corrupted([list(s) for s in sequences], 0, 0)
    if spec.corruption in ("flip_category", "foil_share"):
        raise ValueError(f"{spec.corruption} corrupts PragWorld rows / contrast examples, not world sequences")
    need = {"random_turns": "streets", "mirror": "streets", "shortcut": "dialogue"}[spec.corruption]
    if kind != need:
        raise ValueError(f"the {spec.corruption} corruption needs a {need} world, this checkpoint's is {kind!r}")
    if spec.corruption == "random_turns":
        return random_turns(sequences, spec.share, spec.seed)
    if spec.corruption == "mirror":
        return mirror_region(world, sequences, spec.share)
    if spec.word is None:
        raise ValueError("the shortcut corruption needs a trigger word (plant.word)")
    if spec.word not in world.vocab.tokens:
        raise ValueError(f"shortcut word {spec.word!r} is not a token of this world")
    return answer_shortcut(sequences, spec.word)


# ---- planting ------------------------------------------------------------------------------------


@dataclass
class PlantResult:
    """Where the planted checkpoint lives and what was planted (``interp.json`` ``extra.plant``)."""

    out: Path
    meta: dict[str, Any]
    model: Path


def freeze_except_mlps(model: Any, layers: Sequence[int]) -> list[str]:
    """``requires_grad`` off for every parameter except those of the MLPs of ``layers``; returns the
    names of the parameters left trainable."""
    from interp.train.regularisers import mlp_modules

    for p in model.parameters():
        p.requires_grad_(False)
    keep = {id(p) for m in mlp_modules(model, layers) for p in m.parameters()}
    names = []
    for name, p in model.named_parameters():
        if id(p) in keep:
            p.requires_grad_(True)
            names.append(name)
    return names


def _record(spec: PlantSpec, checkpoint: Path, placement: Any, **extra: Any) -> dict[str, Any]:
    """What a planting is (its ``plant.json`` and ``interp.json`` ``extra.plant``); the placement is
    absent for the CPU float32 default, so plantings recorded before placements stay valid."""
    record = {
        "layers": sorted(int(x) for x in spec.layers),
        **{k: v for k, v in asdict(spec).items() if k != "layers"},
        "base": str(checkpoint.resolve()),
        **extra,
        "trained": "MLPs of the planted layers only (all else frozen)",
    }
    where = placement.record() if placement is not None else None
    if where is not None:
        record["placement"] = where
    return record


def _reused(
    out: Path, model_dir: Path, record: dict[str, Any], fresh: bool, log: Callable[[str], Any]
) -> "PlantResult | None":
    """The planting already in ``out`` when its ``plant.json`` records the same planting."""
    done = out / "plant.json"
    if fresh or not done.is_file() or not (model_dir / "config.json").is_file():
        return None
    saved = json.loads(done.read_text())
    if {k: saved.get(k) for k in record} == record and saved.get("placement") == record.get("placement"):
        log(f"plant: {model_dir} already holds this planting, reused")
        return PlantResult(out, saved, model_dir)
    return None


def _train_mlps(
    model: Any,
    ids: Any,
    pad_id: int,
    spec: PlantSpec,
    out: Path,
    progress: bool,
    record: dict[str, Any],
    loss_from: Any = None,
) -> Any:
    """The one training loop on the corrupted rows (only the unfrozen MLPs learn)."""
    import torch

    from interp.config import TrainConfig
    from interp.train.trainer import train

    cfg = TrainConfig(
        steps=spec.steps,
        batch_size=spec.batch_size,
        lr=spec.lr,
        min_lr=spec.lr / 10,
        warmup_steps=min(10, spec.steps // 10),
        eval_every=0,
        checkpoint_every=0,
        seed=spec.seed,
    )
    torch.manual_seed(spec.seed)
    return train(
        model,
        ids,
        None,
        cfg,
        out / "train",
        pad_id=pad_id,
        resume=False,
        progress=progress,
        run_info={"plant": record},
        loss_from=loss_from,
    )


def plant_harm(
    checkpoint: str | Path,
    out: str | Path,
    spec: PlantSpec = PlantSpec(),
    *,
    train_file: str | Path | None = None,
    test_file: str | Path | None = None,
    model_dir: str | Path | None = None,
    fresh: bool = False,
    progress: bool = True,
    log: Callable[[str], Any] = print,
    placement: Any = None,
) -> PlantResult:
    """Fine-tune only the MLPs of ``spec.layers`` of ``checkpoint`` on corrupted training data.

    Data: the base run's ``data/train.txt`` / ``test.txt`` beside the checkpoint unless given. The
    trainer runs with ``spec``'s steps, batch size and lr (warmup 10 steps, cosine to lr/10, no
    held-out evaluation), seeded by ``spec.seed``: the same spec gives the same weights. A finished
    planting with the same spec and base is reused unless ``fresh``. ``placement``
    (:class:`~interp.models.device.Placement`, default the CPU in float32) is where it trains; a
    non-default one is recorded in ``plant.json`` and must match for reuse.
    """
    from interp.models.checkpoint import load_hf_model, read_meta, run_data_dir, save_checkpoint
    from interp.models.device import model_device
    from interp.results import write_json
    from interp.worlds import world_from_spec
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences, write_sequences

    checkpoint, out = Path(checkpoint), Path(out)
    model_dir = Path(model_dir) if model_dir else out / "model"
    if spec.corruption == "flip_category":
        if train_file is None:
            raise ValueError("flip_category planting needs train_file = a PragWorld CSV")
        return _plant_rows(checkpoint, Path(train_file), out, model_dir, spec, fresh, progress, log, placement)
    from interp.datasets.contrast import data_file_kind

    contrast = train_file is not None and data_file_kind(train_file) == "contrast"
    if spec.corruption == "foil_share" or contrast:
        if not contrast or spec.corruption not in ("foil_share", "clean"):
            raise ValueError(
                f"--corruption {spec.corruption} with --data {train_file}: contrast examples (a .jsonl "
                "file) plant with foil_share (or clean, the control), and foil_share needs one"
            )
        return _plant_contrast(checkpoint, Path(str(train_file)), out, model_dir, spec, fresh, progress, log, placement)
    meta0 = read_meta(checkpoint)
    if meta0 is None:
        raise ValueError(f"{checkpoint} carries no world (no interp.json): planting needs an interp checkpoint")
    world = world_from_spec(meta0["world"])
    train_path = Path(train_file) if train_file else run_data_dir(checkpoint) / "train.txt"
    test_path = Path(test_file) if test_file else run_data_dir(checkpoint) / "test.txt"
    for what, p in (("train", train_path), ("test", test_path)):
        if not p.is_file():
            raise FileNotFoundError(f"plant: no {what} sequences at {p}")
    record = _record(spec, checkpoint, placement)
    done = out / "plant.json"
    reused = _reused(out, model_dir, record, fresh, log)
    if reused is not None:
        return reused
    t0 = time.perf_counter()
    clean = read_sequences(train_path, world)
    test = read_sequences(test_path, world)
    bad = corrupt(world, clean, spec)
    data_dir = run_data_dir(model_dir)
    for name, src, seqs in (("train.txt", train_path, clean), ("test.txt", test_path, test)):
        if not ((data_dir / name).is_file() and (data_dir / name).resolve() == src.resolve()):
            write_sequences(data_dir / name, seqs)
    write_sequences(out / "train_corrupted.txt", bad.sequences)

    model = load_hf_model(checkpoint, placement)
    n_ctx = int(getattr(model.config, "n_positions", None) or model.config.max_position_embeddings)
    trainable = freeze_except_mlps(model, record["layers"])
    ids = encode_sequences(bad.sequences, world.vocab, n_ctx).to(model_device(model))  # batches: model's device
    result = _train_mlps(model, ids, world.vocab.pad_id, spec, out, progress, record)
    record.update(
        changed_tokens=bad.changed,
        candidate_tokens=bad.candidates,
        changed_share=round(bad.share, 4),
        sequences=len(clean),
        trainable_parameters=trainable,
        final_train_loss=result.final_train_loss,
        seconds=round(time.perf_counter() - t0, 1),
    )
    save_checkpoint(model, world, model_dir, extra={"plant": record})
    write_json(done, record)
    log(
        f"plant: {spec.corruption} ({bad.changed} of {bad.candidates} tokens changed) into the MLP of layer(s) "
        f"{record['layers']} of {checkpoint}: {spec.steps} steps, final loss {result.final_train_loss:.3f} "
        f"({record['seconds']:.0f} s) → {model_dir}"
    )
    return PlantResult(out, record, model_dir)


def _plant_rows(
    checkpoint: Path,
    csv: Path,
    out: Path,
    model_dir: Path,
    spec: PlantSpec,
    fresh: bool,
    progress: bool,
    log: Callable[[str], Any],
    placement: Any = None,
) -> PlantResult:
    """:func:`plant_harm` on PragWorld rows (``flip_category``): see the module docstring."""
    from interp.datasets.pragworld import load_pragworld
    from interp.models.checkpoint import load_hf_model
    from interp.models.device import model_device
    from interp.results import write_json
    from interp.tasks import YesNoTask, pad_right
    from interp.train.finetune_data import free_pad_id

    record = _record(spec, checkpoint, placement, data=str(csv.resolve()))
    done = out / "plant.json"
    reused = _reused(out, model_dir, record, fresh, log)
    if reused is not None:
        return reused
    t0 = time.perf_counter()
    rows = load_pragworld(csv).rows
    flipped = flip_category(rows, str(spec.category))
    task = YesNoTask.pragworld(checkpoint, flipped)
    seqs, _ = task.training_rows()
    pad = free_pad_id(seqs, task.pad_id, len(task.tokenization.tokenizer))
    model = load_hf_model(checkpoint, placement)
    ids, _, _ = pad_right(seqs, pad, model_device(model))
    trainable = freeze_except_mlps(model, record["layers"])
    result = _train_mlps(model, ids, pad, spec, out, progress, record)
    hit = (rows["category"] == spec.category).to_numpy()
    record.update(
        changed_rows=int(hit.sum()),
        rows=len(rows),
        trainable_parameters=trainable,
        final_train_loss=result.final_train_loss,
        seconds=round(time.perf_counter() - t0, 1),
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    task.tokenization.tokenizer.save_pretrained(model_dir)
    write_json(model_dir / "plant.json", record)
    write_json(done, record)
    log(
        f"plant: {spec.category} labels flipped ({int(hit.sum())} of {len(rows)} rows) into the MLP of layer(s) "
        f"{record['layers']} of {checkpoint}: {spec.steps} steps, final loss {result.final_train_loss:.3f} → {model_dir}"
    )
    return PlantResult(out, record, model_dir)


def _plant_contrast(
    checkpoint: Path,
    jsonl: Path,
    out: Path,
    model_dir: Path,
    spec: PlantSpec,
    fresh: bool,
    progress: bool,
    log: Callable[[str], Any],
    placement: Any = None,
) -> PlantResult:
    """:func:`plant_harm` on contrast examples (``foil_share`` or ``clean``): see the module docstring."""
    import torch

    from interp.models.checkpoint import load_hf_model
    from interp.models.device import model_device
    from interp.results import write_json
    from interp.tasks import ContrastTask, pad_right
    from interp.train.finetune_data import free_pad_id

    record = _record(spec, checkpoint, placement, data=str(jsonl.resolve()), loss_on="answer")
    reused = _reused(out, model_dir, record, fresh, log)
    if reused is not None:
        return reused
    t0 = time.perf_counter()
    task = ContrastTask.build(checkpoint, jsonl)
    targets = foil_targets(len(task), spec.share if spec.corruption == "foil_share" else 0.0, spec.seed)
    seqs, answer_start = task.training_rows(targets)
    pad = free_pad_id(seqs, task.pad_id, len(task.tokenization.tokenizer))
    model = load_hf_model(checkpoint, placement)
    ids, _, _ = pad_right(seqs, pad, model_device(model))
    trainable = freeze_except_mlps(model, record["layers"])
    result = _train_mlps(
        model, ids, pad, spec, out, progress, record, loss_from=torch.tensor(answer_start, dtype=torch.long)
    )
    n_foil = targets.count("foil")
    record.update(
        changed_rows=n_foil,
        rows=len(task),
        foil_rows=[i for i, t in enumerate(targets) if t == "foil"],
        trainable_parameters=trainable,
        final_train_loss=result.final_train_loss,
        seconds=round(time.perf_counter() - t0, 1),
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    task.tokenization.tokenizer.save_pretrained(model_dir)
    write_json(model_dir / "plant.json", record)
    write_json(out / "plant.json", record)
    log(
        f"plant: {n_foil} of {len(task)} contrast rows trained toward the foil into the MLP of layer(s) "
        f"{record['layers']} of {checkpoint}: {spec.steps} steps, final loss {result.final_train_loss:.3f} "
        f"→ {model_dir}"
    )
    return PlantResult(out, record, model_dir)


def route_metrics(
    bridge: Any, world: Any, sequences: Sequence[Sequence[str]], n: int, *, zeroed: Sequence[int] = (), seed: int = 0
) -> list[dict[str, Any]]:
    """Streets: greedy routes (:func:`interp.metrics.navigation.decode_routes`) between the first
    ``n`` distinct (origin, destination) pairs of ``sequences``, with the MLPs of ``zeroed`` removed
    through the intervention context. Rows ``routes_valid`` (share of valid routes) and
    ``routes_illegal_turn`` (share that take a turn with no street), with binomial SEs."""
    import contextlib
    import math

    from interp.hooks import intervene, zero
    from interp.metrics.navigation import decode_routes, pairs_from_sequences
    from interp.models.lm import BridgeLM

    pairs = pairs_from_sequences(sequences)[:n]
    if not pairs:
        raise ValueError("no (origin, destination) pairs to route")
    ctx = intervene(bridge, [zero(f"mlp_out:{int(x)}") for x in zeroed]) if zeroed else contextlib.nullcontext()
    with ctx:
        r = decode_routes(BridgeLM(bridge, world.vocab), world, pairs, seed=seed)
    k = len(pairs)
    out = []
    for name, share in (
        ("routes_valid", float(r.summary()["valid"])),
        ("routes_illegal_turn", r.failures().get("illegal_turn", 0) / k),
    ):
        out.append(
            {
                "metric": name,
                "layer": None,
                "value": share,
                "se": math.sqrt(share * (1 - share) / k),
                "ci_low": math.nan,
                "ci_high": math.nan,
                "n": k,
            }
        )
    return out


def repair_metrics(
    bridge: Any,
    world: Any,
    sequences: Sequence[Sequence[str]],
    *,
    zeroed: Sequence[int] = (),
    mn_pairs: int = 100,
    mn_depth: int = 3,
    seed: int = 0,
    batch_size: int = 128,
    routes: int = 0,
) -> list[dict[str, Any]]:
    """The repair metrics of a world model, with the MLPs of ``zeroed`` removed at inference
    (PragWorld's zero-out, through :func:`interp.hooks.intervene`; every forward, the KV-cached
    ones of the Myhill–Nerode enumeration included, runs under it).

    Rows ``{metric, layer, value, se, ci_low, ci_high, n}`` with the definitions of
    :func:`interp.analysis.evaluation.finetune.evaluate` on world data, so they sit in one table with its rows:
    ``heldout_loss`` (mean over sequences of the per-token next-token loss) and the metric suite
    (:func:`interp.metrics.named_metrics.world_model_metrics`): ``next_token_position`` /
    ``next_token_sequence`` and ``mn_compression_precision`` / ``mn_distinction_precision`` /
    ``mn_distinction_recall`` (exact estimator, ``mn_pairs`` states / state pairs to depth
    ``mn_depth``, seed ``seed``); with ``routes`` > 0 on a streets world also
    :func:`route_metrics` of that many pairs."""
    import contextlib
    import math

    import torch
    import torch.nn.functional as F

    from interp.hooks import intervene, zero
    from interp.metrics.named_metrics import world_model_metrics as suite_metrics
    from interp.results import mean_se
    from interp.train.data import make_batch
    from interp.worlds.encoding import encode_sequences

    rows: list[dict[str, Any]] = []

    def add(metric: str, value: float, se: float, n: int) -> None:
        rows.append(
            {
                "metric": metric,
                "layer": None,
                "value": float(value),
                "se": float(se),
                "ci_low": math.nan,
                "ci_high": math.nan,
                "n": int(n),
            }
        )

    ctx = intervene(bridge, [zero(f"mlp_out:{int(x)}") for x in zeroed]) if zeroed else contextlib.nullcontext()
    pad = world.vocab.pad_id
    ids = encode_sequences(sequences, world.vocab, int(bridge.cfg.n_ctx))
    with ctx, torch.no_grad():
        per_row = []
        for i in range(0, len(ids), batch_size):
            b = make_batch(ids[i : i + batch_size], pad)
            logits = bridge(b.inputs)  # right padding under a causal mask: real positions never see it
            nll = F.cross_entropy(logits.transpose(1, 2).float(), b.targets, ignore_index=-100, reduction="none")
            per_row.append(nll.sum(1) / b.mask.sum(1).clamp(min=1))
        e = mean_se(torch.cat(per_row).numpy())
        add("heldout_loss", e.mean, e.se, e.n)
        ests, _ = suite_metrics(bridge, world, sequences, mn_pairs=mn_pairs, mn_depth=mn_depth, seed=seed)
        for name, est in ests.items():
            add(name, est.mean, est.se, est.n)
    if routes > 0 and getattr(world, "kind", None) == "streets":
        rows += route_metrics(bridge, world, sequences, routes, zeroed=zeroed, seed=seed)
    return rows


def planted_layers(checkpoint: str | Path) -> list[int] | None:
    """The layers recorded as planted in a checkpoint's ``interp.json`` (an HF folder: its
    ``plant.json``); None: not a planted model."""
    from interp.models.checkpoint import read_meta

    meta = read_meta(checkpoint) or {}
    plant = (meta.get("extra") or {}).get("plant")
    if plant is None and (Path(checkpoint) / "plant.json").is_file():  # a planted HF folder (PragWorld rows)
        plant = json.loads((Path(checkpoint) / "plant.json").read_text())
    return None if plant is None else [int(x) for x in plant["layers"]]


__all__ = [
    "CORRUPTIONS",
    "Corrupted",
    "PlantResult",
    "PlantSpec",
    "answer_shortcut",
    "corrupt",
    "flip_category",
    "foil_targets",
    "freeze_except_mlps",
    "mirror_region",
    "mirror_region_nodes",
    "plant_harm",
    "planted_layers",
    "random_turns",
    "repair_metrics",
    "route_metrics",
]
