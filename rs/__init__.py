"""rs: rejection-sampled VLM training data from benchmark train splits."""

__version__ = "0.1.0"
