"""Peak memory and time per row of ``interp sweep`` as the dataset grows (issue: memory flat in
the dataset's size).

For each row count (default 17, 120 and 500 manual PragWorld rows) one fresh process runs

    interp sweep --model M --data Manual_Dataset_500_Final.csv --n N --method prefix --layers 0,15,29 --quiet

with the default batch (chosen from the memory budget, :mod:`interp.analysis.engines.budget`) and prints
its peak RSS (``ru_maxrss`` of that process) and the sweep's own seconds (``run.json["sweep_seconds"]``:
the units, without loading the model or the verdicts' bootstrap) per row and per token (the rows'
own tokens, ``sweep.json["packing"]["row_tokens"]``: a prefix sweep's cost follows the tokens, and
the first rows of the file are shorter conversations than the average) and per *unique* token
(``unique_tokens``: a prefix the rows of a pack share counted once — what the prefix sweep computes). The goal: time per row
and peak RSS each within 1.3× across the row counts (the ratios max / min are printed last).

    python bench/sweep_memory.py                      # SmolLM2-135M-Instruct (interp models get smollm2-135m-instruct)
    python bench/sweep_memory.py --quick              # 17 and 120 rows
    python bench/sweep_memory.py --model DIR --data FILE.csv --rows 6,12 --layers 0,1   # any model, any file

Each run writes to a fresh temporary folder (no resume). ``--batch-size`` / ``--max-memory`` are
passed through; ``--method`` (default prefix) and ``--layers`` as in ``interp sweep``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from real_model import MANUAL  # the manual split: ../shared/data or $INTERP_SHARED_DATA


def child(argv: list[str]) -> None:
    """Run one sweep in this process; print ``{"rss": bytes, "wall": s}`` as the last line."""
    from interp.cli import main

    t = time.perf_counter()
    rc = main(["sweep", *argv])
    wall = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux
    print(json.dumps({"rc": rc, "rss": rss, "wall": wall}))


def measure(model: str, data: Path, rows: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--model", model, "--data", str(data), "--n", str(rows), "--method", args.method]
        argv += ["--layers", args.layers, "--out", tmp, "--quiet", "--n-boot", "200"]
        if args.batch_size:
            argv += ["--batch-size", str(args.batch_size)]
        if args.max_memory:
            argv += ["--max-memory", args.max_memory]
        p = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise SystemExit(f"the sweep on {rows} rows failed:\n{p.stderr[-3000:]}")
        got = json.loads(p.stdout.strip().splitlines()[-1])
        run = json.loads((Path(tmp) / "run.json").read_text())
        packing = json.loads((Path(tmp) / "sweep.json").read_text()).get("packing") or {}
    n = int(run["n_rows"])
    tokens = int(packing.get("row_tokens") or 0)
    unique = int(packing.get("unique_tokens") or 0)
    return {
        "rows": n,
        "batch": run["batch"]["batch_size"],
        "estimate_gb": run["batch"]["estimate"] / 1e9,
        "sweep_s": run["sweep_seconds"],
        "s_per_row": run["sweep_seconds"] / n,
        "tokens": tokens,
        "ms_per_token": 1e3 * run["sweep_seconds"] / tokens if tokens else float("nan"),
        "unique": unique,
        "ms_per_unique": 1e3 * run["sweep_seconds"] / unique if unique else float("nan"),
        "wall_s": got["wall"],
        "peak_rss_gb": got["rss"] / 1e9,
    }


def main() -> None:
    if "--child" in sys.argv:
        child([a for a in sys.argv[1:] if a != "--child"])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model folder (default: SmolLM2-135M-Instruct from interp models get)")
    ap.add_argument("--data", type=Path, default=MANUAL, help="PragWorld CSV (default: the manual split)")
    ap.add_argument("--rows", default="17,120,500", help="row counts (default 17,120,500)")
    ap.add_argument("--layers", default="0,15,29", help="swept layers (default 0,15,29)")
    ap.add_argument("--method", default="prefix", help="sweep method (default prefix)")
    ap.add_argument("--quick", action="store_true", help="17 and 120 rows only")
    ap.add_argument("--batch-size", type=int, help="passed to interp sweep (default: from the budget)")
    ap.add_argument("--max-memory", help="passed to interp sweep")
    args = ap.parse_args()
    model = args.model
    if model is None:
        from interp.models.registry import get_model

        model = str(get_model("smollm2-135m-instruct", log=sys.stderr))
    if not args.data.exists():
        raise SystemExit(f"no data file at {args.data} (set INTERP_SHARED_DATA or pass --data)")
    counts = [17, 120] if args.quick else [int(x) for x in args.rows.split(",")]
    from interp.hardware import machine

    info = machine()
    print(
        f"{info['cpu']}, {info['threads']} threads, fp32 matmul peak {info['matmul_peak_gflops']} GFLOP/s "
        "(measured now, beside the runs)"
    )
    print(f"interp sweep --method {args.method} --layers {args.layers} on {args.data.name}, model {model}")
    cols = "rows batch estimate_GB sweep_s s/row tokens ms/token unique ms/unique wall_s peak_RSS_GB".split()
    print(" ".join(f"{c:>11}" for c in cols))
    out = []
    for n in counts:
        r = measure(model, args.data, n, args)
        out.append(r)
        vals = [
            r["rows"],
            r["batch"],
            f"{r['estimate_gb']:.2f}",
            f"{r['sweep_s']:.1f}",
            f"{r['s_per_row']:.3f}",
            r["tokens"],
            f"{r['ms_per_token']:.2f}",
            r["unique"],
            f"{r['ms_per_unique']:.2f}",
            f"{r['wall_s']:.1f}",
            f"{r['peak_rss_gb']:.2f}",
        ]
        print(" ".join(f"{v:>11}" for v in vals), flush=True)
    if len(out) > 1:

        def ratio(key: str) -> float:
            v = [r[key] for r in out]
            return max(v) / min(v)

        print(
            f"ratios max/min across {', '.join(str(r['rows']) for r in out)} rows: time per row "
            f"{ratio('s_per_row'):.2f}×, per token {ratio('ms_per_token'):.2f}×, per unique token "
            f"{ratio('ms_per_unique'):.2f}×, peak RSS {ratio('peak_rss_gb'):.2f}× (goal: each ≤ 1.3×)"
        )


if __name__ == "__main__":
    main()
