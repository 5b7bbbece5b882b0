"""A `specbench serve` of the tiny target (ngram, L=4, up to 8 sequences) running in a background thread."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def served(tiny_target):
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    server = SpecbenchServer(ServeConfig(target=str(tiny_target), method="ngram", budget=4, concurrency=8,
                                         max_model_len=1024, dtype="float32", port=0)).start()
    yield server
    server.close()
