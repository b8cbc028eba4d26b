"""An interrupted and resumed sweep of the whole manual split: the README's recipe, Ctrl-C after a
while, the same command again; both timings and the largest peak RSS.

    python bench/resume_whole_split.py [--after 240] [--model DIR] [--data FILE.csv] [--out DIR]

The first ``interp sweep --method prefix --layers 0,15,29`` (no ``--batch-size``: the budget
batch) gets SIGINT after ``--after`` seconds — sent by this process, as a terminal's Ctrl-C is, to a
child whose SIGINT is not ignored (a shell's ``cmd &`` would ignore it) — and must end with exit
status 130 and "interrupted: K of N units are kept"; the rerun must say "resuming: K of N units
already done" and finish. Compare its ``sweep.csv`` with an uninterrupted run's to check equality
(``tests/test_resume.py`` does on tiny models).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from real_model import MANUAL  # the manual split: ../shared/data or $INTERP_SHARED_DATA


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--after", type=float, default=240, help="seconds before the Ctrl-C (default 240)")
    ap.add_argument("--model", help="model folder (default: SmolLM2-135M-Instruct from interp models get)")
    ap.add_argument("--data", type=Path, default=MANUAL, help="PragWorld CSV (default: the manual split)")
    ap.add_argument(
        "--out", type=Path, default=Path("runs/resume_whole_split"), help="the sweep's folder (emptied first)"
    )
    args = ap.parse_args()
    model = args.model
    if model is None:
        from interp.models.registry import get_model

        model = str(get_model("smollm2-135m-instruct", log=sys.stderr))
    shutil.rmtree(args.out, ignore_errors=True)
    cmd = [sys.executable, "-m", "interp.cli", "sweep", "--model", model, "--data", str(args.data)]
    cmd += ["--method", "prefix", "--layers", "0,15,29", "--out", str(args.out), "--quiet"]
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), " ".join(cmd[2:]), flush=True)

    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    t = time.perf_counter()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        _, err = p.communicate(timeout=args.after)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate()
    first = time.perf_counter() - t
    print(f"first run: exit {p.returncode}, {first:.1f} s\n{err.strip()[-600:]}", flush=True)
    t = time.perf_counter()
    q = subprocess.run(cmd, capture_output=True, text=True, check=False)
    second = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 1e9
    print(f"second run: exit {q.returncode}, {second:.1f} s\n{q.stderr.strip()[-600:]}", flush=True)
    print(f"both: {first + second:.1f} s; largest peak RSS {rss:.2f} GB; folder {args.out}")


if __name__ == "__main__":
    main()
