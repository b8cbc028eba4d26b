"""PragWorld on a real pretrained model, end to end: SmolLM2-135M-Instruct (its GGUF file from the
package index) through (a) Table 1 on the manual split with both prompts, (b) MLP zero-out over
all 30 layers and direct-effect patching, (c) plain / HLS / ULA fine-tuning on the synthetic split,
then (a) and (b) again — the job :func:`interp.jobs.pragworld.run_pragworld_job`.

    python experiments/smollm2_pragworld.py --out runs/smollm2_pragworld            # <= 60 min, 1 thread
    python experiments/smollm2_pragworld.py --quick --out runs/smollm2_quick         # <= 10 min
    python experiments/smollm2_pragworld.py --config experiments/configs/smollm2_pragworld_gpu.toml  # paper size

The same config runs as ``interp run experiments/configs/smollm2_pragworld.toml``. Results:
``OUT/results.json``, ``table1.md``, ``before_after.md``, the figures, ``report.html``. Rerun with
the same ``--out`` to resume (finished evaluations and fine-tuning runs are reused).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "experiments" / "configs"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--config", help="job config (default experiments/configs/smollm2_pragworld.toml)")
    p.add_argument("--quick", action="store_true", help="the quick config (smollm2_pragworld_quick.toml), <= 10 min")
    p.add_argument("--out", help="run folder (default runs/<name>)")
    p.add_argument("--model", help="override the config's model: a pinned name, a model folder or a .gguf file")
    p.add_argument("--fresh", action="store_true", help="delete the run folder first")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.config and args.quick:
        p.error("give --config or --quick, not both")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from interp.jobs.pragworld import load_job_config, run_pragworld_job

    config = args.config or CONFIGS / ("smollm2_pragworld_quick.toml" if args.quick else "smollm2_pragworld.toml")
    cfg = load_job_config(config, model=args.model)
    results = run_pragworld_job(
        cfg, args.out, fresh=args.fresh, progress=not args.no_progress, log=lambda s: print(s, flush=True)
    )
    secs = results["pragworld"]["seconds"]
    print(f"stages (s): {secs}", file=sys.stderr)
    print(results["run_dir"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
