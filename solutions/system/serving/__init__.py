"""Serving: the continuous-batching engine and the OpenAI-compatible HTTP server around it."""
