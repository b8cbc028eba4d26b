"""Shared fixtures: tiny worlds and tiny models, built in the test (no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_city():
    """A 4×5 synthetic city with random walks of at most 12 directions."""
    from interp.worlds.streets import StreetsWorld, SyntheticCityConfig, TraversalConfig

    return StreetsWorld.from_city(SyntheticCityConfig.tiny(), TraversalConfig(kind="random_walks", max_directions=12))


@pytest.fixture(scope="session")
def tiny_model_config():
    from interp.models import ModelConfig

    return ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=32, seed=0)
