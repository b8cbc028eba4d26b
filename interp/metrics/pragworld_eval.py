"""Evaluating a language model on PragWorld (paper §4; reference facts: ``pragworld.md``): the rows
and prompts come from :mod:`interp.datasets.pragworld` (files, no model), the accuracies from
:func:`interp.metrics.pragworld.score_pragworld`.

Two ways to ask a model, both batched with right padding and an attention mask:

- **benchmark** prompt (:func:`~interp.datasets.pragworld.prompts.benchmark_prompt`): greedy
  generation (:func:`generate_responses`), read by
  :func:`~interp.datasets.pragworld.parse.parse_yes_no`. Generation stops at the end of the
  first line, at an end-of-sequence token or after ``max_new_tokens`` (default 16): the parser
  reads only the first word of the first line, so the explanation the prompt asks for is not
  needed. On a TransformerBridge it reads each prompt once and then one new token per step over a
  KV cache (:mod:`interp.models.generate`); every hook on the bridge — any intervention — runs on
  every generated token, and the tokens equal the full-recompute loop's (``use_cache=False``).
- **label** prompt (:func:`~interp.datasets.pragworld.prompts.label_prompt`): one forward; the
  two-way softmax over the " yes" and " no" logits at the last non-padding position,
  ``P(yes) = softmax(l_yes, l_no)[0] = sigmoid(l_yes - l_no)``; the answer is yes when
  P(yes) > 0.5 (the published ``module_ablation.py``). The rows of a group are scored together
  and read as a token trie, their shared opening once (:func:`score_label_prompts`,
  ``share_prefix``).

The scoring core is two pure functions of logits, for layer sweeps that run their own forwards:
:func:`yes_no_margin` (``l_yes - l_no`` at each row's last real position) and
:func:`p_yes_from_logits`.

**Tokens.** Prompts are encoded, and the " yes" / " no" tokens resolved, in one place for the
whole package: :mod:`interp.tasks.tokens` (the model's own tokenizer — for a TransformerBridge it
is reloaded, since ``bridge.tokenizer`` prepends a BOS the model's own may not add; the BOS rule,
``prepend_bos``; the chat-template rule; the published code's yes/no rule), and the prompts of a
data file by :class:`interp.tasks.YesNoTask`, so ``interp sweep`` and ``interp finetune`` ask a
row exactly as the evaluation does. ``chat_template=None`` (auto, the default here) wraps the
prompt as one user message when the tokenizer has a chat template, as the published runs did for
open models; the layer analyses of the reference scored the label prompt without one
(``chat_template=False``).

**Resuming.** :func:`evaluate_model` appends one JSON record per data row to its output file
(the released outputs' format plus ``row``, ``parsed``, and ``p_yes`` for the label prompt),
flushed after every batch. Run again with the same settings and it keeps the records already
there (each checked against the prompt it would build) and computes only the rest; a partial
last line of an interrupted write is discarded and recomputed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.config import merge_options
from interp.datasets.pragworld.parse import parse_yes_no
from interp.datasets.pragworld.prompts import PROMPTS
from interp.tasks.tokens import (
    check_length,
    encode_prompts,
    own_tokenizer,
    pad_id_of,
    pad_right,
    uses_chat_template,
    yes_no_token_ids,
)

#: settings that must match between an interrupted run and its resumption
_META_KEYS = ("format", "model", "data", "prompt", "chat_template", "prepend_bos", "max_new_tokens", "yes_id", "no_id")


# ---- pure scoring of logits ------------------------------------------------------------------------


def last_position_logits(
    logits: Float[Tensor, "batch pos vocab"], lengths: Int[Tensor, " batch"], padding_side: str = "right"
) -> Float[Tensor, "batch vocab"]:
    """Logits at each row's last real token: position ``lengths - 1`` under right padding (real
    tokens first), position ``-1`` under left padding."""
    if padding_side == "left":
        return logits[:, -1]
    if padding_side != "right":
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    if len(lengths) and (int(lengths.min()) < 1 or int(lengths.max()) > logits.shape[1]):
        raise ValueError(f"lengths must be in [1, {logits.shape[1]}], got {lengths.tolist()}")
    idx = lengths.to(logits.device).long() - 1
    return logits[torch.arange(logits.shape[0], device=logits.device), idx]


def yes_no_margin(
    logits: Float[Tensor, "batch pos vocab"],
    lengths: Int[Tensor, " batch"],
    yes_id: int,
    no_id: int,
    padding_side: str = "right",
) -> Float[Tensor, " batch"]:
    """``l_yes - l_no`` at each row's last real position (float32): the log-odds of the two-way
    yes/no softmax. Positive means the model prefers yes."""
    last = last_position_logits(logits, lengths, padding_side).float()
    return last[:, yes_id] - last[:, no_id]


def p_yes_from_logits(
    logits: Float[Tensor, "batch pos vocab"],
    lengths: Int[Tensor, " batch"],
    yes_id: int,
    no_id: int,
    padding_side: str = "right",
) -> Float[Tensor, " batch"]:
    """``P(yes) / (P(yes) + P(no))`` at each row's last real position (= sigmoid of the margin)."""
    return torch.sigmoid(yes_no_margin(logits, lengths, yes_id, no_id, padding_side))


# ---- tokenizer and model plumbing ------------------------------------------------------------------


def _is_bridge(model: Any) -> bool:
    return hasattr(model, "hook_dict") and hasattr(model, "cfg")


def _tokenizer_of(model: Any, tokenizer: Any) -> Any:
    """``tokenizer``, else the model's own (:func:`interp.tasks.own_tokenizer`: for a
    TransformerBridge *not* ``bridge.tokenizer``, which prepends a BOS the model's may not add)."""
    if tokenizer is not None:
        return tokenizer
    if _is_bridge(model) and getattr(model, "tokenizer", None) is not None:
        return own_tokenizer(model)
    raise ValueError("no tokenizer: pass one, or use a TransformerBridge (its model's own tokenizer is reloaded)")


def _device(model: Any) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def _n_ctx(model: Any) -> int | None:
    if _is_bridge(model):
        n = getattr(model.cfg, "n_ctx", None)
    else:
        cfg = getattr(model, "config", None)
        n = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
    return int(n) if n else None


def model_logits(
    model: Any, ids: Int[Tensor, "batch pos"], mask: Int[Tensor, "batch pos"]
) -> Float[Tensor, "batch pos vocab"]:
    """Logits of a TransformerBridge (hooks active) or a Hugging Face causal LM."""
    if _is_bridge(model):
        return model(ids, return_type="logits", attention_mask=mask)
    return model(input_ids=ids, attention_mask=mask).logits


#: the one encoding path (:mod:`interp.tasks.tokens`), under the names this module always used
_pad_right, _pad_id, _check_length = pad_right, pad_id_of, check_length


def _batches(n: int, batch_size: int):
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for start in range(0, n, batch_size):
        yield start, min(n, start + batch_size)


def _group_blocks(groups: np.ndarray, batch_size: int):
    """``(start, end)`` blocks of at least ``batch_size`` rows (fewer at the end) that end where the
    group changes, so the rows of a group are scored together (they share their prompt's opening)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    start = 0
    for i in range(1, len(groups) + 1):
        if i == len(groups) or (i - start >= batch_size and groups[i] != groups[i - 1]):
            yield start, i
            start = i


def _bar(total: int, progress: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not progress, desc=desc, unit="row")


# ---- scoring and generation ------------------------------------------------------------------------


def length_buckets(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Row indices of each batch: rows sorted by length (stable), ``batch_size`` at a time, so a
    batch pads to the longest of rows of similar length; scatter the results back by index."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def can_share_prefix(model: Any, seqs: Sequence[Sequence[int]]) -> bool:
    """Whether rows may be read tree-packed: no hook on a bridge's hook points (a hook may be tied
    to positions) and every row within a sliding attention window."""
    from interp.models.generate import sliding_window
    from interp.models.packing import position_hooks_registered

    window = sliding_window(model)
    return not position_hooks_registered(model) and (window is None or max(map(len, seqs)) <= window)


@torch.no_grad()
def score_label_prompts(
    model: Any,
    prompts: Sequence[str],
    tokenizer: Any = None,
    *,
    batch_size: int = 8,
    chat_template: bool | None = None,
    yes_no_ids: tuple[int, int] | None = None,
    progress: bool = False,
    prepend_bos: bool | None = None,
    share_prefix: bool = True,
    stats: dict[str, Any] | None = None,
) -> np.ndarray:
    """P(yes) of each prompt: the two-way softmax over the " yes"/" no" logits at its last token.

    ``model`` is a TransformerBridge (its model's own tokenizer is used; hooks registered on it
    apply) or a Hugging Face causal LM with ``tokenizer``. Prompts are encoded by
    :class:`interp.tasks.Tokenization` (``prepend_bos``, ``chat_template``). Returns a float array
    aligned with ``prompts``.

    ``share_prefix`` (default): prompts that start alike are read as token tries, each distinct
    prefix once, logits only at the last tokens (:mod:`interp.models.packing`; equal to reading
    each prompt alone within float error, tested); it falls back to unshared reading while a hook
    is registered on the bridge's hook points (it may be tied to positions) or a prompt exceeds a
    sliding attention window. Otherwise, and with ``share_prefix=False``, prompts are read in
    length buckets (:func:`length_buckets`). ``batch_size`` rows per forward (packed: that many
    times the longest prompt's tokens). ``stats``, when given, receives the token counts (row,
    unique, padded tokens).
    """
    tok = _tokenizer_of(model, tokenizer)
    yes_id, no_id = yes_no_ids or yes_no_token_ids(tok)
    seqs = encode_prompts(tok, prompts, chat_template, prepend_bos)
    _check_length(seqs, _n_ctx(model), 0)
    device, pad = _device(model), _pad_id(tok)
    out = np.empty(len(seqs), dtype=np.float64)
    if not seqs:
        return out
    with _bar(len(seqs), progress, "P(yes)") as bar:
        if share_prefix and can_share_prefix(model, seqs):
            from interp.models.packing import packed_logits, plan

            if batch_size < 1:
                raise ValueError(f"batch_size must be >= 1, got {batch_size}")
            pp = plan(seqs, model, batch_tokens=batch_size * max(map(len, seqs)), pad_id=pad)
            for pb in pp.batches:
                last = packed_logits(model, pb)[:, None]
                out[pb.rows.numpy()] = (
                    p_yes_from_logits(last, torch.ones(len(last), dtype=torch.long), yes_id, no_id).cpu().numpy()
                )
                bar.update(len(pb.rows))
            if stats is not None:
                stats.update(pp.stats())
            return out
        padded = 0
        for idx in length_buckets([len(s) for s in seqs], batch_size):
            ids, mask, lengths = _pad_right([seqs[i] for i in idx], pad, device)
            logits = model_logits(model, ids, mask)
            out[idx] = p_yes_from_logits(logits, lengths, yes_id, no_id).cpu().numpy()
            padded += int(mask.numel() - mask.sum())
            bar.update(len(idx))
        if stats is not None:
            stats.update(
                {
                    "rows": len(seqs),
                    "row_tokens": sum(map(len, seqs)),
                    "unique_tokens": sum(map(len, seqs)),
                    "padding": padded,
                }
            )
    return out


def _first_line_done(text: str) -> bool:
    """True once the text has a complete non-empty first line (what the parser reads)."""
    stripped = text.lstrip()
    return "\n" in stripped and bool(stripped.split("\n", 1)[0].strip())


@torch.no_grad()
def generate_responses(
    model: Any,
    prompts: Sequence[str],
    tokenizer: Any = None,
    *,
    max_new_tokens: int = 16,
    batch_size: int = 8,
    chat_template: bool | None = None,
    progress: bool = False,
    stop_at_newline: bool = True,
    use_cache: bool | None = None,
    prepend_bos: bool | None = None,
) -> list[str]:
    """Greedy continuations of ``prompts`` (decoded, special tokens skipped), encoded by
    :class:`interp.tasks.Tokenization` (``prepend_bos``, ``chat_template``).

    A row stops at the tokenizer's EOS, when its first line is complete (``stop_at_newline``), or
    after ``max_new_tokens``. Rows are right-padded. ``use_cache`` (default: on for a
    TransformerBridge) reads the prompts once and then one new token per row and step over a KV
    cache; ``use_cache=False`` re-runs each active row in full every step. Both give the same
    tokens, and every hook registered on the bridge runs on every generated token — exactly so
    for hooks that act on each position alike (see :mod:`interp.models.generate` for the
    position-indexed interventions that need ``use_cache=False``, and sliding-window models).
    """
    from interp.models.generate import greedy_generate

    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    tok = _tokenizer_of(model, tokenizer)
    seqs = encode_prompts(tok, prompts, chat_template, prepend_bos)
    _check_length(seqs, _n_ctx(model), max_new_tokens)
    pad = _pad_id(tok)
    eos = getattr(tok, "eos_token_id", None)
    eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
    stop = (lambda new: _first_line_done(tok.decode(new, skip_special_tokens=True))) if stop_at_newline else None
    out: list[str] = []
    with _bar(len(seqs), progress, "generate") as bar:
        for a, b in _batches(len(seqs), batch_size):
            new = greedy_generate(
                model,
                seqs[a:b],
                pad_id=pad,
                max_new_tokens=max_new_tokens,
                eos_ids=eos_ids,
                stop=stop,
                use_cache=use_cache,
            )
            out.extend(tok.decode(n, skip_special_tokens=True) for n in new)
            bar.update(b - a)
    return out


# ---- the resumable evaluation ----------------------------------------------------------------------


@dataclass
class EvalRun:
    """What :func:`evaluate_model` did: the records file, how many rows it reused and computed."""

    path: Path
    records: list[dict[str, Any]]
    reused: int
    computed: int
    discarded_partial_line: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def responses(self) -> list[Any]:
        return [r["response"] for r in self.records]

    @property
    def predictions(self) -> list[str | None]:
        return [r["parsed"] for r in self.records]


def _meta_path(path: Path) -> Path:
    return path.with_name(path.stem + ".meta.json")


def _read_existing(path: Path, prompts: Sequence[str], kind: str) -> tuple[list[dict[str, Any]], bool]:
    """Records already in ``path`` for the first rows (each checked against its prompt), and
    whether a partial last line (an interrupted write) was cut off the file."""
    if not path.exists():
        return [], False
    raw = path.read_bytes()
    cut = raw.rfind(b"\n") + 1
    partial = cut < len(raw)
    if partial:
        with open(path, "r+b") as f:
            f.truncate(cut)
    lines = raw[:cut].decode("utf-8").split("\n")[:-1]
    records = []
    for i, line in enumerate(lines[: len(prompts)]):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}, line {i + 1}: not valid JSON; delete the file or pass --fresh") from None
        if rec.get("row") != i or rec.get("prompt") != prompts[i] or rec.get("prompt_kind") != kind:
            raise ValueError(
                f"{path}, line {i + 1}: this record is not row {i} of the current data and "
                f"{kind} prompt (was the file written for other data or settings?); "
                f"pass --fresh or another --out"
            )
        records.append(rec)
    return records, partial


@dataclass(frozen=True)
class EvalOptions:
    """How :func:`evaluate_model` asks the rows: ``prompt`` (``"benchmark"``: greedy generation of
    at most ``max_new_tokens`` tokens + the parser; ``"label"``: P(yes) from the " yes"/" no"
    logits), ``batch_size`` rows per forward, the chat-template and BOS rules of
    :mod:`interp.tasks.tokens` (``chat_template``, ``prepend_bos``; None: the tokenizer's own), and
    ``limit`` (only the first rows; None: all)."""

    prompt: str = "benchmark"
    batch_size: int = 8
    max_new_tokens: int = 16
    chat_template: bool | None = None
    limit: int | None = None
    prepend_bos: bool | None = None

    def __post_init__(self) -> None:
        if self.prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {PROMPTS}, got {self.prompt!r}")


def evaluate_model(
    model: Any,
    data: Any,
    out: str | os.PathLike,
    options: EvalOptions | None = None,
    *,
    tokenizer: Any = None,
    fresh: bool = False,
    progress: bool = True,
    model_name: str | None = None,
    **settings: Any,
) -> EvalRun:
    """Ask ``model`` every row of ``data`` (a :class:`~interp.datasets.pragworld.PragWorldData`)
    and append one JSON record per row to ``out`` (a ``.jsonl`` file), resuming a previous run.

    ``options``: an :class:`EvalOptions` (the prompt, batch size, …); its fields may also be given
    as keywords (``prompt="label"``). With the ``"label"`` prompt ``response`` is ``"yes"`` or
    ``"no"``. A ``<out stem>.meta.json`` beside the file records the settings; resuming with
    other settings is an error (``fresh=True`` starts over). The prompts and their encoding are
    :class:`interp.tasks.YesNoTask`'s (the model's own tokenizer; ``prepend_bos``,
    ``chat_template``), the same as the sweeps' and fine-tuning's.
    """
    opts = merge_options(EvalOptions, options, settings, "evaluate_model")
    tok = _tokenizer_of(model, tokenizer)
    rows = data.rows if opts.limit is None else data.rows.iloc[: opts.limit]
    from interp.tasks.yesno import YesNoTask

    task = YesNoTask.pragworld(
        model, rows, prompt=opts.prompt, prepend_bos=opts.prepend_bos, chat_template=opts.chat_template, tokenizer=tok
    )
    prompts = task.prompts
    yes_no = (task.yes_id, task.no_id) if opts.prompt == "label" else None
    meta = _eval_meta(tok, opts, yes_no, getattr(data, "path", None), model_name)
    path = Path(out)
    _start_file(path, meta, fresh)
    done, partial = _read_existing(path, prompts, opts.prompt)
    reused = len(done)
    todo = list(range(len(done), len(prompts)))
    with open(path, "a", encoding="utf-8") as f, _bar(len(prompts), progress, f"pragworld {opts.prompt}") as bar:
        bar.update(len(done))
        blocks = (
            _group_blocks(rows["group"].to_numpy()[todo], opts.batch_size)
            if opts.prompt == "label"
            else _batches(len(todo), opts.batch_size)
        )
        for a, b in blocks:
            idx = todo[a:b]
            responses, p_yes = _answer(model, [prompts[i] for i in idx], tok, opts, yes_no)
            for k, (i, resp) in enumerate(zip(idx, responses)):
                rec = _record(i, rows.iloc[i], opts.prompt, prompts[i], resp)
                if p_yes is not None:
                    rec["p_yes"] = float(p_yes[k])
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                done.append(rec)
            f.flush()
            os.fsync(f.fileno())
            bar.update(len(idx))
    return EvalRun(path, done, reused=reused, computed=len(todo), discarded_partial_line=partial, meta=meta)


def _eval_meta(
    tok: Any, opts: EvalOptions, yes_no: tuple[Any, Any] | None, data_path: Any, model_name: str | None
) -> dict[str, Any]:
    """The settings an evaluation file records (and a resumption must match: :data:`_META_KEYS`)."""
    yes_id, no_id = yes_no if yes_no is not None else (None, None)
    return {
        "format": 1,
        "model": model_name,
        "data": str(Path(data_path).resolve()) if data_path else None,
        "prompt": opts.prompt,
        "chat_template": uses_chat_template(tok, opts.chat_template),
        "prepend_bos": opts.prepend_bos,
        "max_new_tokens": opts.max_new_tokens if opts.prompt == "benchmark" else None,
        "yes_id": yes_id,
        "no_id": no_id,
        "yes_token": tok.convert_ids_to_tokens(yes_id) if yes_id is not None else None,
        "no_token": tok.convert_ids_to_tokens(no_id) if no_id is not None else None,
    }


def _start_file(path: Path, meta: dict[str, Any], fresh: bool) -> None:
    """Make ``path``'s folder; with ``fresh`` delete an earlier run; else check its settings equal
    ``meta``'s; then write ``meta`` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mpath = _meta_path(path)
    if fresh:
        for p in (path, mpath):
            if p.exists():
                p.unlink()
    if path.exists() and mpath.exists():
        old = json.loads(mpath.read_text())
        diff = {k: (old.get(k), meta.get(k)) for k in _META_KEYS if old.get(k) != meta.get(k)}
        if diff:
            raise ValueError(
                f"{path} was written with other settings {diff} (before → now); pass --fresh or another --out"
            )
    mpath.write_text(json.dumps(meta, indent=2) + "\n")


def _answer(
    model: Any, batch: list[str], tok: Any, opts: EvalOptions, yes_no: tuple[Any, Any] | None
) -> tuple[list[Any], Any]:
    """The responses to one batch of prompts, and P(yes) of each (label prompt; else None)."""
    if opts.prompt == "label":
        p_yes = score_label_prompts(
            model,
            batch,
            tok,
            batch_size=len(batch),
            chat_template=opts.chat_template,
            yes_no_ids=yes_no if yes_no is not None and None not in yes_no else None,
            prepend_bos=opts.prepend_bos,
        )
        return ["yes" if p > 0.5 else "no" for p in p_yes], p_yes
    responses = generate_responses(
        model,
        batch,
        tok,
        max_new_tokens=opts.max_new_tokens,
        batch_size=len(batch),
        chat_template=opts.chat_template,
        prepend_bos=opts.prepend_bos,
    )
    return responses, None


def _record(i: int, r: Any, prompt: str, text: str, resp: Any) -> dict[str, Any]:
    """The JSON record of data row ``i`` (``r``), asked ``text``, answered ``resp``."""
    return {
        "row": i,
        "group": int(r["group"]),
        "prompt_kind": prompt,
        "prompt": text,
        "expected_response": r["answer"],
        "perturbed": bool(r["altered"]),
        "perturbation": {
            "category": r["category_raw"],
            "effect": r["effect_raw"],
            "target": str(r["target"]).title(),
        },
        "response": resp,
        "parsed": parse_yes_no(resp),
    }
