"""Do bfloat16 sweeps give float32's verdicts? The verdict-equality table of the precision page.

Three sweeps, each run twice in one process — weights and activations in float32, then in
bfloat16 (the statistics in float32 either way) — with the same rule and bootstrap seed:

- ``demo``: the shipped demo model (``interp/demo_model``, a 4-layer GPT-2 on street routes),
  the MLP zero-out sweep of every layer on 200 fresh routes (next-token loss; ``interp run``'s sweep);
- ``ioi``: SmolLM2-135M-Instruct on 80 IOI prompts, every layer (logit difference);
- ``manual``: SmolLM2-135M-Instruct on the first ``--rows`` manual PragWorld rows, every layer
  (P(gold) of the label prompt, the prefix-shared sweep).

Per sweep: how many layers are *clear* (float32's interval bounds farther than the bfloat16 effect
tolerance from the margin ±min_effect; :mod:`interp.analysis.verdicts.precision`), how many of
those and of all layers get float32's verdict in bfloat16, the largest mean-effect difference, the
tolerance, and the sweep's time in bfloat16 over float32's (measured side by side, the fp32 and
bf16 matmul peaks printed first).

    python bench/bf16_verdicts.py                   # all three (about 15 min on 2 cores)
    python bench/bf16_verdicts.py --cases demo,ioi --rows 40
    python bench/bf16_verdicts.py --runs FP32_DIR BF16_DIR   # two finished `interp sweep` runs of the manual split

``--runs`` compares two folders ``interp sweep --data <manual CSV>`` wrote, in float32 and in
bfloat16 (e.g. the whole split, too long to run twice here): their verdicts as saved, the
tolerance from float32 SmolLM2's logit spread over the split's label prompts.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from real_model import MANUAL  # the manual split: ../shared/data or $INTERP_SHARED_DATA

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "interp" / "demo_model" / "checkpoint"
N_BOOT = 2000


def bf16_matmul_peak(n: int = 1024, repeats: int = 5) -> float:
    """The best FLOP/s of a bfloat16 square ``torch.mm`` (the CPU's bf16 kernels, if any)."""
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def _logit_scale(bridge, ids, mask) -> float:
    """The largest standard deviation over the vocabulary of the float32 logits at a scored
    position (every real position of a route; the last real token of a prompt)."""
    from interp.analysis.engines.scoring import forward

    with torch.no_grad():
        logits = forward(bridge, ids, mask).float()
    return float(logits.std(-1)[mask.bool()].max())


def _last_position_mask(mask: torch.Tensor) -> torch.Tensor:
    last = torch.zeros_like(mask)
    last[torch.arange(len(mask)), mask.sum(1) - 1] = 1
    return last


def demo_case(dtype: torch.dtype) -> tuple[object, float, float | None, int]:
    """(verdicts, sweep seconds, float32 logit scale or None, layers) of the demo model's sweep."""
    from interp.jobs.sweep import run_sweep
    from interp.models.device import Placement

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        run = run_sweep(DEMO, n=200, out=tmp, n_boot=N_BOOT, placement=Placement("cpu", dtype), log=io.StringIO())
        seconds = time.perf_counter() - t
    scale = None
    if dtype == torch.float32:
        from interp.models.checkpoint import load_checkpoint
        from interp.worlds.encoding import encode_sequences

        ckpt = load_checkpoint(DEMO)
        seqs = ckpt.world.generate(200, np.random.default_rng(0))
        ids = encode_sequences(seqs, ckpt.world.vocab, int(ckpt.bridge.cfg.n_ctx))
        scale = _logit_scale(ckpt.bridge, ids, (ids != ckpt.world.vocab.pad_id).long())
    return run.verdicts, seconds, scale, int(run.verdicts.frame["layer"].size)


def api_case(name: str, rows: int, dtype: torch.dtype) -> tuple[object, float, float | None, int]:
    """(verdicts, sweep seconds, float32 logit scale or None, layers) of SmolLM2's IOI or manual sweep."""
    import interp

    model = interp.load_model("smollm2-135m-instruct", dtype=dtype)
    task = interp.ioi(model, n=80) if name == "ioi" else interp.pragworld(model, MANUAL, n=rows)
    t = time.perf_counter()
    result = interp.sweep(model, task, batch_size=None, rule={"n_boot": N_BOOT})
    seconds = time.perf_counter() - t
    scale = None
    if dtype == torch.float32:
        ids, mask = task.inputs()
        scale = _logit_scale(model.bridge, ids, _last_position_mask(mask) * mask)
    return result.verdicts(), seconds, scale, model.n_layers


def print_disagreements(a) -> None:
    """One line per layer whose bfloat16 verdict is not float32's, with both intervals."""
    for _, r in a.frame[~a.frame["agree"]].iterrows():
        print(
            f"    layer {int(r['layer'])}: float32 {r['verdict_float32']} [{r['ci_low_float32']:.3g}, "
            f"{r['ci_high_float32']:.3g}], bfloat16 {r['verdict_half']} [{r['ci_low_half']:.3g}, "
            f"{r['ci_high_half']:.3g}] (nearest threshold {r['distance']:.3g} away)",
            flush=True,
        )


def compare_runs(fp32_dir: str, bf16_dir: str) -> None:
    """The verdict-equality row of two finished ``interp sweep`` runs of the manual split."""
    import interp
    from interp.analysis.verdicts.precision import verdict_agreement
    from interp.models.precision import effect_tolerance

    ref, half = interp.load(fp32_dir).verdicts(), interp.load(bf16_dir).verdicts()
    model = interp.load_model("smollm2-135m-instruct")
    task = interp.pragworld(model, MANUAL)
    ids, mask = task.inputs()
    scale = max(
        _logit_scale(model.bridge, ids[i : i + 16], (_last_position_mask(mask) * mask)[i : i + 16])
        for i in range(0, len(ids), 16)
    )
    tol = effect_tolerance(torch.bfloat16, model.n_layers, scale, ref.meta["metric"])
    a = verdict_agreement(ref, half, tol)
    s = a.summary()
    print(
        f"| manual split ({ref.meta['metric']}, {int(ref.frame['n'].max())} rows) | {s['layers']} | {s['clear']} | "
        f"{s['agree_clear']}/{s['clear']} | {s['agree_all']}/{s['layers']} | {s['max_abs_mean_effect_diff']:.3g} | "
        f"{tol:.3g} |"
    )
    print_disagreements(a)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="demo,ioi,manual", help="which sweeps (default demo,ioi,manual)")
    ap.add_argument("--rows", type=int, default=60, help="manual PragWorld rows (default 60)")
    ap.add_argument(
        "--runs",
        nargs=2,
        metavar=("FP32_DIR", "BF16_DIR"),
        help="instead: compare two finished interp sweep runs of the manual split (float32, bfloat16)",
    )
    args = ap.parse_args()
    if args.runs:
        compare_runs(*args.runs)
        return

    from interp.analysis.verdicts.precision import verdict_agreement
    from interp.hardware import machine
    from interp.models.precision import effect_tolerance

    info = machine()
    print(
        f"{info['cpu']}, {info['threads']} threads, torch {torch.__version__}; matmul peak fp32 "
        f"{info['matmul_peak_gflops']} GFLOP/s, bf16 {bf16_matmul_peak() / 1e9:.1f} GFLOP/s (measured now)"
    )
    print(
        "\n| sweep | layers | clear | clear agreeing | all agreeing | max |Δ mean effect| | effect tolerance "
        "| float32 s | bfloat16 s | bf16 / fp32 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.cases.split(","):
        if name not in ("demo", "ioi", "manual"):
            raise SystemExit(f"unknown case {name!r} (demo, ioi, manual)")
        if name == "manual" and not MANUAL.exists():
            print(f"| manual | skipped: no {MANUAL} (set INTERP_SHARED_DATA) |", flush=True)
            continue
        got = {}
        for dtype in (torch.float32, torch.bfloat16):
            got[dtype] = demo_case(dtype) if name == "demo" else api_case(name, args.rows, dtype)
        (ref, t32, scale, n_layers), (half, t16, _, _) = got[torch.float32], got[torch.bfloat16]
        tol = effect_tolerance(torch.bfloat16, n_layers, float(scale), ref.meta["metric"])
        a = verdict_agreement(ref, half, tol)
        s = a.summary()
        label = f"{name} ({ref.meta['metric']}, {int(ref.frame['n'].max())} rows)"
        print(
            f"| {label} | {s['layers']} | {s['clear']} | {s['agree_clear']}/{s['clear']} | "
            f"{s['agree_all']}/{s['layers']} | {s['max_abs_mean_effect_diff']:.3g} | {tol:.3g} | "
            f"{t32:.1f} | {t16:.1f} | {t16 / t32:.2f} |",
            flush=True,
        )
        print_disagreements(a)


if __name__ == "__main__":
    main()
