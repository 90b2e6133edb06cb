"""Fine-tune one model on one task with one seed and predict its dev split: the same code on CPU (fp32) and GPU
(bf16 autocast).

A seed fixes everything that varies between runs: the classifier's initialisation (torch.manual_seed before the
model is built), dropout, and the order of the training examples (a generator of its own), so the same seed gives
the same figures on the same machine.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import torch

from wiki2bert_core.errors import DataError, first_line
from pretrain.finetune.encode import Encoded, collate
from pretrain.model.arch import takes_token_types
from pretrain.model.model_dir import HF_CONFIG, encoder_weights, refuse_fresh
from pretrain.finetune.recipe import Recipe
from pretrain.finetune.task import Task
from pretrain.optim.optimizers import parameter_groups
from pretrain.optim.schedule import WarmupPolyDecay

# the transformers class of each task kind's model: BERT's encoder with a fresh head on [CLS] or on each token
AUTO_CLASSES = {"single": "AutoModelForSequenceClassification", "pair": "AutoModelForSequenceClassification",
                "choice": "AutoModelForMultipleChoice", "tokens": "AutoModelForTokenClassification"}


@dataclasses.dataclass(frozen=True)
class ModelSource:
    name: str  # the model's row in the tables and its directory in --out
    path: Path  # a Hugging Face model directory with its tokenizer
    random_init: bool = False  # the same architecture with random weights (the "no pretraining" row)
    export_of: Path | None = None  # the phase directory `path` is exported from (run.py), if the model is one

    @property
    def origin(self) -> Path:
        """The model directory named on the command line."""
        return self.export_of or self.path


def load_model(source: ModelSource, task: Task, seed: int) -> torch.nn.Module:
    """The model for `task`'s kind, its new head (and with random_init all of it) initialised from `seed`; DataError
    if it does not load, or if a weight outside the head is not in the model's files (it would start from random
    values: weights that do not belong to the config, such as BERT's under model_type roberta)."""
    import transformers
    from safetensors import SafetensorError

    # "some weights newly initialized" (every fine-tuning's head is: checked below) and a bar per model load
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cls = getattr(transformers, AUTO_CLASSES[task.kind])
    labels = {} if task.kind == "choice" else {"num_labels": len(task.labels)}
    torch.manual_seed(seed)
    try:
        if source.random_init:
            config = transformers.AutoConfig.from_pretrained(str(source.path), local_files_only=True, **labels)
            return cls.from_config(config)
        model, loading = cls.from_pretrained(str(source.path), local_files_only=True, output_loading_info=True,
                                             **labels)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as e:  # damaged or not BERT-family
        raise DataError(f"{source.path}: cannot load the model for {task.kind} tasks ({first_line(e)})") from None
    fresh = [name for name in model.state_dict() if name in loading["missing_keys"]]
    refuse_fresh(source.path, encoder_weights(fresh, model.base_model_prefix), HF_CONFIG)
    return model


def load_tokenizer(path: Path):
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: cannot load the tokenizer ({first_line(e)})") from None


def choose_device(precision: str) -> tuple[torch.device, bool]:
    """The device and whether to compute in bf16 (autocast)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device, precision == "bf16" or (precision == "auto" and device.type == "cuda")


def make_deterministic(device: torch.device) -> None:
    """Deterministic kernels where they are cheap: on a GPU, cuBLAS needs a fixed workspace for them (set before
    its first use)."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


def optimizer_steps(examples: int, recipe: Recipe) -> int:
    return recipe.epochs * math.ceil(examples / recipe.batch)


def fine_tune(model: torch.nn.Module, train: list[Encoded], kind: str, recipe: Recipe, seed: int, pad_id: int,
              device: torch.device, bf16: bool, on_step=lambda: None) -> float:
    """Train `model` on `train` by the recipe; returns the mean training loss of the last epoch. `on_step` is
    called after each optimizer step (the progress bar)."""
    model.to(device).train()
    optimizer = torch.optim.AdamW(parameter_groups(model, recipe.weight_decay), lr=recipe.lr)
    total = optimizer_steps(len(train), recipe)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupPolyDecay(total, int(recipe.warmup * total), 1.0))
    order = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # dropout
    losses: list[float] = []
    for _ in range(recipe.epochs):
        losses = []
        for indices in epoch_batches([encoded.length for encoded in train], recipe, order):
            batch = collate([train[i] for i in indices], kind, pad_id)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = model(**model_inputs(model, batch, device)).loss
            loss.backward()
            if recipe.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            on_step()
    return sum(losses) / max(1, len(losses))


def model_inputs(model: torch.nn.Module, batch: dict[str, torch.Tensor], device: torch.device
                 ) -> dict[str, torch.Tensor]:
    """`batch` on `device` as the model's keyword arguments: without token type ids for a model that takes none
    (ModernBERT: the two texts of a pair are told apart by the [SEP] between them only)."""
    keep = takes_token_types(model)
    return {key: value.to(device) for key, value in batch.items() if keep or key != "token_type_ids"}


def epoch_batches(lengths: list[int], recipe: Recipe, generator: torch.Generator) -> list[list[int]]:
    """One epoch's batches of example indices, in random order (grouped by length with recipe.group_by_length)."""
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if not recipe.group_by_length:
        return [order[start:start + recipe.batch] for start in range(0, len(order), recipe.batch)]
    group = 50 * recipe.batch
    batches = []
    for start in range(0, len(order), group):
        ranked = sorted(order[start:start + group], key=lambda i: lengths[i])
        batches += [ranked[b:b + recipe.batch] for b in range(0, len(ranked), recipe.batch)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@torch.no_grad()
def predict(model: torch.nn.Module, dev: list[Encoded], kind: str, batch_size: int, pad_id: int,
            device: torch.device, bf16: bool, fallback: int) -> list:
    """The predicted class index of each dev example; tokens: a tag index per word (`fallback` for words cut off
    by max_length)."""
    model.to(device).eval()
    by_length = sorted(range(len(dev)), key=lambda i: dev[i].length)  # batches of similar length: little padding
    predicted: list = [None] * len(dev)
    for start in range(0, len(dev), batch_size):
        indices = by_length[start:start + batch_size]
        batch = collate([dev[i] for i in indices], kind, pad_id)
        batch.pop("labels")
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(**model_inputs(model, batch, device)).logits
        best = logits.float().argmax(-1).cpu()
        for row, i in enumerate(indices):
            predicted[i] = ([int(best[row, p]) if p >= 0 else fallback for p in dev[i].first_tokens]
                            if kind == "tokens" else int(best[row]))
    return predicted
