"""Generative models: prefill and decode against a key/value cache."""
