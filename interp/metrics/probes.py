"""Current-state linear probes at every layer (Vafa et al. 2024, §2.2 and Table 1, "probe").

The paper's existing diagnostic fits a *linear* (multinomial logistic) probe from the last layer of
a model to the current world state (for maps: the current intersection) and reports its held-out
accuracy. A high score says the state is linearly decodable from the residual stream; the paper's
point is that it does *not* say the model's world model is coherent (its Table 1: probes score
0.91–0.99 for models whose compression precision is 0.05–0.50). We fit one probe per layer, so the
layer where the state becomes decodable is visible too.

Pipeline
1. :func:`collect_activations` reads the residual stream with ``bridge.run_with_cache`` at the
   embeddings (``blocks.0.hook_resid_pre``, layer index ``-1``), after every block
   (``blocks.{l}.hook_resid_post``, layer ``l``) and after the final LayerNorm
   (``ln_final.hook_out``, layer index ``n_layers``, named ``final``: HF's ``hidden_states[-1]``,
   which is what the reference code probes as "the last layer"). Position ``p`` of the model input
   ``<bos> t1 … tk`` has read ``<bos>`` + ``t1..tp``, so it is paired with
   ``world.state_label(states_along(tokens)[p])`` — the state *after* ``p`` tokens; padding
   positions are never read. Positions whose label is ``None`` (streets: before the origin and
   after ``end``) are skipped and counted.
2. :func:`fit_probe` fits multinomial logistic regression in torch: features standardised with the
   training mean/std, L2 penalty ``l2·‖W‖²`` added to the mean cross-entropy, full-batch L-BFGS
   (strong-Wolfe line search) from zero weights, so the fit is deterministic without a seed and
   stops at ``max_iter`` iterations (reported: ``converged`` is False when the cap was hit).
   Measured on a tiny-city layer (1,914 positions, 32 features, 20 classes): L-BFGS reaches the
   optimum in 155 iterations / 0.4 s; Adam (lr 0.01 or 0.05) is still above it after 2,000 steps.
3. A label that is a tuple is a vector of categorical components (Connect-4: 7 column heights;
   Othello: 64 squares, each empty/black/white): one probe per component. The components are
   fitted jointly, but the objective is a sum of independent per-component terms, so the optimum
   is exactly that of separate probes. Accuracy is the mean over components; ``all_correct`` is the
   share of positions where every component is right; per-component accuracies are kept.
4. Probes are trained on one set of sequences and scored on another (the split is by sequence,
   so positions of one sequence never straddle it). A class never seen in training is never
   predicted; test labels of such classes count as errors and are counted (``unseen``).
   Standard errors are clustered by sequence (:func:`interp.results.ratio_se`); the baseline is
   the share of the most common class of each component *on the test set* — the best any
   constant predictor could score there, so a probe must beat it to show information.

Cost. Activations are kept only at labelled positions and only for the requested layers, as one
float32 tensor of ``n_layers_probed × n_positions × d_model × 4`` bytes per split (e.g. 1,000
streets routes of ~50 tokens through a 12-layer, 768-wide GPT-2: 13 × 50,000 × 768 × 4 B ≈ 2 GB;
the tiny test models need kilobytes). The forward caches one batch at a time
(``batch_size × seq_len × d_model`` per layer). Fitting holds the standardised features of one
layer plus ``chunk`` rows of logits (``rows × components × classes``) at a time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from interp.models.device import model_device
from interp.results import ratio_se, save_result
from interp.worlds.base import World
from interp.worlds.encoding import encode_sequences

#: layer index of the embeddings (the residual stream entering block 0)
EMBED = -1
#: default L2 weight on ‖W‖² next to the *mean* cross-entropy. On standardised features this is
#: weak (sklearn's default C=1 is 0.5/n_train per row: 5e-5 at 10,000 positions); it keeps the
#: optimum finite when classes are linearly separable, which they often are.
DEFAULT_L2 = 1e-4
DEFAULT_MAX_ITER = 500
_MASKED = -1e9  # logit of a class absent from a component's training labels: probability 0


def residual_hook_name(layer: int, n_layers: int | None = None) -> str:
    """The hook alias of the residual stream probed at ``layer`` (-1: the embeddings; ``n_layers``:
    after the final LayerNorm)."""
    if layer == EMBED:
        return "blocks.0.hook_resid_pre"
    if n_layers is not None and layer == n_layers:
        return "ln_final.hook_out"
    return f"blocks.{layer}.hook_resid_post"


def layer_name(layer: int, n_layers: int | None = None) -> str:
    """A probe layer's display name: ``embed``, ``block L``, or ``final`` (after the final
    LayerNorm)."""
    if layer == EMBED:
        return "embed"
    return "final" if n_layers is not None and layer == n_layers else f"block {layer}"


def check_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """Validated, sorted, de-duplicated layer indices (default: all, ``-1 … n_layers``, where
    ``n_layers`` is the final LayerNorm's output)."""
    if layers is None:
        return list(range(EMBED, n_layers + 1))
    out = sorted({int(x) for x in layers})
    if not out:
        raise ValueError("no layers to probe")
    bad = [x for x in out if not EMBED <= x <= n_layers]
    if bad:
        raise ValueError(
            f"layer {bad[0]} is out of range: this model has {n_layers} layers, so probe "
            f"layers are {EMBED} (embeddings) … {n_layers - 1}, and {n_layers} (after "
            f"the final LayerNorm)"
        )
    return out


# ---- activations ---------------------------------------------------------------------------------


@dataclass
class ProbeData:
    """Residual-stream activations at the labelled positions of a set of sequences.

    Row ``i`` of every layer's features is position ``position[i]`` of sequence ``sequence[i]``
    and its label is ``labels[i]`` (the state after ``position[i]`` tokens).
    """

    layers: tuple[int, ...]
    features: Float[Tensor, "layer row d_model"]
    labels: list[Any]
    sequence: Int[np.ndarray, " row"]
    position: Int[np.ndarray, " row"]
    n_sequences: int
    #: positions whose ``state_label`` is None (not probed)
    skipped: int
    #: blocks of the model (layer index ``n_layers`` is the final LayerNorm's output); None: unknown
    n_layers: int | None = None

    def __post_init__(self) -> None:
        n = len(self.labels)
        if self.features.shape[:2] != (len(self.layers), n) or len(self.sequence) != n or len(self.position) != n:
            raise ValueError(
                f"ProbeData: features {tuple(self.features.shape)} for {len(self.layers)} layers, "
                f"{n} labels, {len(self.sequence)} sequence ids, {len(self.position)} positions"
            )

    def layer(self, layer: int) -> Float[Tensor, "row d_model"]:
        if layer not in self.layers:
            raise ValueError(f"layer {layer} was not collected (have {self.layers})")
        return self.features[self.layers.index(layer)]


def _labelled_positions(world: World, sequences: Sequence[Sequence[str]]):
    seq_idx, pos_idx, labels, skipped = [], [], [], 0
    for i, tokens in enumerate(sequences):
        for p, state in enumerate(world.states_along(tokens)):
            label = world.state_label(state)
            if label is None:
                skipped += 1
                continue
            seq_idx.append(i)
            pos_idx.append(p)
            labels.append(label)
    return np.array(seq_idx, dtype=np.int64), np.array(pos_idx, dtype=np.int64), labels, skipped


@torch.no_grad()
def collect_activations(
    bridge: Any,
    world: World,
    sequences: Sequence[Sequence[str]],
    layers: Sequence[int] | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> ProbeData:
    """Residual activations (float32, on CPU) of ``bridge`` at every labelled position.

    Uses ``run_with_cache(names_filter=[aliases], stop_at_layer=max(layers)+1)``, so neither the
    unembedding nor blocks after the last probed layer are cached. The bridge may return a hook
    under its alias or its canonical name (``blocks.0.hook_in`` for ``blocks.0.hook_resid_pre``);
    both are accepted.
    """
    from tqdm.auto import tqdm

    if not sequences:
        raise ValueError("no sequences to probe")
    n_layers = int(bridge.cfg.n_layers)
    layers = check_layers(layers, n_layers)
    names = [residual_hook_name(x, n_layers) for x in layers]
    canonical = {}
    for name in names:
        if name not in bridge.hook_dict:
            raise ValueError(f"the model has no hook point {name!r}; cannot read its residual stream")
        canonical[name] = bridge.hook_dict[name].name
    seq_idx, pos_idx, labels, skipped = _labelled_positions(world, sequences)
    features = torch.empty(len(layers), len(labels), int(bridge.cfg.d_model), dtype=torch.float32)
    stop = None if layers[-1] == n_layers else max(1, layers[-1] + 1)  # final LayerNorm: whole model
    device = model_device(bridge)  # where the inputs go (under a device map: the first module's device)
    was_training = bridge.training
    bridge.eval()
    try:
        row = 0
        for start in tqdm(range(0, len(sequences), batch_size), disable=not progress, desc="activations"):
            chunk = sequences[start : start + batch_size]
            end = int(np.searchsorted(seq_idx, start + len(chunk)))
            if end == row:
                continue
            ids = encode_sequences(chunk, world.vocab, n_ctx=int(bridge.cfg.n_ctx)).to(device)
            _, cache = bridge.run_with_cache(ids, names_filter=names, stop_at_layer=stop)
            keys = set(cache.keys())
            rows = torch.from_numpy(seq_idx[row:end] - start).to(device)
            cols = torch.from_numpy(pos_idx[row:end]).to(device)
            for li, name in enumerate(names):
                key = name if name in keys else canonical[name]
                if key not in keys:
                    raise RuntimeError(f"run_with_cache returned no activation for {name!r} ({key!r})")
                features[li, row:end] = cache[key][rows, cols].to(torch.float32).cpu()
            row = end
    finally:
        bridge.train(was_training)
    return ProbeData(
        layers=tuple(layers),
        n_layers=n_layers,
        features=features,
        labels=labels,
        sequence=seq_idx,
        position=pos_idx,
        n_sequences=len(sequences),
        skipped=skipped,
    )


# ---- labels --------------------------------------------------------------------------------------


def _as_components(labels: Sequence[Any], components: bool) -> list[tuple[Hashable, ...]]:
    """Every label as a tuple of components (a scalar label is a 1-tuple)."""
    if not components:
        return [(x,) for x in labels]
    k = len(labels[0])
    for i, x in enumerate(labels):
        if not isinstance(x, tuple) or len(x) != k:
            raise ValueError(f"label {i} is {x!r}: with component labels every label must be a tuple of {k} components")
    return list(labels)


@dataclass(frozen=True)
class LabelCoding:
    """Per component, the classes seen in training (in order of first appearance) → ids."""

    classes: tuple[tuple[Hashable, ...], ...]

    @classmethod
    def fit(cls, rows: Sequence[tuple[Hashable, ...]]) -> "LabelCoding":
        k = len(rows[0])
        return cls(tuple(tuple(dict.fromkeys(r[j] for r in rows)) for j in range(k)))

    @property
    def n_components(self) -> int:
        return len(self.classes)

    def encode(self, rows: Sequence[tuple[Hashable, ...]]) -> Int[Tensor, "row k"]:
        """Class ids; ``-1`` for a class never seen in training (it is never predicted)."""
        maps = [{c: i for i, c in enumerate(cs)} for cs in self.classes]
        return torch.tensor([[m.get(v, -1) for m, v in zip(maps, r)] for r in rows], dtype=torch.long).reshape(
            len(rows), self.n_components
        )


# ---- the probe -----------------------------------------------------------------------------------


@dataclass
class LinearProbe:
    """Standardisation + one multinomial logistic regression per label component."""

    mean: Float[Tensor, " d"]
    scale: Float[Tensor, " d"]
    weight: Float[Tensor, "k d c"]
    bias: Float[Tensor, "k c"]
    #: classes each component saw in training (the others are never predicted)
    class_mask: Bool[Tensor, "k c"]
    iterations: int
    converged: bool
    #: final training objective (mean cross-entropy summed over components + L2 term)
    loss: float

    def logits(self, x: Float[Tensor, "n d"]) -> Float[Tensor, "n k c"]:
        z = torch.einsum("nd,kdc->nkc", (x - self.mean) / self.scale, self.weight) + self.bias
        return z.masked_fill(~self.class_mask, _MASKED)

    def predict(self, x: Float[Tensor, "n d"], chunk: int = 8192) -> Int[Tensor, "n k"]:
        """Most likely training class per component (in ``chunk``-row pieces to bound memory)."""
        return torch.cat([self.logits(x[s : s + chunk]).argmax(dim=-1) for s in range(0, len(x), chunk)])


def fit_probe(
    x: Float[Tensor, "n d"],
    y: Int[Tensor, "n k"],
    n_classes: Sequence[int] | None = None,
    l2: float = DEFAULT_L2,
    max_iter: int = DEFAULT_MAX_ITER,
    chunk: int = 8192,
) -> LinearProbe:
    """Fit ``k`` multinomial logistic regressions (one per column of ``y``) on shared features.

    Minimises ``Σ_k [mean_i CE(x_i W_k + b_k, y_ik) + l2·‖W_k‖²]`` over standardised features with
    full-batch L-BFGS from zero weights (deterministic). ``y[:, k]`` holds class ids
    ``0 … n_classes[k]-1`` (default: its maximum + 1). The loss is accumulated over ``chunk`` rows
    at a time, so memory is ``chunk × k × max(n_classes)`` logits, whatever ``n``.
    """
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ValueError(f"need x [n, d] and y [n, k] with n > 0, got {tuple(x.shape)} and {tuple(y.shape)}")
    if (y < 0).any():
        raise ValueError("training labels must be class ids ≥ 0")
    if l2 < 0 or max_iter < 1:
        raise ValueError(f"need l2 ≥ 0 and max_iter ≥ 1, got l2={l2}, max_iter={max_iter}")
    x = x.to(torch.float32)
    n, d = x.shape
    k = y.shape[1]
    if n_classes is None:
        n_classes = (y.max(dim=0).values + 1).tolist()
    c = max(n_classes)
    present = torch.zeros(k, c, dtype=torch.bool)
    present[torch.arange(k).repeat_interleave(n), y.T.reshape(-1)] = True
    mean = x.mean(dim=0)
    std = x.std(dim=0, unbiased=False)
    scale = torch.where(std > 1e-8, std, torch.ones_like(std))  # constant features → 0
    xs = (x - mean) / scale
    w = torch.zeros(k, d, c, requires_grad=True)
    b = torch.zeros(k, c, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-6,
        tolerance_change=1e-10,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Tensor:
        opt.zero_grad()
        total = torch.zeros(())
        for s in range(0, n, chunk):
            z = torch.einsum("nd,kdc->nkc", xs[s : s + chunk], w) + b
            z = z.masked_fill(~present, _MASKED)
            part = F.cross_entropy(z.reshape(-1, c), y[s : s + chunk].reshape(-1), reduction="sum") / n
            part.backward()
            total += part.detach()
        reg = l2 * (w * w).sum()
        reg.backward()
        return total + reg.detach()

    with torch.enable_grad():
        opt.step(closure)  # returns the loss at the *start*; the final one is recomputed below
        loss = float(closure())
    iters = int(opt.state[w].get("n_iter", 0))
    return LinearProbe(
        mean=mean,
        scale=scale,
        weight=w.detach(),
        bias=b.detach(),
        class_mask=present,
        iterations=iters,
        converged=iters < max_iter,
        loss=loss,
    )


# ---- result --------------------------------------------------------------------------------------


@dataclass
class ProbeResult:
    """Held-out probe accuracy per layer.

    ``layers``: one row per probed layer — ``layer`` (name), ``index`` (-1 embeddings … n_layers-1,
    n_layers the final LayerNorm's output, ``final``),
    ``accuracy`` (mean over components) and ``se`` (clustered by sequence), ``baseline``
    (test-set majority class), ``all_correct``/``all_correct_se`` (every component right; equals
    accuracy for scalar labels), ``n_train``/``n_test`` (positions), ``skipped`` (positions without
    a label, train + test), ``unseen`` (test labels of classes absent from training),
    ``iterations``, ``converged``. ``per_component``: accuracy and baseline per (layer, component).
    """

    layers: pd.DataFrame
    per_component: pd.DataFrame = field(repr=False)
    n_components: int
    train_sequences: int
    test_sequences: int
    skipped_train: int
    skipped_test: int
    #: test sequences that also occur (token for token) in the training sequences
    test_in_train: int
    settings: dict[str, Any]

    @property
    def best_layer(self) -> int:
        """Index of the layer with the highest accuracy (the earliest on ties)."""
        return int(self.layers.loc[self.layers["accuracy"].idxmax(), "index"])

    def summary(self) -> dict[str, Any]:
        """Headline numbers and one record per layer; NaN (an SE from < 2 sequences) becomes None,
        so the result is strict JSON."""
        best = self.layers.loc[self.layers["index"] == self.best_layer].iloc[0]
        last = self.layers.iloc[-1]
        return _json_safe(
            {
                "probe_best_layer": self.best_layer,
                "probe_best_accuracy": float(best["accuracy"]),
                "probe_best_se": float(best["se"]),
                "probe_last_layer": int(last["index"]),
                "probe_last_accuracy": float(last["accuracy"]),  # the reference's Table 1 "probe" when
                # the final LayerNorm's output was probed (the default)
                "probe_last_se": float(last["se"]),
                "probe_baseline": float(best["baseline"]),
                "components": self.n_components,
                "train_sequences": self.train_sequences,
                "test_sequences": self.test_sequences,
                "train_positions": int(best["n_train"]),
                "test_positions": int(best["n_test"]),
                "skipped_train": self.skipped_train,
                "skipped_test": self.skipped_test,
                "unseen": int(best["unseen"]),
                "test_in_train": self.test_in_train,
                "not_converged": int((~self.layers["converged"]).sum()),
                **{f"probe_{k}": v for k, v in self.settings.items()},
                "per_layer": self.layers.to_dict(orient="records"),
            }
        )

    def __str__(self) -> str:
        lines = [
            f"{'layer':<10} {'index':>5}  {'accuracy':>17}  {'baseline':>8}"
            + (f"  {'all correct':>17}" if self.n_components > 1 else "")
            + f"  {'iters':>5}"
        ]
        for r in self.layers.itertuples():
            line = f"{r.layer:<10} {r.index:>5}  {r.accuracy:>8.4f} ± {r.se:.4f}  {r.baseline:>8.4f}"
            if self.n_components > 1:
                line += f"  {r.all_correct:>8.4f} ± {r.all_correct_se:.4f}"
            lines.append(line + f"  {r.iterations:>5}" + ("" if r.converged else " (cap)"))
        r = self.layers.iloc[0]
        lines.append(
            f"{r.n_train} train / {r.n_test} test positions from {self.train_sequences} / "
            f"{self.test_sequences} sequences; {self.skipped_train + self.skipped_test} "
            f"unlabelled positions skipped; {r.unseen} test labels unseen in training; "
            f"{self.n_components} component(s); best layer {self.best_layer}"
        )
        return "\n".join(lines)

    @property
    def frame(self) -> pd.DataFrame:
        """One row per probed layer (``layers``): a probe's unit is a layer."""
        return self.layers

    def save(self, folder: str | Path, stem: str = "probe") -> Path:
        return save_result(folder, stem, self.summary(), layers=self.layers, components=self.per_component)


def _json_safe(x: Any) -> Any:
    """Plain Python values for JSON: numpy scalars unboxed, NaN → None, recursively."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and x != x:
        return None
    return x


def _majority_share(y: Int[Tensor, "n k"]) -> Float[Tensor, " k"]:
    """Per component, the share of the most common value (unseen classes, -1, count as a value)."""
    out = []
    for j in range(y.shape[1]):
        _, counts = torch.unique(y[:, j], return_counts=True)
        out.append(counts.max().item() / len(y))
    return torch.tensor(out)


def probe_layers(
    bridge: Any,
    world: World,
    train_sequences: Sequence[Sequence[str]],
    test_sequences: Sequence[Sequence[str]],
    layers: Sequence[int] | None = None,
    l2: float = DEFAULT_L2,
    max_iter: int = DEFAULT_MAX_ITER,
    components: bool | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> ProbeResult:
    """Fit a current-state probe on ``train_sequences`` at each layer and score it on ``test_sequences``.

    ``layers``: indices to probe (default all: -1 for the embeddings, then 0 … n_layers-1, then
    n_layers, after the final LayerNorm — the reference's "last layer").
    ``components``: treat tuple labels as independent categorical components (default: yes when
    the labels are tuples; False makes each whole tuple one class). Test sequences that also
    occur in the training set are counted (``test_in_train``), not removed: the caller owns the split.
    """
    layers = check_layers(layers, int(bridge.cfg.n_layers))  # fail before any work
    if not train_sequences or not test_sequences:
        raise ValueError(
            f"probes need non-empty train and test sequences (got {len(train_sequences)} and {len(test_sequences)})"
        )
    train = collect_activations(bridge, world, train_sequences, layers, batch_size, progress)
    test = collect_activations(bridge, world, test_sequences, train.layers, batch_size, progress)
    train_set = {tuple(s) for s in train_sequences}
    overlap = sum(tuple(s) in train_set for s in test_sequences)
    return probe_activations(train, test, l2=l2, max_iter=max_iter, components=components, test_in_train=overlap)


def probe_activations(
    train: ProbeData,
    test: ProbeData,
    l2: float = DEFAULT_L2,
    max_iter: int = DEFAULT_MAX_ITER,
    components: bool | None = None,
    test_in_train: int = 0,
) -> ProbeResult:
    """Fit on ``train`` and score on ``test`` at every layer they share (the model-free half of
    :func:`probe_layers`; any features work, which is what the oracle tests use)."""
    if train.layers != test.layers:
        raise ValueError(f"train layers {train.layers} ≠ test layers {test.layers}")
    if not train.labels or not test.labels:
        raise ValueError(
            f"no labelled positions ({len(train.labels)} train, {len(test.labels)} test; "
            f"{train.skipped + test.skipped} positions had no state label)"
        )
    if components is None:
        components = isinstance(train.labels[0], tuple)
    train_rows = _as_components(train.labels, components)
    test_rows = _as_components(test.labels, components)
    coding = LabelCoding.fit(train_rows)
    if len(test_rows[0]) != coding.n_components:
        raise ValueError(f"test labels have {len(test_rows[0])} components, training labels {coding.n_components}")
    y_train, y_test = coding.encode(train_rows), coding.encode(test_rows)
    n_classes = [len(c) for c in coding.classes]
    unseen = int((y_test < 0).sum())
    baseline_k = _majority_share(y_test)
    seq = torch.from_numpy(test.sequence)
    labelled = torch.bincount(seq, minlength=test.n_sequences)
    has = labelled > 0  # sequences with no labelled position are no unit of the SE

    def clustered(hit: Tensor):
        per_seq = torch.zeros(test.n_sequences).index_add_(0, seq, hit.float())
        return ratio_se(per_seq[has].numpy(), labelled[has].numpy())

    rows, comp_rows = [], []
    for layer in train.layers:
        probe = fit_probe(train.layer(layer), y_train, n_classes, l2=l2, max_iter=max_iter)
        correct = probe.predict(test.layer(layer)) == y_test  # unseen (-1) is never right
        acc, all_ok = clustered(correct.float().mean(dim=1)), clustered(correct.all(dim=1))
        rows.append(
            {
                "layer": layer_name(layer, train.n_layers),
                "index": layer,
                "accuracy": acc.mean,
                "se": acc.se,
                "baseline": float(baseline_k.mean()),
                "all_correct": all_ok.mean,
                "all_correct_se": all_ok.se,
                "n_train": len(train.labels),
                "n_test": len(test.labels),
                "skipped": train.skipped + test.skipped,
                "unseen": unseen,
                "iterations": probe.iterations,
                "converged": probe.converged,
            }
        )
        for j, a in enumerate(correct.float().mean(dim=0).tolist()):
            comp_rows.append(
                {
                    "layer": layer_name(layer, train.n_layers),
                    "index": layer,
                    "component": j,
                    "accuracy": a,
                    "baseline": float(baseline_k[j]),
                    "classes": n_classes[j],
                }
            )
    return ProbeResult(
        layers=pd.DataFrame(rows),
        per_component=pd.DataFrame(comp_rows),
        n_components=coding.n_components,
        train_sequences=train.n_sequences,
        test_sequences=test.n_sequences,
        skipped_train=train.skipped,
        skipped_test=test.skipped,
        test_in_train=test_in_train,
        settings={"l2": l2, "max_iter": max_iter},
    )
