"""The README's demo tables, generated from a run's ``results.json`` (so they cannot drift).

Prints the Markdown block of an ``interp run`` folder (default ``runs/demo``): the machine and
stage timings, the world-model table (Vafa et al. Table 1 on this world), greedy routes and
P(end | at the destination), the planted and found harmful layers, the repair. ``--write FILE``
replaces the text between ``<!-- BEGIN demo-results -->`` and ``<!-- END demo-results -->`` in
each FILE; ``--check FILE`` exits 1 when a FILE's block differs from the run's. The block itself:
:func:`interp.viz.demo_block.demo_block`.

    python experiments/demo_results.py runs/demo --write README.md
    python experiments/demo_results.py runs/demo --check README.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from interp.viz.demo_block import current_block, demo_block, replace_block


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", nargs="?", default="runs/demo", help="run folder with results.json (default runs/demo)")
    ap.add_argument("--write", nargs="+", default=[], metavar="FILE", help="replace the block in these files")
    ap.add_argument("--check", nargs="+", default=[], metavar="FILE", help="exit 1 if a file's block differs")
    args = ap.parse_args(argv)
    path = Path(args.run) / "results.json"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: run `interp run` (make demo) first")
    new = demo_block(json.loads(path.read_text()))
    try:
        for f in map(Path, args.write):
            f.write_text(replace_block(f.read_text(), new, str(f)))
            print(f"wrote the demo block of {f}")
        bad = [f for f in args.check if current_block(Path(f).read_text(), f) != new]
    except ValueError as e:  # a file without the markers: one sentence, exit 1
        raise SystemExit(str(e)) from None
    for f in bad:
        print(f"{f}: the demo block differs from {path}", file=sys.stderr)
    if not args.write and not args.check:
        print(new)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
