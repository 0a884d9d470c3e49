"""Models and their caches: sentence encoders (resolution of local and hub models, the ONNX backends,
the encoder pool), the embedding cache, the facts recorded about a loaded model, and the LLM client
with its prices, budget and response cache. Imports ``core`` and ``data``."""
