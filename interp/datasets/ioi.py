"""Indirect-object identification (IOI) prompts as contrast examples (Wang et al. 2022,
"Interpretability in the wild", §2 and App. E).

An IOI prompt introduces two people and repeats one of them, the subject S; the next token should
be the other one, the indirect object IO: "When Mary and John went to the store, John gave a drink
to" → `` Mary`` (correct) rather than `` John`` (foil). The metric is the logit difference
logit(IO) − logit(S) at the last position. The paper's choices, kept here:

- **templates** of several sentence shapes (§2, App. E: "Then, …", "When …", "After …", "While …",
  with a place and an object); :data:`IOI_TEMPLATES` has eight. A template names the two people in
  the order they are introduced, ``{A}`` then ``{B}``, and the repeated subject ``{S}``; optional
  ``{PLACE}`` and ``{OBJECT}``. It ends right before the answer (no trailing space);
- **orders ABBA and BABA, balanced**: ABBA fills A = IO, B = S ("When Mary and John …, John gave
  … to"), BABA fills A = S, B = IO ("When John and Mary …, John gave … to"). Each group is one
  template with one name pair, place and object, asked in both orders (ABBA first);
- **names, places and objects of one token each** in the model's tokenizer with a leading space
  (the paper's names are single GPT-2 tokens); :func:`single_token_words` keeps the candidates that
  are, and a tokenizer with too few is an error naming it and the count;
- **the ABC corruption** (§3.1, the "ABC distribution"): the same template, place and object with
  three other names, all different from each other and from IO and S — the corrupted prompt that
  activation patching restores from. Its token length equals the clean prompt's (checked; names
  are redrawn a few times, then an error).

Beyond the paper: the groups (template × name pair, the resampling unit of intervals) and the
fixed round-robin of templates over groups, so the first ``n`` examples of a file cover every
template. Same tokenizer, ``n``, ``seed`` and templates → the same examples (``numpy``'s PCG64).
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from interp.datasets.contrast import ContrastExample, ContrastExamples

#: the templates (ABBA/BABA are fills of the same template; see the module docstring)
IOI_TEMPLATES: tuple[str, ...] = (
    "When {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
    "Then, {A} and {B} had a lot of fun at the {PLACE}. {S} gave a {OBJECT} to",
    "Then, {A} and {B} were working at the {PLACE}. {S} decided to give a {OBJECT} to",
    "Then, {A} and {B} had a long argument. Afterwards {S} said to",
    "After {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "While {A} and {B} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "Friends {A} and {B} found a {OBJECT} at the {PLACE}. {S} gave it to",
)

#: candidate first names (common English names, as the paper's list); the tokenizer keeps its single tokens
NAMES: tuple[str, ...] = tuple(
    """
Mary John Alice Bob Tom James Sarah Anna Emma Michael David Daniel Paul Mark Kevin Jason Lisa Laura Kate Rachel
Jessica Jennifer Andrew Ryan Steven Brian Chris Eric Adam Peter George Henry Jack Sam Ben Max Alex Lucy Amy Emily
Grace Rose Jane Helen Linda Susan Karen Nancy Betty Joseph Thomas Charles Robert William Richard Edward Frank Scott
Matthew Anthony Joshua Patrick Dan Tim Mike Jim Joe Bill Jeff Fred Carl Luke Ian Sean Kelly Amanda Nicole Stephanie
Victoria Olivia Sophia Jacob Ethan Noah Liam Mason Lily Ella Chloe Zoe Leah Claire Diana Julia Maria Anne Paula Ruth
Jean""".split()
)
#: candidate places and objects (objects start with a consonant: the templates say "a {OBJECT}")
PLACES: tuple[str, ...] = tuple(
    """store garden restaurant school hospital office house station park beach library
market church kitchen museum zoo shop hotel""".split()
)
OBJECTS: tuple[str, ...] = tuple(
    """ring kiss bone basketball computer necklace drink snack book bag ball cake gift
letter card flower pen key hat phone""".split()
)

FIELDS = {"A", "B", "S", "PLACE", "OBJECT"}
#: names a prompt needs: IO and S, and three others for the ABC corruption
MIN_NAMES = 5
ORDERS = ("ABBA", "BABA")


class IOIError(ValueError):
    """The generator cannot make the prompts asked for (too few single-token words, a bad template)."""


def tokenizer_name(tokenizer: Any) -> str:
    """How errors name a tokenizer: its ``name_or_path``, else its class."""
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def n_tokens(tokenizer: Any, text: str) -> int:
    """Tokens of ``text`` without special tokens."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def single_token_words(tokenizer: Any, words: Sequence[str]) -> list[str]:
    """The words that are one token with a leading space (``" " + word``), in the given order,
    without duplicates."""
    seen: dict[str, None] = {}
    for w in words:
        if w not in seen and n_tokens(tokenizer, " " + w) == 1:
            seen[w] = None
    return list(seen)


def template_fields(template: str) -> set[str]:
    """The placeholders of a template; errors for a template the generator cannot fill."""
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    unknown = fields - FIELDS
    if unknown:
        raise IOIError(f"template {template!r}: unknown placeholder(s) {sorted(unknown)} (allowed: {sorted(FIELDS)})")
    for f in ("A", "B", "S"):
        if f not in fields:
            raise IOIError(
                f"template {template!r} needs {{{f}}}: {{A}} and {{B}} introduce the two people, "
                "{S} repeats the subject"
            )
    if template != template.rstrip():
        raise IOIError(f"template {template!r} ends in whitespace: it must end right before the answer name")
    return fields


def _enough(tokenizer: Any, what: str, found: list[str], candidates: Sequence[str], need: int, why: str) -> None:
    if len(found) < need:
        raise IOIError(
            f"the tokenizer {tokenizer_name(tokenizer)!r} has only {len(found)} of the {len(candidates)} "
            f"candidate {what} that are one token with a leading space ({found}); IOI needs at least "
            f"{need} ({why}). Pass {what}= with words that are single tokens of this tokenizer"
        )


def _fill(template: str, a: str, b: str, s: str, place: str, obj: str) -> str:
    return template.format(A=a, B=b, S=s, PLACE=place, OBJECT=obj)


def ioi_examples(
    tokenizer: Any,
    n: int,
    seed: int = 0,
    templates: Sequence[str] | None = None,
    *,
    names: Sequence[str] | None = None,
    places: Sequence[str] | None = None,
    objects: Sequence[str] | None = None,
    max_redraws: int = 50,
) -> ContrastExamples:
    """``n`` IOI prompts for ``tokenizer`` (module docstring): correct = `` IO``, foil = `` S``,
    corrupted = the ABC prompt of equal token length, group = ``t<k>:<IO>/<S>`` (template × name
    pair), template = the template text, meta = order, IO, S, place, object, the ABC names.

    ``templates``: default :data:`IOI_TEMPLATES`; ``names`` / ``places`` / ``objects``: candidate
    words (defaults :data:`NAMES`, :data:`PLACES`, :data:`OBJECTS`), of which the single tokens are
    used. Groups go round-robin over the templates; each group is asked ABBA then BABA (an odd ``n``
    ends with one ABBA)."""
    if n < 1:
        raise IOIError(f"n must be ≥ 1, got {n}")
    temps = tuple(IOI_TEMPLATES if templates is None else templates)
    if not temps:
        raise IOIError("templates is empty")
    fields = [template_fields(t) for t in temps]
    cand_names, cand_places, cand_objects = (
        tuple(NAMES if names is None else names),
        tuple(PLACES if places is None else places),
        tuple(OBJECTS if objects is None else objects),
    )
    ok_names = single_token_words(tokenizer, cand_names)
    _enough(
        tokenizer, "names", ok_names, cand_names, MIN_NAMES, "IO and S, and three other names for the ABC corruption"
    )
    ok_places = single_token_words(tokenizer, cand_places) if any("PLACE" in f for f in fields) else ["-"]
    _enough(tokenizer, "places", ok_places, cand_places, 1, "a template has {PLACE}")
    ok_objects = single_token_words(tokenizer, cand_objects) if any("OBJECT" in f for f in fields) else ["-"]
    _enough(tokenizer, "objects", ok_objects, cand_objects, 1, "a template has {OBJECT}")

    rng = np.random.default_rng(seed)
    out: list[ContrastExample] = []
    for g in range(math.ceil(n / 2)):
        k = g % len(temps)
        template = temps[k]
        io, s = (ok_names[i] for i in rng.choice(len(ok_names), size=2, replace=False))
        place = ok_places[int(rng.integers(len(ok_places)))]
        obj = ok_objects[int(rng.integers(len(ok_objects)))]
        others = [w for w in ok_names if w not in (io, s)]
        for order in ORDERS:
            if len(out) == n:
                break
            a, b = (io, s) if order == "ABBA" else (s, io)
            prompt = _fill(template, a, b, s, place, obj)
            length = n_tokens(tokenizer, prompt)
            for _ in range(max_redraws):
                abc = [others[i] for i in rng.choice(len(others), size=3, replace=False)]
                corrupted = _fill(template, abc[0], abc[1], abc[2], place, obj)
                if n_tokens(tokenizer, corrupted) == length:
                    break
            else:
                raise IOIError(
                    f"template {template!r} with {a}/{b}: no ABC corruption of the same token length "
                    f"({length}) in {max_redraws} draws with the tokenizer {tokenizer_name(tokenizer)!r}"
                )
            out.append(
                ContrastExample(
                    prompt=prompt,
                    correct=" " + io,
                    foil=" " + s,
                    corrupted=corrupted,
                    group=f"t{k}:{io}/{s}",
                    template=template,
                    meta={
                        "order": order,
                        "IO": io,
                        "S": s,
                        "place": place,
                        "object": obj,
                        "abc": abc,
                        "template_index": k,
                    },
                )
            )
    return ContrastExamples(out)


def split_ioi_prompts(
    tokenizer: Any, n_train: int, n_heldout: int, seed: int = 0
) -> tuple[list[ContrastExample], list[ContrastExample], int]:
    """Training and held-out IOI prompts with disjoint name pairs: ``(train, heldout, dropped)``.

    The held-out prompts are :func:`ioi_examples` drawn with ``seed + 1``; the training pool is drawn
    with ``seed + 2`` and a training prompt whose unordered {IO, S} pair occurs among the held-out
    ones is dropped (``dropped`` counts them), so no name pair is seen in training and judged."""
    heldout = ioi_examples(tokenizer, n_heldout, seed=seed + 1)
    pairs = {frozenset((e.meta["IO"], e.meta["S"])) for e in heldout}
    pool = ioi_examples(tokenizer, 2 * n_train + 2 * len(pairs), seed=seed + 2)
    train = [e for e in pool if frozenset((e.meta["IO"], e.meta["S"])) not in pairs]
    dropped = len(pool) - len(train)
    if len(train) < n_train:
        raise IOIError(f"only {len(train)} training prompts with name pairs unseen in the held-out set")
    return train[:n_train], list(heldout), dropped


__all__ = [
    "IOIError",
    "IOI_TEMPLATES",
    "MIN_NAMES",
    "NAMES",
    "OBJECTS",
    "ORDERS",
    "PLACES",
    "ioi_examples",
    "n_tokens",
    "single_token_words",
    "split_ioi_prompts",
    "template_fields",
    "tokenizer_name",
]
