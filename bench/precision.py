"""Half precision against float32 on SmolLM2-135M-Instruct: the dtype table.

On the first ``--rows`` manual PragWorld rows, each path in float32, bfloat16 and float16 on
``--device`` (the same rows, the same code): label P(yes), the MLP zero-out sweep's P(gold) at
``--layers``, greedy generation of the benchmark prompt (chat template) and one full-weight HLS step
(two synthetic rows). Per path and dtype: the largest |difference| from float32, the tolerance of
:mod:`interp.models.precision` (its largest value over the rows), how many answers / tokens agree,
and the wall time beside float32's (ratios in one run; the machine's load distorts absolute times).

    OMP_NUM_THREADS=1 python bench/precision.py [--rows 6] [--device cpu] [--layers 0 15 29]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

#: the shared data: ``../shared/data`` beside the checkout, or ``$INTERP_SHARED_DATA``
DATA = (
    Path(os.environ.get("INTERP_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data") / "pragworld"
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=6)
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, nargs="+", default=[0, 15, 29])
    p.add_argument("--data", type=Path, default=DATA, help="the PragWorld folder (default ../shared/data/pragworld)")
    p.add_argument("--no-train", action="store_true", help="skip the HLS step")
    args = p.parse_args(argv)

    from interp.analysis.engines.scoring import forward
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.config import TrainConfig
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.pragworld_eval import score_label_prompts
    from interp.models import load_bridge, load_hf_model
    from interp.models.device import Placement
    from interp.models.generate import greedy_generate
    from interp.models.precision import logit_tolerance, probability_tolerance
    from interp.models.registry import get_model
    from interp.tasks import YesNoTask
    from interp.train.regularisers import HLS
    from interp.train.trainer import train

    folder = get_model("smollm2-135m-instruct")
    rows = load_pragworld(args.data / "Manual_Dataset_500_Final.csv").rows.iloc[: args.rows]
    task = YesNoTask.pragworld(folder, rows, prompt="label", chat_template=False)
    bench = YesNoTask.pragworld(folder, rows.iloc[:3], prompt="benchmark", chat_template=True)
    ids, mask = task.inputs()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}; {args.rows} manual "
        f"rows, sweep layers {args.layers}"
    )
    out: dict[str, dict] = {}
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        r: dict = {}
        t0 = time.perf_counter()
        bridge = load_bridge(folder, device=args.device, dtype=dtype)
        t = time.perf_counter()
        last = forward(bridge, ids, mask)
        last = last[torch.arange(len(ids), device=last.device), (mask.sum(1) - 1).to(last.device)].float().cpu()
        r["margin"] = (last[:, task.yes_id] - last[:, task.no_id]).numpy()
        r["scale"] = last.std(-1).numpy()
        r["p_yes"] = score_label_prompts(bridge, task.prompts, task.tokenization.tokenizer, chat_template=False)
        r["t_label"] = time.perf_counter() - t
        t = time.perf_counter()
        frame = mlp_zero_sweep(bridge, ids, task.metric(), mask, args.layers, batch_size=args.rows).frame
        r["sweep"], r["t_sweep"] = frame, time.perf_counter() - t
        t = time.perf_counter()
        r["gen"] = greedy_generate(bridge, bench.ids, pad_id=bench.pad_id, max_new_tokens=12)
        r["t_gen"] = time.perf_counter() - t
        if dtype == torch.float32:  # the float32 top-two gaps along float32's own continuation
            full = [list(p) + g for p, g in zip(bench.ids, r["gen"])]
            from interp.worlds.encoding import pad_right

            fid, fmask, _ = pad_right(full, bench.pad_id)
            lg = forward(bridge, fid, fmask).float().cpu()
            r["gaps"] = [lg[i, len(p) - 1 : len(p) - 1 + len(g)] for i, (p, g) in enumerate(zip(bench.ids, r["gen"]))]
        del bridge
        if not args.no_train:
            synth = YesNoTask.pragworld(folder, load_pragworld(args.data / "synthetic_final.csv").rows.iloc[:2])
            seqs, _ = synth.training_rows()
            width = max(map(len, seqs))
            tids = torch.tensor([s + [49151] * (width - len(s)) for s in seqs])
            model = load_hf_model(folder, Placement(args.device, dtype))
            cfg = TrainConfig(
                steps=1,
                batch_size=2,
                lr=1e-4,
                min_lr=1e-4,
                warmup_steps=0,
                eval_every=0,
                checkpoint_every=0,
                seed=0,
                grad_clip=0.0,
            )
            t = time.perf_counter()
            log = train(
                model, tids, None, cfg, None, pad_id=49151, loss_terms=[HLS([3, 17], 1e-3)], progress=False
            ).history.iloc[-1]
            r["t_hls"] = time.perf_counter() - t
            r["hls"] = (float(log["next_token_loss"]), float(log["hls"]))
            del model
        r["t_all"] = time.perf_counter() - t0
        out[str(dtype).removeprefix("torch.")] = r
        print(f"{dtype}: {r['t_all']:.0f} s", flush=True)

    ref = out["float32"]
    n_layers = 30
    print(
        "\n| path | dtype | max abs diff vs float32 | tolerance (largest over rows) | decisions agreeing | time / float32 |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name in ("bfloat16", "float16"):
        r, dt = out[name], getattr(torch, name)
        tol_p = np.array([probability_tolerance(dt, n_layers, float(s)) for s in ref["scale"]])
        tol_m = np.array([logit_tolerance(dt, n_layers, float(s)) for s in ref["scale"]])
        dm = np.abs(r["margin"] - ref["margin"])
        clear = np.abs(ref["margin"]) > tol_m
        same = (r["p_yes"] > 0.5) == (ref["p_yes"] > 0.5)
        print(f"| yes/no margin (logits) | {name} | {dm.max():.3g} | {tol_m.max():.3g} | — | — |")
        print(
            f"| label P(yes) | {name} | {np.abs(r['p_yes'] - ref['p_yes']).max():.3g} | {tol_p.max():.3g} | "
            f"{int(same[clear].sum())}/{int(clear.sum())} answers (|margin| > tol) | "
            f"{r['t_label'] / ref['t_label']:.2f} |"
        )
        a, b = ref["sweep"], r["sweep"]
        d = np.abs(b[["clean", "ablated"]].to_numpy() - a[["clean", "ablated"]].to_numpy()).max()
        de = np.abs(b["effect"].to_numpy() - a["effect"].to_numpy())
        t = tol_p[a["example"].to_numpy()]
        big = np.abs(a["effect"].to_numpy()) > 2 * t
        sign = (np.sign(a["effect"].to_numpy()) == np.sign(b["effect"].to_numpy()))[big]
        print(
            f"| sweep P(gold) ({len(args.layers)} layers) | {name} | {d:.3g} (effect {de.max():.3g}) | "
            f"{tol_p.max():.3g} (effect 2×) | {int(sign.sum())}/{int(big.sum())} effect signs (|effect| > 2 tol) | "
            f"{r['t_sweep'] / ref['t_sweep']:.2f} |"
        )
        agree = total = 0
        for steps, ta, tb in zip(ref["gaps"], ref["gen"], r["gen"]):
            top2 = steps.topk(2, -1).values
            gap = (top2[:, 0] - top2[:, 1]).numpy()
            tol = np.array([logit_tolerance(dt, n_layers, float(s)) for s in steps.std(-1)])
            tie = int(np.argmax(gap < tol)) if (gap < tol).any() else len(ta)
            agree += sum(x == y for x, y in zip(ta[:tie], tb[:tie]))
            total += tie
        same_all = sum(x == y for ta, tb in zip(ref["gen"], r["gen"]) for x, y in zip(ta, tb))
        print(
            f"| greedy tokens (3 rows × ≤ 12) | {name} | {same_all}/{sum(map(len, ref['gen']))} equal | first near-tie"
            f" | {agree}/{total} before it | {r['t_gen'] / ref['t_gen']:.2f} |"
        )
        if "hls" in r:
            tol_l = logit_tolerance(dt, n_layers, float(np.mean(ref["scale"])))
            print(
                f"| HLS step: next-token loss | {name} | {abs(r['hls'][0] - ref['hls'][0]):.3g} | ~{tol_l:.3g} | — | "
                f"{r['t_hls'] / ref['t_hls']:.2f} |"
            )
            print(
                f"| HLS step: penalty (relative) | {name} | {abs(r['hls'][1] / ref['hls'][1] - 1):.3g} | "
                f"{8 * torch.finfo(dt).eps / 2 * (2 * n_layers) ** 0.5:.3g} | — | — |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
