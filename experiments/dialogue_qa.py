"""Train a small GPT-2 on the dialogue world and score its question answering as PragWorld does.

    python experiments/dialogue_qa.py [--config experiments/configs/dialogue_small.toml]
                                      [--curriculum 1,2 | --curriculum none] [--name NAME]
                                      [--groups 500] [--bench-seed 1000] [--fresh] [--eval-only]

1. Training, with the config's model, data and training settings:
   - ``--curriculum none``: exactly ``interp train --config CONFIG`` (one stage on the config's world);
   - ``--curriculum 1,2`` (the default): short conversations first — the config's world cut to
     at most 1, then 2 utterances, then the config's world itself; ``train.steps`` is split
     equally over the stages and each stage continues the previous one's weights (the trainer is
     called once per stage; its warmup and cosine schedule restart). Without it the model here
     stays at chance (see the README): answering needs a match between the question and
     utterances at varying distances, and a model trained on mixed lengths from the start never
     leaves the answer-prior plateau in this budget, while one that first learns one-utterance
     conversations (fixed positions) carries that over.
   The final stage writes the run folder exactly as ``interp train`` does (``best/``, ``last/``,
   ``data/``, ``train_log.csv``, ``next_token.*``, ``results.json``); warm-up stages go to
   ``curriculum/``. A finished run is not retrained; an interrupted one resumes.
2. Probe accuracy on the run's held-out sequences (``data/test.txt``: no conversation of the
   training set), overall, by question type, yes / no.
3. A synthetic PragWorld file (``pragworld_dialogue.csv`` in the run folder: ``--groups`` originals,
   each followed by one alteration per category, drawn with ``--bench-seed``), read back with the
   benchmark's loader and scored with its metrics: robust accuracy next to plain accuracy and the
   yes / no gap, with three reference answerers — always "no", always "yes", and "ignores the
   alteration" (each altered row answered with its original's gold).

Writes ``dialogue_qa.json`` (every number) and the per-row / per-category tables
(``dialogue_qa*.csv``) in the run folder; prints a summary. The run:
:func:`interp.jobs.dialogue_qa.run_dialogue_qa`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from interp.jobs.dialogue_qa import DialogueQAConfig, run_dialogue_qa, summary_lines

REPO = Path(__file__).resolve().parents[1]

DEFAULT_CONFIG = REPO / "experiments" / "configs" / "dialogue_small.toml"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument(
        "--curriculum",
        default="1,2",
        help="max_utts of the warm-up stages, comma-separated, or 'none' (plain interp train)",
    )
    ap.add_argument("--name", help="run name (default: the config's name)")
    ap.add_argument("--groups", type=int, default=500, help="benchmark groups (originals)")
    ap.add_argument("--bench-seed", type=int, default=1000)
    ap.add_argument("--fresh", action="store_true", help="retrain from scratch")
    ap.add_argument("--eval-only", action="store_true", help="score the run's best checkpoint, do not train")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    out = run_dialogue_qa(DialogueQAConfig(**vars(args)))
    print("\n".join(summary_lines(out)))
    print(Path(out["run_dir"]) / "dialogue_qa.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
