"""qgpu-min: a small SIMT GPU compiled into the weights of Qwen3.5-2B."""

__version__ = "0.1.0"
