"""BERT pretraining on DeepSpeed: model, optimizers, data, training loop, checkpoints, export to Hugging Face."""
import fcntl
import hashlib
import logging
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


def load_communication_op() -> None:
    """Load DeepSpeed's CPU communication op (building it if need be) before DeepSpeed does, holding an flock on the
    venv's build directory. torch marks a load in progress with a `lock` file that only the loading process removes,
    and every process loads the op (ninja checks it is up to date): one killed in that moment (a rank its launcher
    stops when another fails, a preempted job) left every later run waiting for the file forever. Our loads hold the
    flock, which the kernel releases when a process dies, so a `lock` file met under it is such a leftover."""
    from deepspeed.comm.torch import build_shm_op

    directory = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not directory or not directory.startswith(os.path.join(sys.prefix, "torch_extensions")):
        build_shm_op()  # a directory of the user's: others than us may load from it
        return
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder  # the op build_shm_op loads on CPU

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{ShareMemCommBuilder.NAME}.flock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        leftover = os.path.join(directory, ShareMemCommBuilder.NAME, "lock")
        if os.path.exists(leftover):
            logging.getLogger(__name__).warning("%s: left by a process killed while loading DeepSpeed's communication "
                                                "op; removed", leftover)
            os.remove(leftover)
        build_shm_op()
