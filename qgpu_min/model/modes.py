"""The activation precisions the forward pass runs in: a leaf module, so a command line can offer them
without loading the model."""
MODES = ("fp32", "bf16")    # fp32, or bf16 emulating torch bf16 inference
