"""The activation precisions the forward pass runs in, the devices its products run on, and the quantizations
a model can be loaded with: a leaf module, so a command line can offer them without loading the model."""
MODES = ("fp32", "bf16")    # fp32, or bf16 emulating torch bf16 inference
DEVICES = ("cpu", "cuda") # --device: where the layers' dense products run (cuda: model/cuda.py, optional)
QUANTS = ("int8",)          # --quant: int8 is Q8 (kernels.QuantQ8), weights.quantize_weights
