"""Drafter models (the light networks that propose tokens) and their checkpoints."""

from pathlib import Path

from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter, load_dflash
from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter, load_drafter

# Drafters shipped in the repository, keyed by target name.
SHIPPED = Path(__file__).parent
DEFAULT_EAGLE4 = {"smollm2-135m": SHIPPED / "smollm2-135m-eagle4"}
DEFAULT_DFLASH = {"smollm2-135m": SHIPPED / "smollm2-135m-dflash"}
DEFAULT_DSPARK = {"smollm2-135m": SHIPPED / "smollm2-135m-dspark"}
DEFAULT_DATASTORE = {"smollm2-135m": SHIPPED / "smollm2-135m-datastore"}   # retrieval corpus, not a network

__all__ = ["DEFAULT_DATASTORE", "DEFAULT_DFLASH", "DEFAULT_DSPARK", "DEFAULT_EAGLE4", "DFlashConfig", "DFlashDrafter", "Eagle4Config",
           "Eagle4Drafter", "load_dflash", "load_drafter"]
