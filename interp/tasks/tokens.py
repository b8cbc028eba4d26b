"""Token ids with the model's own tokenizer settings: the one encoding path of every task.

**The model's own tokenizer.** :func:`own_tokenizer` is ``AutoTokenizer.from_pretrained(folder or
hub name)`` with the settings saved beside the model. It is *not* ``bridge.tokenizer``: on
TransformerLens 4.3, ``TransformerBridge.boot_transformers`` reloads the tokenizer with
``add_bos_token=True``, so it prepends a BOS token also for models whose tokenizer adds none
(GPT-2, GPT-NeoX, Qwen2, Phi-3 with a plain byte-level BPE). Fed those ids the model scores another
input than the one it (and the published code, which tokenizes with HF) sees; on tiny random-init
Llama / Qwen2 / GPT-NeoX models P(gold) moved by up to 0.14 (issue 11). Handing a bridge to
:func:`own_tokenizer` reloads the tokenizer from the bridge tokenizer's ``name_or_path``.

**BOS** (:class:`Tokenization`, ``prepend_bos``):

- ``None`` (default): exactly what the tokenizer does with its special tokens: a BOS where it adds
  one (Llama, Gemma-2, Mistral), none where it does not (GPT-2, Qwen2, GPT-NeoX, OLMo-2);
- ``True``: a BOS first in every row (added if the tokenizer did not add it; an error when the
  tokenizer has no BOS token);
- ``False``: never a BOS first (a leading BOS the tokenizer or the chat template put there is
  removed).

Any other special token the tokenizer adds (an EOS some tokenizers append) is kept as it adds it.

**Chat template** (``chat_template``): ``None`` (auto) wraps the prompt as one user message of the
tokenizer's chat template with the generation prompt appended when the tokenizer has one (as the
published evaluation ran open models); ``True`` requires one; ``False`` (the layer analyses'
setting: the reference scored the bare prompt) never wraps. The templated text already holds the
model's special tokens (its BOS included), so it is tokenized without adding special tokens again.

**Yes/no tokens** (:func:`yes_no_token_ids`): the token of ``" yes"`` if the tokenizer encodes it
(without special tokens) as one token, else of ``"yes"``; likewise for no — the published code's
rule. A byte-level BPE gives ``Ġyes``, a SentencePiece tokenizer ``▁yes``, interp's word-level
tokenizer ``yes``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.worlds.encoding import pad_right


class TokenizationError(ValueError):
    """A tokenizer cannot give what a task needs (no BOS token, no single yes/no token, …)."""


def own_tokenizer(source: Any) -> Any:
    """The model's own Hugging Face tokenizer.

    ``source``: a model folder or hub name (``AutoTokenizer.from_pretrained``), a ``.gguf`` file
    (the tokenizer and chat template of its converted folder,
    :func:`interp.models.checkpoint.local_model`), a TransformerBridge (reloaded from its
    tokenizer's ``name_or_path``, see the module docstring), or a tokenizer (returned as is).
    Never ``trust_remote_code``.
    """
    from transformers import AutoTokenizer

    from interp.models.checkpoint import local_model

    if isinstance(source, (str, os.PathLike)):
        return AutoTokenizer.from_pretrained(local_model(source))
    if hasattr(source, "hook_dict") and hasattr(source, "cfg"):  # a TransformerBridge
        tok = getattr(source, "tokenizer", None)
        name = getattr(tok, "name_or_path", None) if tok is not None else None
        if not name:
            raise TokenizationError(
                "this TransformerBridge has no tokenizer with a name_or_path to reload the model's own settings "
                "from: pass tokenizer= (e.g. AutoTokenizer.from_pretrained(folder))"
            )
        return AutoTokenizer.from_pretrained(str(name))
    if callable(getattr(source, "convert_ids_to_tokens", None)):
        return source
    raise TokenizationError(
        f"cannot get a tokenizer from a {type(source).__name__}: pass a model folder, a hub "
        "name, a TransformerBridge or a tokenizer"
    )


def adds_bos(tokenizer: Any) -> bool:
    """Whether ``tokenizer(text)`` (special tokens on) starts with its BOS token."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    ids = list(tokenizer("a")["input_ids"])
    return bool(ids) and ids[0] == bos and list(tokenizer("a", add_special_tokens=False)["input_ids"])[:1] != [bos]


def uses_chat_template(tokenizer: Any, chat_template: bool | None) -> bool:
    """``chat_template`` None (auto): whether the tokenizer has one; True requires one."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if chat_template and not has:
        raise TokenizationError("chat_template=True but the tokenizer has no chat template")
    return has if chat_template is None else bool(chat_template)


@dataclass(frozen=True)
class Tokenization:
    """How texts become token ids for one model: its tokenizer, the BOS rule and the chat-template
    rule (module docstring). :meth:`encode` is the only place a prompt is tokenized."""

    tokenizer: Any
    prepend_bos: bool | None = None
    chat_template: bool | None = False

    @property
    def templated(self) -> bool:
        return uses_chat_template(self.tokenizer, self.chat_template)

    @property
    def bos_id(self) -> int | None:
        return getattr(self.tokenizer, "bos_token_id", None)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (a prompt), no padding."""
        tok = self.tokenizer
        if self.templated:
            wrapped = [
                tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True)
                for t in texts
            ]
            rows = [list(tok(w, add_special_tokens=False)["input_ids"]) for w in wrapped]
        else:
            rows = [list(tok(t)["input_ids"]) for t in texts]
        if self.prepend_bos is None:
            return rows
        bos = self.bos_id
        if self.prepend_bos:
            if bos is None:
                raise TokenizationError("prepend_bos=True but the tokenizer has no BOS token")
            return [r if r[:1] == [bos] else [bos, *r] for r in rows]
        return [r[1:] if bos is not None and r[:1] == [bos] else r for r in rows]

    def settings(self) -> dict[str, Any]:
        """What a results file records about the encoding."""
        return {
            "tokenizer": str(getattr(self.tokenizer, "name_or_path", "") or type(self.tokenizer).__name__),
            "prepend_bos": self.prepend_bos,
            "tokenizer_adds_bos": adds_bos(self.tokenizer),
            "chat_template": self.templated,
        }


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str], chat_template: bool | None = None, prepend_bos: bool | None = None
) -> list[list[int]]:
    """:meth:`Tokenization.encode` as a function (chat template auto by default)."""
    return Tokenization(tokenizer, prepend_bos, chat_template).encode(prompts)


def yes_no_token_ids(tokenizer: Any) -> tuple[int, int]:
    """``(yes_id, no_id)``: the single token of ``" yes"`` (else ``"yes"``) and of ``" no"`` (else
    ``"no"``), as the published code resolves them. Raises :class:`TokenizationError` when there is
    none, or when one is the unknown token."""
    unk = getattr(tokenizer, "unk_token_id", None)

    def one(word: str) -> int:
        tried = []
        for variant in (f" {word}", word):
            ids = list(tokenizer(variant, add_special_tokens=False)["input_ids"])
            tried.append(f"{variant!r} → {tokenizer.convert_ids_to_tokens(ids)}")
            if len(ids) == 1 and (unk is None or ids[0] != unk):
                return int(ids[0])
        raise TokenizationError(
            f"the tokenizer has no single token for {word!r} ({'; '.join(tried)}): the label "
            f"prompt is scored by the ' yes' / ' no' logits, so it needs one token each"
        )

    yes_id, no_id = one("yes"), one("no")
    if yes_id == no_id:
        raise TokenizationError(f"' yes' and ' no' map to the same token id {yes_id}")
    return yes_id, no_id


def pad_id_of(tokenizer: Any) -> int:
    """The id right padding writes (pad, else EOS, else 0); masked out, so never read by the model."""
    for name in ("pad_token_id", "eos_token_id"):
        v = getattr(tokenizer, name, None)
        if isinstance(v, int):
            return v
    return 0


def check_length(seqs: Sequence[Sequence[int]], n_ctx: int | None, extra: int = 0, offset: int = 0) -> None:
    """Raise naming the first row that, with ``extra`` tokens more, exceeds the context ``n_ctx``."""
    if not n_ctx:
        return
    for i, s in enumerate(seqs):
        if len(s) + extra > n_ctx:
            more = f" + {extra} new tokens" if extra else ""
            raise ValueError(
                f"prompt {offset + i} has {len(s)} tokens{more}, more than the model's context n_ctx={n_ctx}"
            )


def model_n_ctx(path: str | os.PathLike) -> int | None:
    """The context length in a model folder's ``config.json`` (None when absent)."""
    import json

    f = Path(path) / "config.json"
    if not f.is_file():
        return None
    c = json.loads(f.read_text())
    n = c.get("n_positions") or c.get("max_position_embeddings") or c.get("n_ctx")
    return int(n) if n else None


def token_strings(tokenizer: Any, ids: Any) -> list[list[str]]:
    """Each row of ``ids`` (a 2-D tensor or nested list of token ids) as its tokens' text, one string per
    token as the tokenizer decodes it alone (byte-level ``Ġ`` shown as a space): labels for a map's
    positions or an attention view."""
    rows = ids.tolist() if hasattr(ids, "tolist") else ids
    return [[tokenizer.convert_tokens_to_string([t]) for t in tokenizer.convert_ids_to_tokens(row)] for row in rows]


__all__ = [
    "TokenizationError",
    "Tokenization",
    "adds_bos",
    "check_length",
    "encode_prompts",
    "model_n_ctx",
    "own_tokenizer",
    "pad_id_of",
    "pad_right",
    "token_strings",
    "uses_chat_template",
    "yes_no_token_ids",
]
