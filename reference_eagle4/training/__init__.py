"""Drafter training: regenerate responses with the target, teacher-forced features, TTT training."""

from reference_eagle4.training.pipeline import train_drafter
from reference_eagle4.training.train import TrainConfig

__all__ = ["TrainConfig", "train_drafter"]
