"""BERT pretraining on DeepSpeed: model, optimizers, data, training loop, checkpoints, export to Hugging Face."""
import hashlib
import os
import shutil
import sys

# DeepSpeed JIT-builds its ops (the CPU communication op) with torch.utils.cpp_extension.load into TORCH_EXTENSIONS_DIR,
# by default the user-wide ~/.cache/torch_extensions, which every environment shares and rebuilds for its own torch
# (and where a build killed in another one leaves a lock that hangs this one): each virtual environment gets its own
# (scripts/setup.sh builds the op there by importing this package first), one a `ninja` (torch builds with the one
# PATH finds): ninja 1.13 starts its .ninja_log over when 1.11 wrote it and 1.11 reads 1.13's commands as changed, so
# a process with the venv's pip ninja on PATH and one with the system's rebuilt the op in turn (1-2 minutes each).
if "TORCH_EXTENSIONS_DIR" not in os.environ and sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK):
    _ninja = shutil.which("ninja")
    _ninja_key = hashlib.sha256(os.path.realpath(_ninja).encode()).hexdigest()[:12] if _ninja else "none"
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(sys.prefix, "torch_extensions", f"ninja-{_ninja_key}")
