"""Checkpoints: a Hugging Face folder that also carries its world.

Layout of a checkpoint folder::

    config.json, model.safetensors      # the HF model (no pickles)
    tokenizer.json, tokenizer_config.json  # word-level tokenizer over the world's vocabulary
    interp.json                         # {"format": 1, "vocab": [...], "world": world.spec()}

:func:`load_bridge` boots *any* HF folder, GGUF file (converted once into the cache,
:mod:`interp.models.gguf`) or hub id through ``TransformerBridge.boot_transformers``
— the same path as a user's pretrained GPT-2, Pythia, Qwen or Llama — so every analysis has one
code path. A hub id resolves the standard Hugging Face way (:func:`resolve_model`: download when
the network allows, the local cache otherwise; the process environment is never changed), on
the device, dtype or device map of a :class:`~interp.models.device.Placement`.
:func:`load_checkpoint` adds the world and checks the vocabulary matches it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.models.device import Placement
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
        tokenizer_object=core,
        pad_token=vocab.tokens[vocab.pad_id],
        bos_token=vocab.tokens[vocab.bos_id],
        eos_token=vocab.tokens[vocab.bos_id],
        unk_token=UNK,
    )


def save_checkpoint(model, world: World, path: str | os.PathLike, extra: dict[str, Any] | None = None) -> Path:
    """Save an HF model with the world's tokenizer and spec; returns the folder."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if model.config.vocab_size != len(world.vocab):
        raise CheckpointError(f"model vocabulary ({model.config.vocab_size}) ≠ world vocabulary ({len(world.vocab)})")
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


def hf_dims(checkpoint: str | os.PathLike) -> tuple[int, int]:
    """(n_layers, d_model) from an HF folder's ``config.json`` (GPT-2's or Llama-style names)."""
    c = json.loads((Path(checkpoint) / "config.json").read_text())
    n = c.get("n_layer") or c.get("num_hidden_layers")
    d = c.get("n_embd") or c.get("hidden_size")
    if n is None or d is None:
        raise CheckpointError(
            f"{checkpoint}/config.json names neither n_layer/num_hidden_layers nor n_embd/hidden_size"
        )
    return int(n), int(d)


def check_folder(path: Path) -> None:
    """Refuse a ``path`` that is not a Hugging Face model folder (no folder, or no ``config.json``)."""
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} has no config.json: not a Hugging Face model folder")


def _looks_like_path(name: str) -> bool:
    """A name that can only be a folder (a hub id is ``name`` or ``owner/name``)."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1 or name.endswith("/")


def local_model(path_or_name: str | os.PathLike) -> str:
    """``path_or_name`` with a ``.gguf`` file replaced by its converted folder in the cache
    (:func:`interp.models.gguf.gguf_folder`, made on first use); any other name unchanged. The one
    place a GGUF file becomes a model folder: :func:`resolve_model` and
    :func:`interp.tasks.own_tokenizer` call it."""
    from interp.models.gguf import gguf_folder, is_gguf

    if is_gguf(path_or_name):
        return str(gguf_folder(path_or_name))
    return str(path_or_name)


def resolve_model(path_or_name: str | os.PathLike) -> str:
    """A local HF folder (checked), a GGUF file (its converted folder, :func:`local_model`) or a
    Hugging Face hub id resolved the standard way.

    A hub id goes through ``huggingface_hub`` with the process's own settings (``HF_HOME`` /
    ``HF_HUB_CACHE``, ``HF_TOKEN``, ``HF_HUB_OFFLINE``): downloaded when the network allows, read
    from the local cache otherwise. Nothing here changes the environment. When neither works the
    :class:`CheckpointError` names the model and both causes (no download, not in the cache).
    Returns the string to hand to ``from_pretrained`` / ``boot_transformers``.
    """
    name = local_model(path_or_name)
    path = Path(name).expanduser()
    if path.exists():
        check_folder(path)
        return str(path)
    if _looks_like_path(name):
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = "not a local folder, so it was looked up as a Hugging Face hub model"
    cache = constants.HF_HUB_CACHE
    try:
        hf_hub_download(name, "config.json")
    except HFValidationError:
        raise CheckpointError(
            f"model {name!r} is {where}, but it is neither an existing folder nor a valid hub id (owner/name)"
        ) from None
    except GatedRepoError:
        raise CheckpointError(
            f"model {name!r} is gated on the hub: accept its licence there and log in (`hf auth login` or HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise CheckpointError(
            f"model {name!r} is {where}, and the hub has no such model (or it is private: "
            f"log in with `hf auth login` or HF_TOKEN)"
        ) from None
    except RevisionNotFoundError as e:
        raise CheckpointError(f"model {name!r}: {e}") from None
    except LocalEntryNotFoundError:
        why = (
            "downloading is off (HF_HUB_OFFLINE is set)"
            if constants.HF_HUB_OFFLINE
            else "it could not be downloaded (no connection to the hub)"
        )
        raise CheckpointError(
            f"model {name!r} is {where}: {why}, and it is not in the local cache {cache} "
            f"(download it once online, or pass a model folder)"
        ) from None
    except EntryNotFoundError:
        raise CheckpointError(
            f"model {name!r} is on the hub but has no config.json: not a transformers model repository"
        ) from None
    return name


def load_hf_model(path_or_name: str | os.PathLike, placement: Placement | None = None, **kwargs: Any):
    """The raw ``transformers`` causal LM of a checkpoint folder or hub id (for training).

    ``placement`` (default: CPU, float32) puts it on one device or, with a device map, lets
    accelerate place its modules (see :mod:`interp.models.device`). Extra ``kwargs`` go to
    ``from_pretrained``.
    """
    from transformers import AutoModelForCausalLM

    name = resolve_model(path_or_name)
    placement = placement or Placement()
    model = AutoModelForCausalLM.from_pretrained(name, **placement.from_pretrained_kwargs(), **kwargs)
    if not placement.mapped and placement.device is not None:
        # transformers types PreTrainedModel.to through a decorator that mypy reads as taking a model
        model = model.to(placement.device)  # type: ignore[arg-type]
    return model


def load_bridge(
    path_or_name: str | os.PathLike,
    device: str | None = None,
    dtype: Any = None,
    *,
    device_map: str | dict | None = None,
    n_devices: int | None = None,
    max_memory: dict | None = None,
    offload_folder: str | os.PathLike | None = None,
    placement: Placement | None = None,
):
    """Wrap an HF model folder or hub id in a TransformerBridge, in eval mode.

    The name resolves as :func:`resolve_model` says (download or cache; the environment is left
    alone). ``device`` (default CPU; ``"auto"``: CUDA, MPS, CPU) and ``dtype`` (a name or ``torch.dtype``;
    ``"auto"`` see :func:`~interp.models.device.resolve_dtype`), or ``device_map`` /
    ``n_devices`` / ``max_memory`` (and ``offload_folder`` for ``"disk"`` entries) for a model split
    over several devices, as ``TransformerBridge.boot_transformers`` takes them; or a ready
    :class:`Placement`; its ``attention`` (default ``eager``; ``auto``: fused unless a pattern is read) is set
    on the bridge (:func:`interp.models.attention.set_attention`).
    """
    from transformer_lens.model_bridge import TransformerBridge

    from interp.models.attention import set_attention

    if placement is None:
        mapped = device_map is not None or (n_devices or 1) > 1
        placement = Placement.resolve(
            device if device is not None or mapped else "cpu", dtype, device_map, n_devices, max_memory, offload_folder
        )
    name = resolve_model(path_or_name)
    bridge = TransformerBridge.boot_transformers(name, **placement.boot_kwargs())
    set_attention(bridge, placement.attention)
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


def load_checkpoint(
    path: str | os.PathLike,
    world: World | None = None,
    device: str | None = None,
    dtype: Any = None,
    placement: Placement | None = None,
) -> Checkpoint:
    """Load an interp checkpoint as a :class:`Checkpoint`.

    ``world`` overrides the stored world (e.g. evaluating a model on another graph); its vocabulary
    must match the checkpoint's, else :class:`CheckpointError`. A plain HF folder without
    ``interp.json`` needs an explicit ``world`` whose vocabulary size equals the model's.
    """
    path = Path(path)
    check_folder(path)
    meta = read_meta(path)
    if world is None:
        if meta is None:
            raise CheckpointError(f"{path} has no {META_FILE}: it carries no world, so pass one (e.g. --world streets)")
        try:
            world = world_from_spec(meta["world"])
        except WorldError as e:
            raise CheckpointError(f"{path / META_FILE}: stored world is invalid: {e}") from None
    if meta is not None:
        check_vocab(world, meta["vocab"], str(path))
    config = json.loads((path / "config.json").read_text())
    if config.get("vocab_size") != len(world.vocab):
        raise CheckpointError(
            f"{path}: model vocab_size {config.get('vocab_size')} ≠ world vocabulary {len(world.vocab)}"
        )
    return Checkpoint(bridge=load_bridge(path, device=device, dtype=dtype, placement=placement), world=world, path=path)
