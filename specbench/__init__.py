"""Prompt Enhancement SpecBench: speculative decoding measured on creative and general prompts."""

__version__ = "0.1.0"
