"""Calibration of the layer-verdict rule: simulated sweeps with known truth through the shipped code.

Each replication simulates one sweep — an effect matrix ``effect[row, layer]`` whose true layer
means θ_ℓ are known — builds a :class:`~interp.analysis.engines.sweeps.SweepResult` with its ``group``
column and runs it through :func:`interp.analysis.verdicts.layers.layer_verdicts` exactly as shipped (and
the other rules beside it, on the same sweep). Per design and rule it reports, with Monte Carlo
standard errors √(p(1 − p)/R) over R replications:

- **FWER**: the share of sweeps with at least one false verdict. A verdict is false when the
  truth contradicts its claim: ``harmful`` claims θ > δ, ``useful`` θ < −δ, ``negligible`` |θ| ≤ δ
  (``inconclusive`` claims nothing). The /1 rule has no margin: its ``harmful`` claims θ > 0;
- **coverage**: the share of sweeps whose intervals cover *every* layer's θ at once;
- **power**: the share of truly affected layers (|θ| > δ) given the right verdict, and of null
  layers (θ = 0) called ``negligible``.

Rules (all at 95 %): ``v1`` — the /1 rule (rows resampled, per-layer percentile interval, no
margin: what verdicts were before); ``per-layer`` — groups resampled, marginal bootstrap-t
intervals, margin (``--per-layer``); ``rows`` — simultaneous band but rows resampled
(``--resample rows``); ``shipped`` — groups, simultaneous max-|t| band, margin (the default);
``holm`` — Holm's step-down over the 3L one-sided bootstrap-t tests of the same replicates
(harmful: θ ≤ δ rejected; useful: θ ≥ −δ rejected; negligible: both θ ≥ δ and θ ≤ −δ rejected),
the alternative the band was chosen against (it gives no intervals, so no coverage); ``holm-t`` —
the same with p-values from Student's t with G − 1 degrees of freedom instead of the bootstrap
(bootstrap p-values cannot go below 1/(B + 1), and Holm's smallest threshold is α/(3L)).

The simulated effects: ``effect_iℓ = θ_ℓ + s_ℓ (√ρ A_gℓ + √(1 − ρ) E_iℓ)`` with a group part A
(ICC ρ = 0.6: "rows in a group share most of their variation") and a row part E, each correlated
across layers (half of each is shared by every layer, as real sweeps' layers are), Gaussian or
Student-t with 3 degrees of freedom (heavy-tailed, scaled to unit variance); per-layer scales
s_ℓ vary by a factor e ≈ 2.7 and are set so that a layer's true standard error is δ/4. Row
structures: 200 independent rows; 200 rows in 40 groups of 5; the PragWorld manual split's 98
groups (its 500 rows, grouped as the published evaluation groups them). True effects: 0, 1 or 5
layers (all 4 of a 4-layer sweep) at θ = ±(δ + 3 SE), signs alternating. Power by effect size:
one harmful layer at θ = δ + k·SE, k = 0 … 5.

    python bench/verdict_calibration.py                  # R = 1000, B = 2000 (≈ 1 h single-threaded)
    python bench/verdict_calibration.py --reps 200 --quick

Writes ``--out`` (default ``bench/out/verdict_calibration``): ``calibration.csv``, ``power.csv``,
``calibration.md`` (the tables) and ``calibration.json`` (settings).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]

MANUAL_CSV = REPO.parent / "shared" / "data" / "pragworld" / "Manual_Dataset_500_Final.csv"
RULES = ("v1", "per-layer", "rows", "shipped", "holm", "holm-t")
MARGIN = 1.0  # δ, in the simulated metric's units
SE_TARGET = 0.25  # a layer's true standard error, in units of δ
#: the margins every rule is judged at: 0 (sign only, ``--min-effect 0``) and δ = 4 SE
MARGINS = (0.0, MARGIN)


def structure(name: str) -> np.ndarray:
    """One group id per row."""
    if name == "independent":
        return np.arange(200)
    if name == "groups 40x5":
        return np.repeat(np.arange(40), 5)
    if name == "pragworld manual":
        from interp.datasets.pragworld import load_pragworld

        return load_pragworld(MANUAL_CSV, grouping="reference").rows["group"].to_numpy()
    raise ValueError(name)


def mean_sd(groups: np.ndarray, rho: float) -> float:
    """The true standard deviation of a layer's mean for unit scale: √(ρ Σ m_g² / n² + (1 − ρ)/n)."""
    _, m = np.unique(groups, return_counts=True)
    n = len(groups)
    return math.sqrt(rho * (m**2).sum() / n**2 + (1 - rho) / n)


def _noise(rng: np.random.Generator, shape: tuple[int, ...], dist: str) -> np.ndarray:
    if dist == "gaussian":
        return rng.standard_normal(shape)
    return rng.standard_t(3, shape) / math.sqrt(3.0)  # unit variance


def simulate(
    rng: np.random.Generator,
    groups: np.ndarray,
    theta: np.ndarray,
    scale: np.ndarray,
    dist: str,
    rho: float = 0.6,
    tau: float = 0.5,
) -> np.ndarray:
    """``effect[row, layer]``: θ + s·(√ρ·group part + √(1−ρ)·row part), each part a share τ common
    to every layer (module docstring)."""
    _, g = np.unique(groups, return_inverse=True)
    n_g, n, n_l = int(g.max()) + 1, len(groups), len(theta)
    a = math.sqrt(tau) * _noise(rng, (n_g, 1), dist) + math.sqrt(1 - tau) * _noise(rng, (n_g, n_l), dist)
    e = math.sqrt(tau) * _noise(rng, (n, 1), dist) + math.sqrt(1 - tau) * _noise(rng, (n, n_l), dist)
    return theta + scale * (math.sqrt(rho) * a[g] + math.sqrt(1 - rho) * e)


def sweep_of(effects: np.ndarray, groups: np.ndarray):
    from interp.analysis.engines.sweeps import SweepResult

    n, n_l = effects.shape
    frame = pd.DataFrame(
        {
            "example": np.tile(np.arange(n), n_l),
            "layer": np.repeat(np.arange(n_l), n),
            "clean": 0.0,
            "ablated": effects.T.ravel(),
            "effect": effects.T.ravel(),
            "group": np.tile(groups, n_l),
        }
    )
    return SweepResult(frame, {"metric": "simulated", "higher_is_better": True, "groups": "simulated groups"})


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) by its continued fraction (Lentz's
    method, as in Numerical Recipes §6.4); no SciPy in the environment."""
    if x <= 0.0 or x >= 1.0:
        return float(x >= 1.0)
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-12:
            break
    return front * (f - 1.0)


def student_sf(x: np.ndarray, df: float) -> np.ndarray:
    """P(T ≥ x) for Student's t with ``df`` degrees of freedom: ½ I_{ν/(ν+x²)}(ν/2, ½) for x ≥ 0."""
    x = np.asarray(x, dtype=float)
    tail = np.array([0.5 * _betainc(df / 2, 0.5, df / (df + v * v)) for v in x.ravel()]).reshape(x.shape)
    return np.where(x >= 0, tail, 1.0 - tail)


def holm(
    effects: np.ndarray,
    groups: np.ndarray,
    n_boot: int,
    seed: int,
    delta: float,
    alpha: float = 0.05,
    p_values: str = "bootstrap",
) -> np.ndarray:
    """Verdicts by Holm's step-down over the 3L one-sided tests (module docstring) of the
    studentized statistics (θ̂ ∓ δ)/ŝe, with p-values from the bootstrap-t replicates of the
    shipped rule (``bootstrap``: (1 + #{t* beyond}) / (B + 1)) or from Student's t with G − 1
    degrees of freedom (``t``)."""
    from interp.analysis.verdicts.bands import group_index, group_sums, replicates, resample_counts

    index, g = group_index(groups, len(effects))
    s, m = group_sums(effects, index, g)
    est, se, dev, se_star = replicates(s, m, resample_counts(g, n_boot, np.random.default_rng(seed)))
    t = dev / se_star  # signed studentized deviations [B, L]

    def p_above(x: np.ndarray) -> np.ndarray:  # P(T ≥ x) per layer
        if p_values == "t":
            return student_sf(x, g - 1)
        return (1 + (t >= x).sum(0)) / (n_boot + 1)

    def p_below(x: np.ndarray) -> np.ndarray:
        return p_above(-x) if p_values == "t" else (1 + (t <= x).sum(0)) / (n_boot + 1)

    p_harm = p_above((est - delta) / se)
    p_use = p_below((est + delta) / se)
    p_negl = np.maximum(p_below((est - delta) / se), p_above((est + delta) / se))
    p = np.concatenate([p_harm, p_use, p_negl])
    order = np.argsort(p, kind="stable")
    reject = np.zeros(len(p), bool)
    for k, j in enumerate(order):
        if p[j] > alpha / (len(p) - k):
            break
        reject[j] = True
    n_l = len(est)
    out = np.full(n_l, "inconclusive", dtype=object)
    out[reject[2 * n_l :]] = "negligible"
    out[reject[:n_l]] = "harmful"
    out[reject[n_l : 2 * n_l]] = "useful"
    return out


def false_verdicts(verdict: np.ndarray, theta: np.ndarray, delta: float) -> np.ndarray:
    """Per layer: does the verdict claim something the truth contradicts?"""
    return (
        ((verdict == "harmful") & (theta <= delta))
        | ((verdict == "useful") & (theta >= -delta))
        | ((verdict == "negligible") & (np.abs(theta) > delta))
    )


def one_sweep(
    effects: np.ndarray, groups: np.ndarray, theta: np.ndarray, n_boot: int, seed: int, rules: tuple[str, ...]
) -> dict[tuple[str, float], dict[str, float]]:
    """Every rule at every margin of :data:`MARGINS` on one simulated sweep: false verdicts,
    coverage, right calls (keyed by (rule, margin); the /1 rule only at its own margin, 0)."""
    from interp.analysis.verdicts.layers import classify, layer_verdicts, legacy_verdicts

    sweep = sweep_of(effects, groups)
    intervals: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    shipped = layer_verdicts(sweep, n_boot=n_boot, seed=seed, min_effect=MARGIN).frame
    intervals["shipped"] = shipped.ci_low.to_numpy(), shipped.ci_high.to_numpy()
    if "per-layer" in rules:  # --per-layer: the same replicates, each layer's own interval
        intervals["per-layer"] = shipped.marginal_low.to_numpy(), shipped.marginal_high.to_numpy()
    if "rows" in rules:
        f = layer_verdicts(sweep, n_boot=n_boot, seed=seed, min_effect=MARGIN, resample="rows").frame
        intervals["rows"] = f.ci_low.to_numpy(), f.ci_high.to_numpy()
    verdicts: dict[tuple[str, float], tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]] = {}
    for rule, (lo, hi) in intervals.items():
        for margin in MARGINS:
            # the shipped verdicts at δ = MARGIN are the frame's own; every other one is the same classify
            v = shipped.verdict.to_numpy() if rule == "shipped" and margin == MARGIN else classify(lo, hi, margin)
            verdicts[(rule, margin)] = v, (lo, hi)
    if "v1" in rules:
        f = legacy_verdicts(sweep, n_boot=n_boot, seed=seed).frame
        verdicts[("v1", 0.0)] = f.verdict.to_numpy(), (f.ci_low.to_numpy(), f.ci_high.to_numpy())
    for rule, pv in (("holm", "bootstrap"), ("holm-t", "t")):
        if rule in rules:
            for margin in MARGINS:
                verdicts[(rule, margin)] = holm(effects, groups, n_boot, seed, margin, p_values=pv), None
    out = {}
    for (rule, margin), (verdict, iv) in verdicts.items():
        affected, null = np.abs(theta) > margin, theta == 0
        wrong = false_verdicts(verdict, theta, margin)
        right = np.where(theta > 0, verdict == "harmful", verdict == "useful")
        out[(rule, margin)] = {
            "any_false": float(wrong.any()),
            "n_false": float(wrong.sum()),
            "covered": math.nan if iv is None else float(((iv[0] <= theta) & (theta <= iv[1])).all()),
            "right": float(right[affected].sum()),
            "affected": float(affected.sum()),
            "negligible": float((verdict[null] == "negligible").sum()),
            "null": float(null.sum()),
        }
    return out


def design(name: str, n_layers: int, dist: str, k: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    groups = structure(name)
    scale = np.exp(rng.uniform(-0.5, 0.5, n_layers)) * SE_TARGET * MARGIN / mean_sd(groups, 0.6)
    se = scale * mean_sd(groups, 0.6)
    theta = np.zeros(n_layers)
    for j in range(min(k, n_layers)):
        theta[j] = (1 if j % 2 == 0 else -1) * (MARGIN + 3 * se[j])
    return groups, scale, theta, se


def run_design(
    name: str,
    n_layers: int,
    dist: str,
    k: int,
    reps: int,
    n_boot: int,
    seed: int,
    theta: np.ndarray | None = None,
    rules: tuple[str, ...] = RULES,
) -> dict[tuple[str, float], dict[str, float]]:
    rng = np.random.default_rng(seed)
    groups, scale, th, _ = design(name, n_layers, dist, k, rng)
    th = th if theta is None else theta
    totals: dict[tuple[str, float], dict[str, float]] = {}
    for r in range(reps):
        res = one_sweep(simulate(rng, groups, th, scale, dist), groups, th, n_boot, seed * 100_003 + r, rules)
        for rule, d in res.items():
            t = totals.setdefault(rule, {})
            for key, v in d.items():
                t[key] = t.get(key, 0.0) + v
    return totals


def _p(x: float, reps: int) -> tuple[float, float]:
    p = x / reps
    return p, math.sqrt(p * (1 - p) / reps)


def calibration_rows(
    totals: dict[tuple[str, float], dict[str, float]], reps: int, **where: object
) -> list[dict[str, object]]:
    rows = []
    for (rule, margin), t in totals.items():
        fwer, fwer_se = _p(t["any_false"], reps)
        cov, cov_se = (math.nan, math.nan) if math.isnan(t["covered"]) else _p(t["covered"], reps)
        power = t["right"] / t["affected"] if t["affected"] else math.nan
        power_se = math.sqrt(power * (1 - power) / t["affected"]) if t["affected"] else math.nan
        negl = t["negligible"] / t["null"] if t["null"] else math.nan
        rows.append(
            {
                **where,
                "margin": "none" if rule == "v1" else margin,
                "rule": rule,
                "fwer": fwer,
                "fwer_se": fwer_se,
                "coverage": cov,
                "coverage_se": cov_se,
                "false_per_sweep": t["n_false"] / reps,
                "power": power,
                "power_se": power_se,
                "null_negligible": negl,
                "reps": reps,
            }
        )
    return rows


def _fmt(v: float, se: float) -> str:
    return "–" if math.isnan(v) else f"{v:.3f} ± {se:.3f}"


def meets_bar(r: object) -> bool:
    """FWER ≤ 0.05 and coverage ≥ 0.95, each within two Monte Carlo standard errors."""
    return r.fwer - 2 * r.fwer_se <= 0.05 and r.coverage + 2 * r.coverage_se >= 0.95


def markdown(cal: pd.DataFrame, power: pd.DataFrame) -> str:
    lines = [
        "| rows | layers | noise | true effects | margin δ | rule | FWER | coverage | false / sweep | power | "
        "nulls negligible | bar |",
        "|" + "---|" * 12,
    ]
    for r in cal.itertuples(index=False):
        bar = ("✓" if meets_bar(r) else "✗") if r.rule == "shipped" else ""
        margin = r.margin if isinstance(r.margin, str) else f"{r.margin:g}"
        lines.append(
            f"| {r.structure} | {r.layers} | {r.noise} | {r.effects} | {margin} | {r.rule} | "
            f"{_fmt(r.fwer, r.fwer_se)} | "
            f"{_fmt(r.coverage, r.coverage_se)} | {r.false_per_sweep:.3f} | {_fmt(r.power, r.power_se)} | "
            f"{'–' if math.isnan(r.null_negligible) else f'{r.null_negligible:.3f}'} | {bar} |"
        )
    lines += ["", "Power by effect size (one harmful layer at θ = δ + k·SE; share of sweeps calling it harmful):", ""]
    ks = sorted(power.k.unique())
    lines += ["| rows | layers | rule | " + " | ".join(f"k = {k:g}" for k in ks) + " |", "|" + "---|" * (3 + len(ks))]
    for (st, n_l, rule), g in power.groupby(["structure", "layers", "rule"], sort=False):
        cells = [_fmt(*g[g.k == k][["power", "power_se"]].iloc[0]) for k in ks]
        lines.append(f"| {st} | {n_l} | {rule} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=1000, help="replications per design (default 1000)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates per sweep (default 2000)")
    p.add_argument("--power-reps", type=int, default=None, help="replications per power point (default --reps)")
    p.add_argument("--quick", action="store_true", help="the grouped structure only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "verdict_calibration"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from tqdm import tqdm

    structures = ["groups 40x5"] if args.quick else ["independent", "groups 40x5", "pragworld manual"]
    cells = [
        (st, n_l, dist, k) for st in structures for n_l in (4, 30) for dist in ("gaussian", "t3") for k in (0, 1, 5)
    ]
    t0 = time.perf_counter()
    rows = []
    for i, (st, n_l, dist, k) in enumerate(tqdm(cells, desc="designs")):
        totals = run_design(st, n_l, dist, k, args.reps, args.n_boot, args.seed + i)
        rows += calibration_rows(totals, args.reps, structure=st, layers=n_l, noise=dist, effects=min(k, n_l))
    cal = pd.DataFrame(rows)
    cal.to_csv(out / "calibration.csv", index=False)
    power_rows = []
    reps = args.power_reps or args.reps
    for j, (st, n_l) in enumerate(
        tqdm(
            [(s, n) for s in ("groups 40x5", "pragworld manual")[: 1 if args.quick else 2] for n in (4, 30)],
            desc="power",
        )
    ):
        rng = np.random.default_rng(10_000 + j)
        groups, _, _, se = design(st, n_l, "gaussian", 0, rng)
        for k in (0, 1, 2, 3, 4, 5):
            theta = np.zeros(n_l)
            theta[0] = MARGIN + k * se[0]
            totals = run_design(st, n_l, "gaussian", 0, reps, args.n_boot, 10_000 + j, theta=theta)
            for (rule, margin), t in totals.items():
                if rule != "v1" and margin != MARGIN:
                    continue
                pw, pw_se = _p(t["right"], reps)
                power_rows.append(
                    {"structure": st, "layers": n_l, "rule": rule, "k": k, "power": pw, "power_se": pw_se, "reps": reps}
                )
    power = pd.DataFrame(power_rows)
    power.to_csv(out / "power.csv", index=False)
    seconds = time.perf_counter() - t0
    text = markdown(cal, power)
    cmd = "python bench/verdict_calibration.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (out / "calibration.md").write_text(f"Command: `{cmd.strip()}`; {seconds / 60:.1f} min.\n\n{text}\n")
    (out / "calibration.json").write_text(
        json.dumps(
            {
                "command": cmd.strip(),
                "reps": args.reps,
                "n_boot": args.n_boot,
                "seed": args.seed,
                "margin": MARGIN,
                "se_target": SE_TARGET,
                "rules": RULES,
                "seconds": round(seconds, 1),
                "machine": platform.platform(),
                "all_designs_meet_the_bar": bool(all(meets_bar(r) for r in cal[cal.rule == "shipped"].itertuples())),
            },
            indent=2,
        )
    )
    print(text)
    print(f"\n{seconds / 60:.1f} min; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
