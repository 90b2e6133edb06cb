"""The fine-tuning recipe: one fixed set of settings per task kind (`RECIPES`), in the spirit of Cramming's
"GLUE-sane" recipe (one recipe for every task, at most 5 epochs, no search per task), so that figures compare
across models and runs.

Each setting is a field of `Recipe`, documented there; `--set KEY=VALUE` changes it for every kind,
`--set KIND.KEY=VALUE` (e.g. tokens.lr=5e-5) for one kind, layered and type-checked by
`wiki2bert_core.config.layered`, so a mistake is one ConfigError line naming the flag and the key.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal

from wiki2bert_core.config import SettingError, check_minimum, layered, parse_setting
from pretrain.finetune.task import TASK_KINDS


@dataclasses.dataclass(frozen=True)
class Recipe:
    # peak learning rate of AdamW. 1e-4 suits small models (Google's BERT miniatures fine-tune best at 1e-4 to
    # 3e-4) and is the top of the usual range for BERT-base (2e-5 to 1e-4): set 5e-5 for base-size models
    lr: float = 1e-4
    epochs: int = 3  # passes over the training split (the recipes use 3 to 5, Cramming's limit)
    batch: int = 32  # examples per optimizer step (multiple choice: questions, each with all its choices)
    # fraction of the optimizer steps with a linear warmup, then linear decay to 0: pretraining's schedule
    # (pretrain/optim/schedule.py), whose step t of w warmup steps runs at (t + 1) / w of lr
    warmup: float = 0.1
    weight_decay: float = 0.01  # AdamW's decoupled weight decay, not on biases and LayerNorm weights (optim's groups)
    grad_clip: float = 1.0  # global gradient-norm clipping; 0 disables
    # sub-tokens per sequence, [CLS] and [SEP] included (at most the tokenizer's model_max_length); longer ones are
    # cut (pairs: the longer text first). Words of a token task cut off this way are predicted as the most frequent
    # training tag (counted as `cut_words`)
    max_length: int = 128
    # batches of examples of similar length (as transformers' group_by_length): each epoch's random order is cut into
    # groups of 50 batches, each group sorted by length and cut into batches, which are then shuffled; much less
    # padding (NerKor: a median sentence of 36 sub-tokens, the longest 256). false: random batches
    group_by_length: bool = True
    seed: int = 0  # seed k of --seeds N is seed + k: the classifier's initialisation, dropout and the data order
    precision: Literal["auto", "fp32", "bf16"] = "auto"  # auto: fp32 on CPU, bf16 autocast on a GPU

    def __post_init__(self):
        check_minimum(self, 1, "epochs", "batch")
        check_minimum(self, 4, "max_length")
        check_minimum(self, 0, "weight_decay", "grad_clip", "seed")
        if not self.lr > 0:
            raise SettingError("lr", f"must be positive, got {self.lr}")
        if not 0 <= self.warmup < 1:
            raise SettingError("warmup", f"must be a fraction of the steps in [0, 1), got {self.warmup}")


# what each kind changes from the Recipe defaults: the small pair and choice sets (HuCB 250, HuCoPA 400 examples)
# get smaller batches and more epochs, so that they see some hundred optimizer steps; token tasks a longer
# max_length, as a sentence's words split into many sub-tokens in a small vocabulary
RECIPES: dict[str, dict[str, Any]] = {
    "single": {},
    "pair": {"batch": 16, "epochs": 5},
    "choice": {"batch": 16, "epochs": 5},
    "tokens": {"max_length": 256},
}


def load_recipes(overrides: list[str] = ()) -> dict[str, Recipe]:
    """Each task kind's recipe: RECIPES over the Recipe defaults, then the --set KEY=VALUE strings `overrides`
    (KEY for every kind, KIND.KEY for one)."""
    parsed = [(*parse_setting(item), item) for item in overrides]
    recipes = {}
    for kind in TASK_KINDS:
        layers: list[tuple[dict, str]] = [(RECIPES[kind], f"recipe {kind}")]
        for key, value, item in parsed:
            first, dot, rest = key.partition(".")
            if dot and first in TASK_KINDS:
                if first == kind:
                    layers.append(({rest: value}, f"--set {item}: {kind}"))
            else:
                layers.append(({key: value}, f"--set {item}: {kind}"))
        recipes[kind] = layered(Recipe, layers)
    return recipes
