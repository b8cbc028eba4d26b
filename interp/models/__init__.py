"""Models: build a GPT-2 for a world, save/load HF checkpoints, wrap them in a TransformerBridge."""

from interp.models.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_bridge,
    load_checkpoint,
    load_hf_model,
    save_checkpoint,
)
from interp.models.gpt2 import ModelConfig, build_gpt2, count_parameters

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ModelConfig",
    "build_gpt2",
    "count_parameters",
    "load_bridge",
    "load_checkpoint",
    "load_hf_model",
    "save_checkpoint",
]
