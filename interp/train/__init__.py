"""Training: one loop for pre-training and fine-tuning (see :mod:`interp.train.trainer`)."""

from interp.config import TrainConfig
from interp.train.data import Batch, make_batch
from interp.train.plant import PlantSpec, plant_harm
from interp.train.trainer import (
    LossTerm,
    TrainingInterrupted,
    TrainResult,
    TrainRunOptions,
    evaluate_loss,
    learning_rate,
    train,
)

__all__ = [
    "Batch",
    "LossTerm",
    "PlantSpec",
    "TrainConfig",
    "TrainResult",
    "TrainRunOptions",
    "TrainingInterrupted",
    "evaluate_loss",
    "learning_rate",
    "make_batch",
    "plant_harm",
    "train",
]
