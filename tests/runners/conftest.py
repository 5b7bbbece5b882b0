"""Servers for runner tests: a `specbench serve` of the tiny target (ngram, L=4, up to 8 sequences) in a
background thread, and the stub vLLM/SGLang server of `stub_openai.py` answering every request in full."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def served(tiny_target):
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    server = SpecbenchServer(ServeConfig(target=str(tiny_target), method="ngram", budget=4, concurrency=8,
                                         max_model_len=1024, dtype="float32", port=0)).start()
    yield server
    server.close()


@pytest.fixture
def stub_server():
    from stub_openai import StubServer

    server = StubServer("ok").start()
    yield server
    server.close()
