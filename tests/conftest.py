"""Shared fixtures: tiny worlds and tiny models, built in the test (no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the suite never reaches the hub (set before any Hugging Face import reads it); interp itself
# leaves the variable to the user (interp.models.checkpoint.resolve_model)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[1]
#: the shared data (PragWorld CSVs): ``../shared/data`` beside the checkout, or ``$INTERP_SHARED_DATA``
#: (a worktree elsewhere, a GPU machine the data was carried to)
SHARED_DATA = Path(os.environ.get("INTERP_SHARED_DATA") or REPO.parent / "shared" / "data")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` (the checks that must be rerun on a GPU: placement, ``--dtype``,
    ``--device-map``, half precision, the real-model bench) skip, saying why, where torch sees no
    CUDA device; ``bench/gpu_check.sh`` runs them (``pytest -m cuda``) where it does."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU and torch sees none here (run bench/gpu_check.sh on a GPU machine)"
    )
    for item in marked:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_city():
    """A 4×5 synthetic city with random walks of at most 12 directions."""
    from interp.worlds.streets import StreetsWorld, SyntheticCityConfig, TraversalConfig

    return StreetsWorld.from_city(SyntheticCityConfig.tiny(), TraversalConfig(kind="random_walks", max_directions=12))


@pytest.fixture(scope="session")
def tiny_model_config():
    from interp.models import ModelConfig

    return ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=32, seed=0)


def liven(model, seed: int):
    """Random weights of a useful size (GPT-2 starts with zero biases and 0.02 weights, where
    many ablations barely move the logits)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm_gain = p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight")
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if norm_gain else 0.0))
    return model


def save_gpt2_and_llama(root, world, gpt2_config, llama_layers: int = 2):
    """A lively tiny GPT-2 and Llama saved as interp checkpoints on ``world``: {name: folder}.

    Two architectures, so hook-based code is tested beyond GPT-2 (a user's Llama/Qwen model goes
    through the same TransformerBridge path)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from interp.models import build_gpt2, save_checkpoint

    vocab = world.vocab
    gpt2 = save_checkpoint(liven(build_gpt2(vocab, gpt2_config), 0), world, root / "gpt2")
    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(vocab),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=llama_layers,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
            pad_token_id=vocab.pad_id,
            bos_token_id=vocab.bos_id,
            eos_token_id=vocab.bos_id,
        )
    )
    llama = save_checkpoint(liven(llama, 1), world, root / "llama")
    return {"gpt2": gpt2, "llama": llama}


def assert_legal_agrees_with_step(world, states) -> None:
    """The World contract: a token is in ``legal(q)`` exactly when ``step(q, token)`` is defined,
    and ``legal`` lists tokens in vocabulary order."""
    from interp.worlds import IllegalTokenError

    for q in states:
        legal = world.legal(q)
        assert list(legal) == [t for t in world.tokens if t in set(legal)], q
        for tok in world.tokens:
            try:
                world.step(q, tok)
                defined = True
            except IllegalTokenError:
                defined = False
            assert defined == (tok in legal), (q, tok)


def warm_bridges(paths: dict) -> dict:
    """Load checkpoints as bridges and run one forward (a bridge may add hooks of its own on its
    first forward, which would upset hook-count checks)."""
    import torch

    from interp.models import load_bridge

    out = {name: load_bridge(path) for name, path in paths.items()}
    for b in out.values():
        b(torch.tensor([[1, 5, 6]]))
    return out


@pytest.fixture(params=["gpt2", "llama"])
def bridge(request, bridges):
    """Each architecture of a module's ``bridges`` fixture in turn."""
    return bridges[request.param]
