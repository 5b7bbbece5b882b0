"""Proposers: one file per drafting method, all behind the small `Proposer` interface.

Importing this package registers every built-in proposer; `PROPOSERS` maps method name -> class.
"""

from reference_eagle4.proposers.base import PROPOSERS, Proposer, register
from reference_eagle4.proposers import dflash, eagle4, harness, ngram, vanilla  # noqa: F401  (registration side effect)

__all__ = ["PROPOSERS", "Proposer", "register"]
