"""Where SmolLM2-135M-Instruct computes indirect-object identification (IOI), checked against
TransformerLens's own patching: accuracy, the two patching maps, attribution vs exact, attention
views of the top heads, and the 30-layer MLP zero-out sweep with the calibrated verdicts.

    OMP_NUM_THREADS=1 python experiments/ioi_smollm2.py --out runs/ioi_smollm2           # ~30-60 min, 1 thread
    OMP_NUM_THREADS=1 python experiments/ioi_smollm2.py --quick --out runs/ioi_quick     # CI size, ~5 min

Steps (each writes into ``OUT``):

1. ``eval``: IOI accuracy and mean logit difference IO − S with group-bootstrap intervals, per
   template and order (:func:`interp.analysis.evaluation.contrast.evaluate_contrast`) on ``--n-eval``
   prompts of all eight templates (:func:`interp.datasets.ioi.ioi_examples`).
2. ``maps``: on ``--n-maps`` prompts of one template (positions must line up), the ABC-corrupted
   run restored from the clean one — ``resid_pre`` by layer × position and each head's output
   (``hook_z``, all positions) by layer × head (:func:`interp.analysis.engines.stacked_patching.stacked_patching`);
   heatmaps of the normalised logit difference (patched − corrupted) / (clean − corrupted), CSVs.
3. ``tl_check``: the same cells from ``transformer_lens.patching.get_act_patch_resid_pre`` /
   ``get_act_patch_attn_head_out_all_pos`` on the same bridge and prompts (``--check-layers``; all
   layers with ``--check-all``): the maximum absolute difference, printed.
4. ``attribution``: AtP of the head map (one clean forward, one corrupted forward, one backward;
   :func:`interp.analysis.engines.attribution.activation_attribution`) against the exact map: Spearman
   over all 270 heads and over the top 20 by exact effect, same-sign share; scatter.
5. ``views``: CircuitsVis attention patterns of the top heads by |effect| (offline HTML).
6. ``sweep``: MLP zero-out of all 30 layers on the ``eval`` prompts (logit difference), verdicts
   by the calibrated rule (:func:`interp.analysis.verdicts.layers.layer_verdicts`; groups = template ×
   name pair) and the paper's raw rule beside it.

``results.json`` holds every number with the date, the machine and the fp32 matmul peak measured in
this run (:func:`interp.hardware.machine`). The run: :func:`interp.jobs.ioi_circuit.run_ioi_circuit`.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from interp.datasets.ioi import IOI_TEMPLATES  # noqa: E402  (after the offline switch)
from interp.jobs.ioi_circuit import MODEL, IOICircuitConfig, run_ioi_circuit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="runs/ioi_smollm2", help="run folder (default runs/ioi_smollm2)")
    p.add_argument("--quick", action="store_true", help="CI size: 16 eval prompts, 2 map prompts, 2 checked layers")
    p.add_argument("--model", default=MODEL, help=f"a pinned name, a model folder or a .gguf file (default {MODEL})")
    p.add_argument("--n-eval", type=int, help="IOI prompts for accuracy and the MLP sweep (default 48; quick 16)")
    p.add_argument("--n-maps", type=int, help="prompts of one template for the patching maps (default 8; quick 2)")
    p.add_argument("--template", type=int, default=0, help="index of the template the maps use (default 0)")
    p.add_argument(
        "--check-layers", type=int, nargs="+", help="layers TransformerLens recomputes (default 0 12 23 29; quick 0 29)"
    )
    p.add_argument("--check-all", action="store_true", help="TransformerLens recomputes every cell of both maps")
    p.add_argument("--top", type=int, default=6, help="top heads to view (default 6)")
    p.add_argument("--seed", type=int, default=0, help="prompt and bootstrap seed (default 0)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if not 0 <= args.template < len(IOI_TEMPLATES):
        p.error(f"--template must be in 0..{len(IOI_TEMPLATES) - 1}, got {args.template}")
    command = "python experiments/ioi_smollm2.py " + " ".join(sys.argv[1:] if argv is None else argv)
    run_ioi_circuit(IOICircuitConfig(**vars(args)), command, say=lambda s: print(s, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
