"""Costs at real depth: SmolLM2-135M-Instruct (30 layers) on PragWorld label prompts.

Measured in one run, on the first ``--rows`` manual rows (fetched and converted once with
``interp models get smollm2-135m-instruct``), beside the fp32 ``torch.mm`` peak of the same run:

- a label forward (rows/s, batched) and the benchmark prompt's cached greedy generation (rows/s);
- the MLP zero-out sweep over all 30 layers: interp's exact ``reuse`` method against the
  TransformerLens ``run_with_hooks`` loop on the same rows (wall-time ratio printed beside the
  forward-count ratio 2L/(L+1): the loop runs L+1 full forwards, reuse about (L+1)/2), and the
  largest difference of any per-example P(gold) between the two;
- the attribution (AtP) estimate of the same 30-layer sweep against the exact one, on the PragWorld
  metric P(gold) and on a log-space metric, log P(gold) (probabilities saturate; a first-order
  estimate is better on a log scale): Spearman correlation over (example, layer) cells, the share
  of same-sign cells, and the correlation of the per-layer means (what a verdict reads);
- one fine-tuning step (4 rows, answer-token loss) plain vs HLS vs ULA, full weights and LoRA;
- achieved FLOP/s of the forward (2 × parameters × tokens, attention scores left out).

    python bench/real_model.py [--rows 8] [--steps 2] [--device cpu] [--dtype float32]

On a GPU (``--device cuda --dtype bfloat16``, what ``bench/gpu_check.sh`` runs) the peak beside the
numbers is that device's ``torch.mm`` peak in that dtype, and the fine-tuning steps are skipped.

The cost per row is what sizes ``experiments/configs/smollm2_pragworld.toml``.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

#: the shared data: ``../shared/data`` beside the checkout, or ``$INTERP_SHARED_DATA``
MANUAL = (
    Path(os.environ.get("INTERP_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
    / "pragworld"
    / "Manual_Dataset_500_Final.csv"
)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    import pandas as pd

    return float(pd.Series(x).rank().corr(pd.Series(y).rank()))


def run_with_hooks_loop(bridge, ids, mask, metric) -> np.ndarray:
    """[1 + L, n] P(gold): the clean forward, then one ``run_with_hooks`` per layer with its MLP zeroed."""
    from interp.analysis.engines.scoring import Batch, to_model_device

    batch = Batch(ids, mask, torch.arange(ids.shape[0]))
    ids, mask = to_model_device(bridge, ids), to_model_device(bridge, mask)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    out = []
    with torch.no_grad():
        out.append(metric(bridge(ids, attention_mask=mask, position_ids=pos), batch).float().cpu().numpy())
        for layer in range(bridge.cfg.n_layers):
            logits = bridge.run_with_hooks(
                ids,
                fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", lambda a, hook: a * 0)],
                attention_mask=mask,
                position_ids=pos,
            )
            out.append(metric(logits, batch).float().cpu().numpy())
    return np.stack(out)


def device_peak(device: str, dtype: torch.dtype, n: int = 4096, repeats: int = 10) -> float:
    """The best FLOP/s of a square ``torch.mm`` on a CUDA device in ``dtype``."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    best = 0.0
    for _ in range(repeats + 3):
        torch.cuda.synchronize(device)
        t = time.perf_counter()
        torch.mm(a, b)
        torch.cuda.synchronize(device)
        best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def step_cost(folder, task, objective: str, lora: bool, steps: int) -> float:
    """Seconds per fine-tuning step on 4 rows (median of ``steps`` after one warm-up step)."""
    from interp.config import LoraSettings, TrainConfig
    from interp.models import load_hf_model
    from interp.train.finetune import _apply_lora
    from interp.train.regularisers import HLS, ULA, ULAHeads
    from interp.train.trainer import train

    model = load_hf_model(folder)
    if lora:
        model = _apply_lora(
            model,
            LoraSettings(
                enabled=True,
                r=16,
                alpha=32,
                target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
            ),
        )
    seqs, start = task.training_rows()
    pad = 49151
    width = max(map(len, seqs))
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    terms = (
        []
        if objective == "plain"
        else [HLS([11, 28, 29], 1e-3)]
        if objective == "hls"
        else [ULA(ULAHeads([3, 4, 10], 576, ("no", "yes"), seed=0), 1e-3)]
    )
    times = []
    for k in range(steps + 1):
        cfg = TrainConfig(
            steps=1, batch_size=4, lr=1e-4, min_lr=1e-5, warmup_steps=0, eval_every=0, checkpoint_every=0, seed=k
        )
        # partial binds this step's cfg now (a lambda would read the loop variable when called)
        _, dt = timed(
            partial(
                train,
                model,
                ids,
                None,
                cfg,
                None,
                pad_id=pad,
                loss_terms=terms,
                labels=torch.tensor(task.gold),
                loss_from=torch.tensor(start),
                progress=False,
            )
        )
        if k:
            times.append(dt)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8, help="manual rows (default 8)")
    p.add_argument("--steps", type=int, default=2, help="timed fine-tuning steps per variant (default 2)")
    p.add_argument("--no-finetune", action="store_true", help="skip the fine-tuning steps")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, auto")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, float16, auto")
    args = p.parse_args(argv)
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.datasets.pragworld import load_pragworld
    from interp.hardware import matmul_peak
    from interp.metrics.pragworld_eval import generate_responses, score_label_prompts
    from interp.models import load_bridge
    from interp.models.device import Placement
    from interp.models.registry import get_model
    from interp.tasks import YesNoTask

    place = Placement.resolve(args.device, args.dtype)
    if place.device.startswith("cuda"):
        peak = device_peak(place.device, place.dtype)
        print(
            f"torch {torch.__version__}, {torch.cuda.get_device_name(place.device)}, {place.dtype}; torch.mm peak "
            f"{peak / 1e9:.1f} GFLOP/s"
        )
    else:
        peak = matmul_peak()
        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {place.device} {place.dtype}; fp32 "
            f"torch.mm peak {peak / 1e9:.1f} GFLOP/s"
        )
    folder = get_model("smollm2-135m-instruct")
    bridge = load_bridge(folder, placement=place)
    n_params = sum(p.numel() for p in bridge.parameters())
    rows = load_pragworld(MANUAL).rows.iloc[: args.rows]
    task = YesNoTask.pragworld(folder, rows, prompt="label")
    ids, mask = task.inputs()
    tokens = int(mask.sum())
    print(
        f"{args.rows} label prompts, {tokens / args.rows:.0f} tokens each on average; {n_params / 1e6:.0f}M parameters"
    )
    # partial, not lambda: the calls bind the bridge now, so `del bridge` below frees it with no closure left over it
    _, dt = timed(partial(score_label_prompts, bridge, task.prompts, batch_size=args.rows, chat_template=False))
    print(
        f"label forward: {args.rows / dt:.2f} rows/s ({dt / args.rows:.2f} s a row); "
        f"{2 * n_params * tokens / dt / 1e9:.1f} GFLOP/s = {2 * n_params * tokens / dt / peak:.0%} of the peak"
    )
    bench = YesNoTask.pragworld(folder, rows, prompt="benchmark", chat_template=True)
    _, dt = timed(
        partial(generate_responses, bridge, bench.prompts, batch_size=args.rows, chat_template=True, max_new_tokens=16)
    )
    print(
        f"benchmark prompt, chat template, cached greedy generation (≤ 16 tokens): {args.rows / dt:.2f} rows/s "
        f"({dt / args.rows:.2f} s a row)"
    )
    metric = task.metric()
    L = int(bridge.cfg.n_layers)
    base, t_loop = timed(partial(run_with_hooks_loop, bridge, ids, mask, metric))
    sweep, t_reuse = timed(
        partial(mlp_zero_sweep, bridge, ids, metric, mask, None, batch_size=args.rows, method="reuse")
    )
    wide = sweep.frame.pivot(index="example", columns="layer", values="ablated").to_numpy().T
    diff = max(
        float(np.abs(wide - base[1:]).max()),
        float(np.abs(sweep.frame.groupby("example").clean.first().to_numpy() - base[0]).max()),
    )
    print(
        f"MLP zero-out, {L} layers, {args.rows} rows: run_with_hooks loop {t_loop:.1f} s ({t_loop / args.rows:.1f} s a "
        f"row), reuse {t_reuse:.1f} s ({t_reuse / args.rows:.1f} s a row): {t_loop / t_reuse:.2f}× (forward-count "
        f"ratio 2L/(L+1) = {2 * L / (L + 1):.2f}); max |ΔP(gold)| {diff:.1e}"
    )
    from interp.analysis.engines.attribution import mlp_zero_attribution

    def log_p_gold(logits, batch):
        return torch.log(metric(logits, batch).clamp_min(1e-12))

    for name, m in (("P(gold)", metric), ("log P(gold)", log_p_gold)):
        exact = (
            sweep if m is metric else mlp_zero_sweep(bridge, ids, m, mask, None, batch_size=args.rows, method="reuse")
        )
        atp, t_atp = timed(partial(mlp_zero_attribution, bridge, ids, m, mask, batch_size=args.rows))
        e = exact.frame.pivot(index="example", columns="layer", values="effect")
        a = atp.frame.pivot(index="example", columns="layer", values="effect").loc[e.index, e.columns]
        live = e.to_numpy().ravel() != 0
        same = float((np.sign(a.to_numpy().ravel()) == np.sign(e.to_numpy().ravel()))[live].mean())
        print(
            f"attribution vs exact MLP zero-out on {name}: Spearman {spearman(a.to_numpy().ravel(), e.to_numpy().ravel()):.2f} "
            f"over {e.size} cells, same sign on {same:.0%} of live cells; per-layer means Spearman "
            f"{spearman(a.mean().to_numpy(), e.mean().to_numpy()):.2f}; {t_atp:.1f} s (exact reuse {t_reuse:.1f} s)"
        )
    del bridge
    if args.no_finetune or place.device != "cpu":
        return
    four = YesNoTask.pragworld(
        folder, load_pragworld(MANUAL.with_name("synthetic_final.csv")).rows.iloc[:4], prompt="label"
    )
    for lora in (False, True):
        costs = {o: step_cost(folder, four, o, lora, args.steps) for o in ("plain", "hls", "ula")}
        print(
            f"fine-tuning step, 4 rows, {'LoRA r 16 (all linear layers)' if lora else 'full weights'}: "
            + ", ".join(f"{o} {c:.1f} s" for o, c in costs.items())
            + f" (HLS / plain {costs['hls'] / costs['plain']:.2f}, ULA / plain {costs['ula'] / costs['plain']:.2f})"
        )


if __name__ == "__main__":
    main()
