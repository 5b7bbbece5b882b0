"""Drafter training (regenerate responses with the target, teacher-forced features, TTT training) and the
retrieval datastore built from the same responses."""

from reference_eagle4.training.pipeline import build_datastore, train_drafter
from reference_eagle4.training.train import TrainConfig

__all__ = ["TrainConfig", "build_datastore", "train_drafter"]
