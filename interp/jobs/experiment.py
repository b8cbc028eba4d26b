"""Train a GPT-2 on a world and run the next-token test: the pipeline behind ``interp train``.

A run folder ``<runs_dir>/<name>/`` holds everything a run made::

    config.json          the resolved config (with the seed)
    world.json           the world's spec (a checkpoint carries it too)
    data/train.txt, data/test.txt   the generated sequences (one per line)
    best/, last/         HF checkpoints (best held-out loss; latest, resumable)
    train_log.csv        loss, lr, tokens/s, eval loss per logged step
    next_token.csv/json  the next-token test of ``best`` on the held-out sequences
    results.json         every number of the run

**The shipped demo model.** interp carries the demo's trained model (``interp/demo_model/``:
the checkpoint, its training log and ``manifest.json`` — the recipe it was trained from, the
SHA-256 of the data it saw, its training record, where and how long it trained). A config whose
recipe (world, data, model, curriculum, train) equals the manifest's starts from that checkpoint
instead of training (``results.json`` says so under ``train.shipped``), after checking that the
data drawn here are byte-identical to the shipped model's; ``retrain=True`` (``--retrain``)
trains from scratch with the same recipe. ``make demo-model`` (``experiments/demo_model.py``)
produces the shipped folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from jaxtyping import Int
from torch import Tensor

from interp.config import (
    AnalysisConfig,
    ConfigError,
    FixConfig,
    PlantConfig,
    TrainConfig,
    check_files,
    load_toml,
    path_field,
    to_dict,
)
from interp.config.flags import FlagFields, recorded_config, run_record
from interp.models.gpt2 import ModelConfig
from interp.results import write_json
from interp.worlds import World, parse_world


@dataclass(frozen=True)
class DataConfig:
    """``[data]`` of an experiment config: how many sequences to draw and how to split them, or a
    folder of ``interp data``."""

    #: sequences drawn from the world before the train/test split (the demo's 120,000 random walks:
    #: ~5.9M training tokens, so its 15,000 steps of 32 routes see each route about 4.5 times; on
    #: 30,000 routes greedy routes failed on 7–12 % of every seed, see ``ExperimentConfig``)
    n_sequences: int = 120000
    test_fraction: float = 0.1
    seed: int = 0
    #: a folder written by ``interp data`` to use instead of drawing (train.txt, test.txt);
    #: relative paths start from the config file's folder
    dir: str | None = path_field(kind="dir")


@dataclass(frozen=True)
class CurriculumConfig:
    """Short sequences first (curriculum learning, Bengio et al. 2009): before the main training,
    stage ``i`` trains ``steps[i]`` steps only on the training sequences of at most
    ``max_tokens[i]`` world tokens (a streets route: origin, destination, its turns and ``end``),
    with the main ``[train]`` settings and its own warmup and cosine schedule (a fresh optimizer);
    then the main training runs on all sequences from the weights it left. The data's distribution
    is untouched where it counts: the final model is trained last on every sequence.

    Why (measured, README "What the demo model learns"): on random walks of 3–99 turns the skill a
    greedy route needs — say ``end`` where the route stands at its destination — is one token in
    ~53 and rests on tracking the intersection over up to 99 turns; on walks of ≤ 20 turns it is
    learnt in 1,000 steps of about half a minute (P(end | at the destination) 0.04 → 0.32 in trial
    w1 of the README), and full training then extends it. The short stages' walks end sooner than
    the data's; the main training on every sequence removes that bias (with the trainer's
    ``token`` loss weighting: P(end | at the destination) ends 0.02–0.03 above the ideal
    predictor's). ``CurriculumConfig()`` (no stages) is off; the embedded demo
    config sets three, which a config file inherits unless it says ``max_tokens = []``,
    ``steps = []``. A stage with no sequence short enough is skipped, said in the log and in
    ``results.json``.
    """

    max_tokens: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.max_tokens) != len(self.steps):
            raise ValueError(
                f"curriculum.max_tokens has {len(self.max_tokens)} entries, "
                f"curriculum.steps {len(self.steps)}: give one of each per stage"
            )
        if any(n < 1 for n in self.max_tokens) or any(n < 1 for n in self.steps):
            raise ValueError("curriculum.max_tokens and curriculum.steps must be ≥ 1")


@dataclass(frozen=True)
class ExperimentConfig(FlagFields):
    """The embedded default is the demo: random walks on the default synthetic city.

    Train defaults, measured (``docs/reproductions/demo-training.md``; trials by
    ``experiments/curriculum.py`` and ``experiments/demo_seeds.py``): a 4-layer GPT-2 128 wide
    with 2 heads on 120,000 routes; a curriculum of 1,000 steps each on routes of ≤ 20, ≤ 40 and
    ≤ 60 turns, then 12,000 steps of 32 routes on all (lr 2e-3 → 2e-5 cosine per stage, 100
    warmup steps), every token weighing the same (``loss_weighting = "token"``). Competent on each
    training seed measured (0, 1, 2): 98.5 / 98.0 / 98.5 % valid greedy routes on 200 held-out
    pairs, P(end | at the destination) 0.377 / 0.352 / 0.354 against the ideal predictor's 0.357,
    held-out loss 1.102–1.103 (the ideal's: 1.106 per token on 100 routes). Seed 1 is the shipped
    model (``interp/demo_model/``). The same recipe on 30,000 routes routed 88.0–93.0 %; with 7,000
    main steps on them, 52.5–99.5 % between seeds.
    """

    name: str = "demo"
    #: a world argument as on the CLI (``streets``, ``streets:city.toml``, ``dfa:x.json`` …);
    #: relative paths are resolved against the config file's folder
    world: str = "streets"
    runs_dir: str = "runs"
    #: held-out sequences scored by the next-token test (0: all)
    eval_sequences: int = 1000
    data: DataConfig = field(default_factory=DataConfig)
    #: seed 1 of model initialisation and batch order: the shipped demo model's (seeds 0 and 2
    #: are competent too, ``experiments/demo_seeds.py``)
    model: ModelConfig = field(default_factory=lambda: ModelConfig(n_head=2, seed=1))
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=12000,
            batch_size=32,
            lr=2e-3,
            min_lr=2e-5,
            warmup_steps=100,
            eval_every=500,
            eval_sequences=512,
            seed=1,
        )
    )
    #: stages on short sequences before ``train`` (the demo: 1,000 steps each on routes of ≤ 20,
    #: ≤ 40 and ≤ 60 turns; a route has its turns + 3 tokens)
    curriculum: CurriculumConfig = field(
        default_factory=lambda: CurriculumConfig(max_tokens=(23, 43, 63), steps=(1000, 1000, 1000))
    )
    #: ``interp run`` only: world-model table and layer analyses, then HLS fine-tuning
    #: sized for a short ``make demo`` (issue 22): the current-state probes (one L-BFGS fit per
    #: layer, the world-model stage's main cost) on 100 training routes (last-layer accuracy 0.988
    #: against 0.989 on 200), Myhill–Nerode on 50 state pairs, direct-effect patching of 100 edits
    analysis: AnalysisConfig = field(default_factory=lambda: AnalysisConfig(mn_pairs=50, patch_n=100, probe_train=100))
    #: ``interp run`` only: harm planted in known layers before the layer analyses (issue 14)
    plant: PlantConfig = field(default_factory=PlantConfig)
    #: the repair compared on 100 held-out routes and 50 state pairs (sized as ``analysis``)
    fix: FixConfig = field(default_factory=lambda: FixConfig(mn_pairs=50, n_eval=100))


def load_experiment(path: str | Path | None) -> tuple[ExperimentConfig, Path]:
    """The config at ``path`` (or the embedded default) and the folder relative paths start from."""
    if path is None:
        return ExperimentConfig(), Path.cwd()
    cfg = load_toml(ExperimentConfig, path)
    base = Path(path).resolve().parent
    check_files(cfg, path, base)  # data.dir exists before any world or model is built
    return cfg, base


class RecordedRun(NamedTuple):
    """What a run folder of ``interp train`` / ``interp run`` recorded (``run.json``): its config,
    the folder its relative paths start from, and whether it trained from scratch (``--retrain``)."""

    config: ExperimentConfig
    base: Path
    retrain: bool


def load_run(folder: str | Path) -> RecordedRun:
    """The config, base folder and ``retrain`` a run folder recorded (:func:`run_record`), so that
    ``run_main_job(*load_run(folder)[:2], retrain=...)`` — or ``run_experiment`` for ``interp
    train`` — reruns it (point ``runs_dir`` elsewhere to keep both). A folder written before
    ``run.json`` was: the config of its ``results.json`` / ``config.json``, the current folder as the
    base."""
    data, where = recorded_config(folder)
    cfg = ExperimentConfig.from_dict(data, where)
    info = json.loads((Path(folder) / "run.json").read_text()) if where.endswith("run.json") else {}
    base = Path(info.get("base") or Path.cwd())
    check_files(cfg, where, base)
    return RecordedRun(cfg, base, bool(info.get("retrain", False)))


def resolve_world_arg(arg: str, base: Path) -> str:
    """A world argument with its file part (``streets:city.toml``, ``dfa:x.json``) made relative to
    ``base`` (the config's folder) when that file exists there."""
    kind, sep, rest = arg.partition(":")
    if sep and rest and not Path(rest).is_absolute() and "=" not in rest:
        candidate = base / rest
        if candidate.exists():
            return f"{kind}:{candidate}"
    return arg


def make_data(world: World, cfg: DataConfig, base: Path) -> tuple[list[list[str]], list[list[str]]]:
    """(train, test) sequences: read from ``cfg.dir`` or drawn with ``cfg.seed`` and split by key."""
    from interp.worlds.io import read_sequences
    from interp.worlds.split import split_sequences

    if cfg.dir is not None:
        folder = Path(cfg.dir) if Path(cfg.dir).is_absolute() else base / cfg.dir
        return read_sequences(folder / "train.txt", world), read_sequences(folder / "test.txt", world)
    rng = np.random.default_rng(cfg.seed)
    sequences = world.generate(cfg.n_sequences, rng)
    return split_sequences(world, sequences, cfg.test_fraction, cfg.seed)


#: the shipped demo model (module docstring): ``checkpoint/``, ``train_log.csv``, ``manifest.json``
DEMO_MODEL = Path(__file__).resolve().parents[1] / "demo_model"
#: the config sections that decide the trained weights
RECIPE_KEYS = ("world", "data", "model", "curriculum", "train")


def training_recipe(cfg: ExperimentConfig) -> dict[str, Any]:
    """The parts of ``cfg`` that decide what training produces (not the name, folders or analyses)."""
    d = to_dict(cfg)
    return json.loads(json.dumps({k: d[k] for k in RECIPE_KEYS}))  # tuples → lists, as in a manifest


def data_hashes(run_dir: Path) -> dict[str, str]:
    """SHA-256 of ``data/train.txt`` and ``data/test.txt`` of a run folder."""
    return {
        name: hashlib.sha256((Path(run_dir) / "data" / f"{name}.txt").read_bytes()).hexdigest()
        for name in ("train", "test")
    }


def shipped_model(cfg: ExperimentConfig, folder: Path = DEMO_MODEL) -> dict[str, Any] | None:
    """The shipped model's manifest when ``cfg``'s training recipe is the one it was trained from."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    m = json.loads(manifest.read_text())
    return m if m.get("recipe") == training_recipe(cfg) else None


def package_model(run_dir: Path, out: Path = DEMO_MODEL, command: str = "make demo-model") -> Path:
    """Copy a finished run's ``best/`` checkpoint and training log into ``out`` with its manifest
    (the recipe, the data hashes, the training and next-token records, the machine)."""
    from interp.hardware import machine

    run_dir = Path(run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    timing = run_dir / "train_timing.json"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(run_dir / "best", out / "checkpoint")
    shutil.copy2(run_dir / "train_log.csv", out / "train_log.csv")
    manifest = {
        "format": 1,
        "recipe": json.loads(json.dumps({k: results["config"][k] for k in RECIPE_KEYS})),
        "data_sha256": data_hashes(run_dir),
        "train": results["train"],
        "next_token": results["next_token"],
        "produced_by": command,
        "trained_from": str(run_dir),
        "machine": machine(peak=False),
        "train_wall_s": json.loads(timing.read_text())["wall_s"] if timing.is_file() else None,
    }
    write_json(out / "manifest.json", manifest)
    return out


def _start_from_shipped(manifest: dict[str, Any], run_dir: Path, folder: Path, log) -> dict[str, Any] | None:
    """Put the shipped checkpoint in ``run_dir/best`` when the data drawn here are the ones it was
    trained on; its training record (or None, said, when the data differ)."""
    here = data_hashes(run_dir)
    if here != manifest["data_sha256"]:
        log(
            f"the data drawn here differ from the shipped model's (SHA-256 {here} vs {manifest['data_sha256']}): "
            "training from scratch instead"
        )
        return None
    for name in ("best", "last"):
        if (run_dir / name).exists():
            shutil.rmtree(run_dir / name)
    shutil.copytree(folder / "checkpoint", run_dir / "best")
    shutil.copy2(folder / "train_log.csv", run_dir / "train_log.csv")
    log(
        f"model: the shipped demo model ({folder}; trained by `{manifest['produced_by']}`, "
        f"{manifest['train']['steps']} steps, best held-out loss {manifest['train']['best_eval_loss']:.4f}); "
        "--retrain trains it from scratch"
    )
    return {
        **manifest["train"],
        "shipped": {
            "path": str(folder),
            "produced_by": manifest["produced_by"],
            "machine": manifest["machine"],
            "train_wall_s": manifest["train_wall_s"],
        },
    }


def run_experiment(
    cfg: ExperimentConfig,
    base: Path | None = None,
    fresh: bool = False,
    progress: bool = True,
    log=print,
    retrain: bool = False,
    shipped_folder: Path = DEMO_MODEL,
) -> dict[str, Any]:
    """Generate data, train (or start from the shipped model: module docstring; ``retrain``: never),
    run the next-token test; write and return ``results.json``. Relative paths of ``cfg`` start from
    ``base`` (default: the current directory when called)."""
    base = Path.cwd() if base is None else base
    import torch

    from interp.models.gpt2 import build_gpt2, count_parameters
    from interp.train.trainer import train
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import write_sequences

    run_dir = Path.cwd() / cfg.runs_dir / cfg.name  # an absolute runs_dir stays as it is
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)

    world = parse_world(resolve_world_arg(cfg.world, base))
    log(f"world: {world.describe()}")
    train_seqs, test_seqs = make_data(world, cfg.data, base)
    if not train_seqs or not test_seqs:
        raise ConfigError(
            f"the split left {len(train_seqs)} train and {len(test_seqs)} test sequences; "
            "raise data.n_sequences or change data.test_fraction"
        )
    write_sequences(run_dir / "data" / "train.txt", train_seqs)
    write_sequences(run_dir / "data" / "test.txt", test_seqs)
    write_json(run_dir / "config.json", to_dict(cfg))
    write_json(run_dir / "run.json", run_record(cfg, base=str(base), retrain=retrain))  # load_run reads it back
    write_json(run_dir / "world.json", world.spec())
    vocab = world.vocab
    manifest = None if retrain else shipped_model(cfg, shipped_folder)
    record = _start_from_shipped(manifest, run_dir, shipped_folder, log) if manifest else None
    if record is not None:
        nt = test_best(run_dir, world, test_seqs, cfg.eval_sequences, progress, log)
        results = {
            "config": to_dict(cfg),
            "world": world.describe(),
            "data": {"train": len(train_seqs), "test": len(test_seqs)},
            "train": record,
            "next_token": nt.summary(),
        }
        write_json(run_dir / "results.json", results)
        results["run_dir"] = str(run_dir)
        return results
    train_ids = encode_sequences(train_seqs, vocab, cfg.model.n_ctx)
    test_ids = encode_sequences(test_seqs, vocab, cfg.model.n_ctx)
    log(
        f"data: {len(train_seqs)} train / {len(test_seqs)} test sequences, "
        f"{int((train_ids != vocab.pad_id).sum())} train tokens"
    )

    model = build_gpt2(vocab, cfg.model)
    log(
        f"model: GPT-2 {cfg.model.n_layer} layers × {cfg.model.d_model} wide, "
        f"{count_parameters(model):,} parameters, vocabulary {len(vocab)}"
    )
    t_train = time.perf_counter()
    stages = train_curriculum(
        model,
        train_ids,
        test_ids,
        cfg.curriculum,
        cfg.train,
        vocab.pad_id,
        run_dir,
        progress,
        log,
        run_info={"name": cfg.name},
    )
    result = train(
        model,
        train_ids,
        test_ids,
        cfg.train,
        run_dir,
        pad_id=vocab.pad_id,
        save_model_fn=partial(_save, world=world),
        progress=progress,
        run_info={"name": cfg.name},
    )
    write_json(
        run_dir / "train_timing.json",
        {"wall_s": round(time.perf_counter() - t_train), "threads": torch.get_num_threads()},
    )
    log(
        f"trained {result.steps} steps: train loss {result.final_train_loss:.4f}, best held-out loss "
        f"{result.best_eval_loss:.4f} at step {result.best_step}, {result.tokens_per_second:,.0f} tokens/s"
    )

    nt = test_best(run_dir, world, test_seqs, cfg.eval_sequences, progress, log)
    results = {
        "config": to_dict(cfg),
        "world": world.describe(),
        "data": {"train": len(train_seqs), "test": len(test_seqs)},
        "train": {**result.to_dict(), "curriculum": stages},
        "next_token": nt.summary(),
    }
    write_json(run_dir / "results.json", results)
    results["run_dir"] = str(run_dir)
    return results


def train_curriculum(
    model,
    train_ids: Int[Tensor, "n pos"],
    test_ids,
    curriculum: CurriculumConfig,
    train_cfg: TrainConfig,
    pad_id: int,
    run_dir: Path,
    progress: bool = True,
    log=print,
    run_info: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Train ``model`` in place through the stages of ``curriculum`` (see :class:`CurriculumConfig`)
    with ``train_cfg``'s settings on the rows of ``train_ids`` (``<bos>``-prefixed, right-padded:
    :func:`~interp.worlds.encoding.encode_sequences`) short enough for each stage; each resumes
    from ``run_dir/curriculum/stage<i>/last``. Returns one record per stage: ``max_tokens``,
    ``steps``, ``sequences`` used, and its training result or ``skipped`` (why)."""
    from dataclasses import replace

    from interp.train.trainer import train

    tokens = (train_ids != pad_id).sum(dim=1) - 1  # world tokens of each row, without <bos>
    records = []
    for i, (max_tokens, steps) in enumerate(zip(curriculum.max_tokens, curriculum.steps)):
        short = tokens <= max_tokens
        record: dict[str, Any] = {"max_tokens": max_tokens, "steps": steps, "sequences": int(short.sum())}
        if not short.any():
            record["skipped"] = f"no training sequence has ≤ {max_tokens} tokens"
            log(f"curriculum stage {i}: skipped, {record['skipped']} (shortest: {int(tokens.min())})")
        else:
            log(
                f"curriculum stage {i}: {steps} steps on the {record['sequences']} of {len(train_ids)} "
                f"training sequences with ≤ {max_tokens} tokens"
            )
            res = train(
                model,
                train_ids[short],
                test_ids,
                replace(train_cfg, steps=steps),
                Path(run_dir) / "curriculum" / f"stage{i}",
                pad_id=pad_id,
                progress=progress,
                run_info={**(run_info or {}), "curriculum_stage": i},
            )
            record.update(res.to_dict())
            log(f"  best held-out loss of the stage {res.best_eval_loss:.4f}")
        records.append(record)
    return records


def test_best(
    run_dir: Path, world: World, test_seqs: list[list[str]], eval_sequences: int, progress: bool = True, log=print
):
    """The next-token test of ``run_dir/best`` on the first ``eval_sequences`` held-out sequences
    (0: all), saved beside it and logged; returns the result."""
    from interp.metrics.next_token import next_token_test
    from interp.models.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run_dir / "best")
    scored = test_seqs if eval_sequences == 0 else test_seqs[:eval_sequences]
    nt = next_token_test(ckpt.bridge, world, scored, progress=progress)
    nt.save(run_dir)
    log(str(nt))
    return nt


def _save(model, path: Path, world: World) -> None:
    from interp.models.checkpoint import save_checkpoint

    save_checkpoint(model, world, path)
