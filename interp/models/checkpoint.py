"""Checkpoints: a Hugging Face folder that also carries its world.

Layout of a checkpoint folder::

    config.json, model.safetensors      # the HF model (no pickles)
    tokenizer.json, tokenizer_config.json  # word-level tokenizer over the world's vocabulary
    interp.json                         # {"format": 1, "vocab": [...], "world": world.spec()}

:func:`load_bridge` boots *any* HF folder through ``TransformerBridge.boot_transformers`` — the
same path as a user's pretrained GPT-2, Pythia, Qwen or Llama — so every analysis has one code
path. :func:`load_checkpoint` adds the world and checks the vocabulary matches it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.worlds import Vocab, World, WorldError, world_from_spec
from interp.worlds.base import UNK

META_FILE = "interp.json"
FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint folder is missing, malformed, or does not fit the world it is used with."""


def _word_level_tokenizer(vocab: Vocab):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab.tokens)}, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=vocab.tokens[vocab.pad_id],
        bos_token=vocab.tokens[vocab.bos_id], eos_token=vocab.tokens[vocab.bos_id], unk_token=UNK,
    )


def save_checkpoint(model, world: World, path: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
    """Save an HF model with the world's tokenizer and spec; returns the folder."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if model.config.vocab_size != len(world.vocab):
        raise CheckpointError(
            f"model vocabulary ({model.config.vocab_size}) ≠ world vocabulary ({len(world.vocab)})")
    model.save_pretrained(path, safe_serialization=True)
    _word_level_tokenizer(world.vocab).save_pretrained(path)
    meta = {"format": FORMAT, "vocab": list(world.vocab.tokens), "world": world.spec()}
    if extra:
        meta["extra"] = extra
    tmp = path / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta))
    tmp.replace(path / META_FILE)
    return path


def read_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``interp.json`` of a checkpoint, or None for a plain HF folder."""
    f = Path(path) / META_FILE
    if not f.exists():
        return None
    try:
        meta = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f}: not valid JSON ({e})") from None
    for key in ("format", "vocab", "world"):
        if key not in meta:
            raise CheckpointError(f"{f}: missing key {key!r}")
    if meta["format"] != FORMAT:
        raise CheckpointError(f"{f}: format {meta['format']} is not supported (expected {FORMAT})")
    return meta


def check_vocab(world: World, tokens: list[str] | tuple[str, ...], source: str) -> None:
    """Raise a :class:`CheckpointError` naming the first difference between two vocabularies."""
    want = world.vocab.tokens
    if tuple(tokens) == want:
        return
    if len(tokens) != len(want):
        msg = f"{len(tokens)} tokens in the checkpoint vs {len(want)} in the world"
    else:
        i = next(i for i, (a, b) in enumerate(zip(tokens, want)) if a != b)
        msg = f"token {i} is {tokens[i]!r} in the checkpoint but {want[i]!r} in the world"
    raise CheckpointError(f"{source}: vocabulary does not match the world {world.describe()!r}: {msg}")


def run_data_dir(checkpoint: str | os.PathLike) -> Path:
    """The ``data/`` folder of the run a checkpoint belongs to (``<run>/best`` → ``<run>/data``);
    it holds ``train.txt`` and the held-out ``test.txt`` when the run was made by interp."""
    return Path(checkpoint).resolve().parent / "data"


def _check_folder(path: Path) -> None:
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} has no config.json: not a Hugging Face model folder")


def load_hf_model(path: str | os.PathLike):
    """The raw ``transformers`` causal LM of a checkpoint folder (for training)."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    _check_folder(path)
    return AutoModelForCausalLM.from_pretrained(path, local_files_only=True)


def load_bridge(path_or_name: str | os.PathLike, device: str = "cpu", dtype=None):
    """Wrap an HF model folder (or an HF hub name already in the local cache) in a TransformerBridge.

    Never downloads: ``HF_HUB_OFFLINE`` is forced on for the call. Returns the bridge in eval mode.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformer_lens.model_bridge import TransformerBridge

    path = Path(path_or_name)
    if path.exists():
        _check_folder(path)
    kwargs = {"device": device}
    if dtype is not None:
        kwargs["dtype"] = dtype
    bridge = TransformerBridge.boot_transformers(str(path_or_name), **kwargs)
    return bridge.eval()


@dataclass
class Checkpoint:
    """A model bridge together with the world it was trained on."""

    bridge: Any
    world: World
    path: Path

    @property
    def vocab(self) -> Vocab:
        return self.world.vocab


def load_checkpoint(path: str | os.PathLike, world: World | None = None, device: str = "cpu") -> Checkpoint:
    """Load an interp checkpoint as a :class:`Checkpoint`.

    ``world`` overrides the stored world (e.g. evaluating a model on another graph); its vocabulary
    must match the checkpoint's, else :class:`CheckpointError`. A plain HF folder without
    ``interp.json`` needs an explicit ``world`` whose vocabulary size equals the model's.
    """
    path = Path(path)
    _check_folder(path)
    meta = read_meta(path)
    if meta is None and world is None:
        raise CheckpointError(
            f"{path} has no {META_FILE}: it carries no world, so pass one (e.g. --world streets)")
    if world is None:
        try:
            world = world_from_spec(meta["world"])
        except WorldError as e:
            raise CheckpointError(f"{path / META_FILE}: stored world is invalid: {e}") from None
    if meta is not None:
        check_vocab(world, meta["vocab"], str(path))
    config = json.loads((path / "config.json").read_text())
    if config.get("vocab_size") != len(world.vocab):
        raise CheckpointError(
            f"{path}: model vocab_size {config.get('vocab_size')} ≠ world vocabulary {len(world.vocab)}")
    return Checkpoint(bridge=load_bridge(path, device=device), world=world, path=path)
