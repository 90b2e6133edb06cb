"""BERT pretraining on DeepSpeed: model, optimizers, data, training loop, checkpoints, export to Hugging Face."""
import os
import sys

# DeepSpeed JIT-builds its ops (the CPU communication op) with torch.utils.cpp_extension.load into TORCH_EXTENSIONS_DIR,
# by default the user-wide ~/.cache/torch_extensions, which every environment shares and rebuilds for its own torch
# (and where a build killed in another one leaves a lock that hangs this one): each virtual environment gets its own
# (scripts/setup.sh builds the op there by importing this package first).
if "TORCH_EXTENSIONS_DIR" not in os.environ and sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK):
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(sys.prefix, "torch_extensions")
