"""Drafter models (the light networks that propose tokens) and their checkpoints."""

from pathlib import Path

from reference_eagle4.drafters.eagle4 import Eagle4Config, Eagle4Drafter, load_drafter

# Drafters shipped in the repository, keyed by target name.
SHIPPED = Path(__file__).parent
DEFAULT_EAGLE4 = {"smollm2-135m": SHIPPED / "smollm2-135m-eagle4"}

__all__ = ["DEFAULT_EAGLE4", "Eagle4Config", "Eagle4Drafter", "load_drafter"]
