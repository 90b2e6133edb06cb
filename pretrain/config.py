"""The settings of a pretraining phase (`TrainConfig`) and of the model (`ModelConfig`, sized by its arch's presets).

The `TrainConfig` defaults are the phase-1 recipe; a phase's effective settings are those defaults <- its arch's recipe
(`pretrain/model/<arch>/<phase>.yaml`: what differs) <- `--config FILE` <- `--set KEY=VALUE` <- flags such as
--preset, layered and type-checked by `wiki2bert_core.config.layered`, so a mistake is one ConfigError line naming
the file (or flag) and the key, exactly as for stages.yaml. `pretrain config` prints them with their descriptions (the
comments on the fields). Fields declared `changeable` may differ in a resumed run (`TrainConfig`) or in phase 2 from
phase 1's model (`ModelConfig`); the others are checked against the run or model being continued (prepare.py).
What differs by arch (presets, defaults, own settings, checks, recipes) is the arch's (pretrain/model/arch.py).
No torch here: `pretrain config` runs in a plain install.
"""
from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

from wiki2bert_core.errors import ConfigError
from wiki2bert_core.config import SettingError, changeable, coerce, layered, parse_setting, read_yaml
from wiki2bert_core.mixture import check_alpha, check_weights
from wiki2bert_core.wordpiece import padded_vocab_size
from pretrain.schedules import SCHEDULED, check_sum_at_most_one, check_values, parse_schedule
from pretrain.model.arch import DEFAULT_ARCH, names, spec

PHASES = ("phase1", "phase2")


@dataclasses.dataclass
class ModelConfig:
    vocab_size: int  # tokens of vocab.txt padded to a multiple of 8 (from the vocabulary, not a setting)
    # bert: BERT (post-LayerNorm, absolute position embeddings, GELU, biases: model/bert/); modernbert: ModernBERT
    # (pre-LayerNorm, rotary positions, GeGLU, no biases, global and sliding-window layers: model/modernbert/);
    # roberta: RoBERTa / XLM-R (BERT's layers, positions after the pad id, one token type: model/roberta/). The
    # phase's `arch` sets it
    arch: str = DEFAULT_ARCH
    hidden_size: int = 768  # width of the encoder
    num_hidden_layers: int = 12  # Transformer layers
    num_attention_heads: int = 12  # attention heads per layer (hidden_size must be a multiple)
    # width of each layer's feed-forward block (modernbert: of its GeGLU, whose input projection is twice as wide)
    intermediate_size: int = 3072
    # longest sequence the model takes (bert: the rows of its position embeddings; modernbert: a limit only, RoPE
    # has no table)
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # bert: segment (token type) embeddings
    # dropout on the embeddings and the feed-forward output (bert: and on the attention output)
    hidden_dropout_prob: float = changeable(0.1)
    # dropout on the attention probabilities (modernbert: and on the attention output)
    attention_probs_dropout_prob: float = changeable(0.1)
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon
    # modernbert: the window of the local (sliding-window) layers: a token attends to the tokens at most
    # local_attention // 2 positions away on either side (transformers' ModernBertConfig.local_attention)
    local_attention: int = 128
    global_attn_every_n_layers: int = 3  # modernbert: layers 0, n, 2n, ... attend globally, the others locally
    # modernbert: RoPE base of the global layers; raising it extends the context (ModernBERT: 10,000 at 1,024
    # tokens, 160,000 for 8,192: model/modernbert/phase2.yaml)
    global_rope_theta: float = changeable(10000.0)
    local_rope_theta: float = 10000.0  # modernbert: RoPE base of the local layers
    initializer_range: float = changeable(0.02)  # standard deviation of the initial weights
    pad_token_id: int = 0  # id of the pad token in the vocabulary ([PAD]; roberta: <pad>, its positions start after it)
    # the masked-LM decoder's weight is the word embeddings (every arch's published checkpoints); false: a weight of
    # its own, as a Hugging Face model whose config.json says so has it (--init keeps it as the model had it)
    tie_word_embeddings: bool = True
    # recompute each layer's activations in backward instead of keeping them: less memory, one more forward
    activation_checkpointing: bool = changeable(False)

    def __post_init__(self):
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size")
        for name in sizes:
            if getattr(self, name) < 1:
                raise ValueError(f"model config: {name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"model config: hidden_size {self.hidden_size} is not a multiple of "
                             f"num_attention_heads {self.num_attention_heads}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"model config: pad_token_id {self.pad_token_id} outside the vocabulary "
                             f"(size {self.vocab_size})")
        try:
            arch = spec(self.arch)
        except ValueError as e:
            raise ValueError(f"model config: {e}") from None
        arch.check_model(self)

    def is_global_layer(self, layer: int) -> bool:
        """ModernBERT: whether layer `layer` (0-based) attends globally (else within its window)."""
        return layer % self.global_attn_every_n_layers == 0


def model_config(preset: str, vocab_size: int, arch: str = DEFAULT_ARCH, **overrides) -> ModelConfig:
    presets = spec(arch).presets
    if preset not in presets:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(presets)}")
    known = {f.name for f in dataclasses.fields(ModelConfig)} - {"vocab_size", "arch"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown model config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return ModelConfig(vocab_size=padded_vocab_size(vocab_size), arch=arch,
                       **{**spec(arch).defaults, **presets[preset], **overrides})


def preset_of(config: ModelConfig) -> str | None:
    """The preset whose shape `config` has (of its arch), if one has it."""
    shape = dataclasses.asdict(config)
    return next((name for name, preset in spec(config.arch).presets.items()
                 if all(shape[k] == v for k, v in preset.items())), None)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    # the model: bert (BERT), modernbert (ModernBERT, MLM-only) or roberta (RoBERTa / XLM-R, MLM-only; its recipes
    # continue a published checkpoint), each a folder pretrain/model/<arch>/ that holds its model, presets and phase
    # recipes (<phase>.yaml: this picks them). Phase 2 and --init continue a model of this arch; --init of a model
    # directory sets it to the model's (a different one set here is refused)
    arch: str = DEFAULT_ARCH
    # model size: tiny, mini, small (CPU, tests), base, large, 1.5b, 5b (--preset), of the arch (its presets,
    # pretrain/model/<arch>/); phase 2 and --init keep the model they start from and its preset (a Hugging Face
    # model need not have a preset's shape: hparams.json's `model`)
    preset: str = "base"
    model: dict[str, Any] = dataclasses.field(default_factory=dict)  # ModelConfig overrides
    # what the model learns: mlm+nsp, masked LM and next-sentence prediction (BERT's, NVIDIA's), or mlm, masked LM
    # only (RoBERTa's, MosaicBERT's): no NSP head, loss or figures, exported as a BertForMaskedLM. Data without
    # sentence pairs (a doc-sentences variant) needs mlm, and so do archs modernbert and roberta. null: that of the
    # model --init or phase 2 continues (mlm for one trained MLM-only or a Hugging Face model without NSP head), else
    # mlm+nsp for bert and mlm for modernbert and roberta
    objective: Literal["mlm+nsp", "mlm"] | None = None
    seq_len: int | None = None  # null: the data's sequence length; a number only asserts it
    # sequences per optimizer step, all ranks together; or a schedule (pretrain/schedules.py: [[0, 8192], [0.25,
    # 65536]], a batch-size warm-up), grown by gradient accumulation so micro_batch and memory stay: every value a
    # multiple of micro_batch x ranks (a linear one's rounded down to one)
    global_batch: int | list[Any] | dict[str, Any] = 65536
    micro_batch: int = 64  # sequences per forward pass on one rank
    # several whole sequences per row of seq_len (first-fit decreasing over each micro-batch's sequences), so
    # little compute goes to padding; micro-batches and global_batch still count sequences, and losses and
    # gradients are those of the unpacked run. Memory follows the rows: a packed run can take a larger micro_batch
    pack_sequences: bool = True
    # static: the masks the HDF5 files hold, read as written (NVIDIA's recipe); dynamic: the files' masks undone and
    # new ones drawn each time a sequence is read (RoBERTa's), from the seed, the epoch and the sequence, so a resumed
    # run is still exact (masking.py). Held-out evaluation keeps the held-out files' stored masks either way
    masking: Literal["static", "dynamic"] = "static"
    # dynamic masking: share of a sequence's tokens to predict ([CLS], [SEP] never), or a schedule
    # (pretrain/schedules.py; [[0, 0.3], [0.6, 0.15], [0.9, 0.05]]: the shape of mmBERT's 30 -> 15 -> 5%)
    mask_rate: float | list[Any] | dict[str, Any] = 0.15
    # dynamic masking: share of the positions to predict that become [MASK] (BERT's 0.8; NeoBERT's and EuroBERT's
    # 1.0), or a schedule
    mask_replace: float | list[Any] | dict[str, Any] = 0.8
    # dynamic masking: share of the positions to predict that become a random token (BERT's 0.1), or a schedule; the
    # rest, 1 - mask_replace - mask_random, keep their token
    mask_random: float | list[Any] | dict[str, Any] = 0.1
    whole_word_masking: bool = False  # dynamic masking: a word's `##` pieces (the vocabulary's) masked with it
    # dynamic masking: positions to predict per sequence at most (the batches' masked_lm_positions width); null:
    # ceil(mask_rate * seq_len), NVIDIA's 20 at 128. Refused below what mask_rate needs at the data's seq_len
    max_predictions: int | None = None
    # data of several languages (`pipeline run --lang hu,fi,et`): this phase's own mixture, each language's share
    # of the masked tokens read being weight * size ** language_alpha (wiki2bert_core/mixture.py: 1 the languages'
    # sizes, 0 equal shares; mmBERT anneals 0.7 -> 0.5 -> 0.3 over its phases), over the same files; null: the
    # files as the pipeline mixed them (unless language_weights are set: then the pipeline's alpha). A piecewise
    # schedule (pretrain/schedules.py; [[0, 0.7], [0.6, 0.5], [0.9, 0.3]]) changes the mixture at its points, each
    # starting a new epoch of the files read at the new rates
    language_alpha: float | list[Any] | dict[str, Any] | None = None
    # data of several languages: this phase's weight of each language (1 for one not named, 0 leaves it out of this
    # phase), with language_alpha; the pipeline's language weights do not carry over
    language_weights: dict[str, float] = dataclasses.field(default_factory=dict)
    steps: int = 7038  # optimizer steps of the whole phase (the schedule's length)
    # stop (checkpoint and exit 0) after this many steps; the same command goes on (jobs with a time limit)
    steps_this_run: int | None = changeable(None)
    lr: float = 6e-3  # peak learning rate
    warmup: float = 0.2843  # fraction of `steps` with linear warmup
    # the learning rate after the warmup: poly, lr * (1 - progress) ** decay_power down to 0 at the last step
    # (BERT's); wsd, warmup-stable-decay: the peak until the last `cooldown` of the steps, then down to 0 as
    # lr * (1 - sqrt(progress of the cooldown)) (ModernBERT's trapezoid, 1-sqrt decay)
    schedule: Literal["poly", "wsd"] = "poly"
    decay_power: float = 0.5  # schedule poly: the power of the decay
    # schedule wsd: fraction of `steps`, at the end, over which the lr falls to 0; 0: none, the phase ends at the
    # peak (ModernBERT's phase 1, which its phase 2 continues)
    cooldown: float = 0.0
    # a time budget for the phase, e.g. 90s, 45m, 6h (schedule wsd): the phase ends when it is spent, its decay (the
    # last `cooldown` of the steps) timed from the run's own measured speed so that the last step ends on the budget
    # (cramming's budget triangle; run/budget.py). `steps` is then the most steps the phase may take, and `warmup` a
    # fraction of the steps the budget allows. Counted from the first step of each run (start-up not counted),
    # summed over the resumed runs of the phase; null: no budget, the phase takes `steps`
    budget: str | None = changeable(None)
    # lamb, lans: per-tensor trust ratios; stableadamw: AdamW with per-tensor update clipping (ModernBERT's:
    # optimizers.py), which makes grad_clip unnecessary (ModernBERT sets none); adamw: torch's. Both AdamWs want a much
    # smaller lr, e.g. 1e-4
    optimizer: Literal["lamb", "lans", "stableadamw", "adamw"] = "lamb"
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])  # decay rates of the moments
    eps: float = 1e-6  # added to the second moment's square root
    # not on biases and LayerNorm weights (the 1-dimensional tensors); adamw and stableadamw multiply it by the lr
    # (torch's AdamW)
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # global gradient-norm clipping; 0 disables
    # self-attention kernel (attention.py; the rest of the encoder computes the real tokens only with each): mask
    # (SDPA over the rows with a mask), nested (nested jagged tensors; bert only: it takes no window for ModernBERT's
    # local layers), flash (flash-attn's varlen kernel, windowed in local layers); auto: mask on CPU, the fastest on
    # GPU (measured)
    attention: Literal["auto", "mask", "nested", "flash"] = changeable("auto")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: fp32 on CPU, bf16 (else fp16) on GPU
    # DeepSpeed ZeRO stage 0-3; null: by model size (0 below 1B parameters, 1 up to 3B, 2 above)
    zero_stage: int | None = None
    seed: int = 12345  # model initialization, dropout, data order
    loader_workers: int = changeable(2)  # DataLoader worker processes per rank
    checkpoint_every: int = changeable(200)  # steps between checkpoints (also at the end and on SIGTERM/SIGINT)
    keep_checkpoints: int = changeable(3)  # the newest this many checkpoints are kept
    # background: training stops only while the states are copied into CPU memory (kept between saves: about the
    # size of this rank's model and optimizer states), a thread writes and verifies the checkpoint, one at a time;
    # blocking: training waits for the whole write. The last checkpoint of a run is waited for in either case
    checkpoint_writes: Literal["background", "blocking"] = changeable("background")
    log_every: int = changeable(10)  # steps between metrics.jsonl / TensorBoard rows
    # held-out evaluation (evaluate.py) every this many steps and at the end of the phase; 0: off; null: as often
    # as keeps evaluation within ~5% of the run's training time (up to 20 times a phase; time_plan.py eval_cadence),
    # and at least at the end, whatever that one costs (the time-plan line says the share)
    eval_every: int | None = changeable(None)
    eval_samples: int = changeable(10000)  # the first this many instances of the held-out files (MLPerf's 10,000)
    # held-out HDF5 directory (--eval-data); null: the data directory's test/ split (if it has one)
    eval_data: str | None = changeable(None)
    # held-out evaluation: null, the held-out files' masks as written (the hdf5 stage's masked_lm_prob, 0.15 by
    # default); a rate, new masks at that rate (single tokens, 80/10/10), the same at every evaluation of every run
    # and phase, whatever the training's mask_rate
    eval_mask_rate: float | None = changeable(None)
    flops_profiler_step: int | None = changeable(None)  # DeepSpeed flops profiler at this step -> flops_profile.txt
    # torch.profiler on these steps -> profile/step<N>_rank<R>.{json,txt} (Chrome trace, op table)
    torch_profiler_steps: list[int] = changeable(default_factory=list)

    def __post_init__(self):
        _check(self)

    def model_settings(self) -> dict[str, Any]:
        """The model's settings but vocab_size (which comes from the vocabulary) and those of the other archs: the
        arch's and the preset's, `model` over them."""
        arch = spec(self.arch)
        others = _settings_of_others(self.arch)
        defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name not in {"vocab_size", *others}}
        return {**defaults, **arch.defaults, **arch.presets[self.preset], "arch": self.arch, **self.model}


BUDGET_UNITS = {"s": 1, "m": 60, "h": 3600}


def budget_seconds(budget: str) -> float:
    """The seconds of a `budget` setting (a positive number and a unit: 90s, 45m, 6h); ValueError if it is not one."""
    text = str(budget).strip()
    try:
        seconds = float(text[:-1]) * BUDGET_UNITS[text[-1:]]
    except (KeyError, ValueError):
        raise ValueError(f"expected a time such as 90s, 45m or 6h, got {budget!r}") from None
    if not seconds > 0:
        raise ValueError(f"must be a positive time, got {budget!r}")
    return seconds


def _settings_of_others(arch: str) -> set[str]:
    """The model settings other archs have and `arch` has not."""
    return {key for name in names() for key in spec(name).own_settings} - set(spec(arch).own_settings)


def phase_of_length(seq_len: int, arch: str = DEFAULT_ARCH) -> str:
    """The phase whose recipe trains at `seq_len` (for `pretrain estimate` and `tune`)."""
    return spec(arch).phase_of_length(seq_len)


# --recipe NAME: an anchor's published settings, pretrain/recipes/<name>/<phase>.yaml, over the arch's recipe and
# under --config; a `presets:` mapping in it holds a model size's own values (preset -> settings)
RECIPES_DIR = Path(__file__).parent / "recipes"


def recipe_names() -> list[str]:
    return sorted(p.name for p in RECIPES_DIR.iterdir() if p.is_dir())


def _recipe_layer(recipe: str, phase: str) -> tuple[dict, dict, Path]:
    """The settings of --recipe's phase file and its `presets:` mapping; ConfigError if there is none."""
    if recipe not in recipe_names():
        raise ConfigError(f"--recipe {recipe}: unknown recipe (known: {', '.join(recipe_names())})")
    path = RECIPES_DIR / recipe / f"{phase}.yaml"
    if not path.is_file():
        raise ConfigError(f"--recipe {recipe}: has no {phase} ({path} does not exist)")
    layer = read_yaml(path)
    return layer, layer.pop("presets", None) or {}, path


def load_train_config(phase: str, config_file: Path | None = None, overrides: list[str] = (),
                      values: dict[str, Any] | None = None, init_arch: str | None = None,
                      recipe: str | None = None) -> TrainConfig:
    """`overrides` are --set KEY=VALUE strings (KEY may be dotted: model.hidden_dropout_prob=0);
    `values` are set by other flags (e.g. {"preset": "mini"}); `init_arch`: the arch of the model --init continues,
    the arch (and recipe) unless a layer sets one; `recipe`: --recipe's name."""
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r} (known: {', '.join(PHASES)})")
    layers: list[tuple[dict, str]] = [({"arch": init_arch}, f"--init: {phase}")] if init_arch else []
    by_preset: dict = {}
    if recipe is not None:
        recipe_settings, by_preset, recipe_file = _recipe_layer(recipe, phase)
        layers.append((recipe_settings, f"{recipe_file}: {phase}"))
    if config_file is not None:
        layers.append((read_yaml(config_file), f"{config_file}: {phase}"))
    for item in overrides:
        key, value = parse_setting(item)
        layers.append(({key: value}, f"--set {item}: {phase}"))
    if values:
        layers.append((values, f"command line: {phase}"))
    # the recipe is the arch's that the layers above it set (an unknown arch is refused by `layered`)
    arch = next((layer["arch"] for layer, _ in reversed(layers) if layer.get("arch") in names()), DEFAULT_ARCH)
    arch_recipe = spec(arch).recipe(phase)
    config = layered(TrainConfig, [(read_yaml(arch_recipe), f"{arch_recipe}: {phase}"), *layers])
    if config.preset in by_preset:  # the size's own values, right over the recipe's
        at = next(i for i, (_, source) in enumerate(layers) if source.startswith(f"{recipe_file}:")) + 1
        layers.insert(at, (by_preset[config.preset], f"{recipe_file}: presets.{config.preset}: {phase}"))
        config = layered(TrainConfig, [(read_yaml(arch_recipe), f"{arch_recipe}: {phase}"), *layers])
    return config


def _default(key: str) -> Any:
    return TrainConfig.__dataclass_fields__[key].default


def _check(c: TrainConfig) -> None:
    def fail(key: str, problem: str):
        raise SettingError(key, problem)

    if c.arch not in names():
        fail("arch", f"{c.arch!r} is not one of {', '.join(map(repr, names()))}")
    arch = spec(c.arch)
    if c.preset not in arch.presets:
        fail("preset", f"unknown preset {c.preset!r} (known: {', '.join(arch.presets)})")
    if arch.nsp_head is None and c.objective == "mlm+nsp":
        fail("objective", f"mlm+nsp: {arch.title} has no next-sentence prediction (it trains MLM-only); use mlm")
    if arch.windows and c.attention == "nested":
        fail("attention", f"nested takes no window for {arch.title}'s local layers; use auto, mask or flash")
    if c.seq_len is not None and c.seq_len < 1:
        fail("seq_len", f"must be at least 1 or null (the data's), got {c.seq_len}")
    for key in ("micro_batch", "steps", "checkpoint_every", "keep_checkpoints", "log_every"):
        if getattr(c, key) < 1:
            fail(key, f"must be at least 1, got {getattr(c, key)}")
    if c.eval_every is not None and c.eval_every < 0:
        fail("eval_every", f"must be 0 (off), positive or null, got {c.eval_every}")
    if c.eval_samples < 1:
        fail("eval_samples", f"must be at least 1, got {c.eval_samples}")
    if c.steps_this_run is not None and c.steps_this_run < 1:
        fail("steps_this_run", f"must be at least 1 or null, got {c.steps_this_run}")
    if not 0 <= c.warmup < 1:
        fail("warmup", f"must be a fraction of the steps in [0, 1), got {c.warmup}")
    if not 0 <= c.cooldown <= 1 - c.warmup:
        fail("cooldown", f"must be a fraction of the steps in [0, 1 - warmup] = [0, {1 - c.warmup:g}], got "
                         f"{c.cooldown}")
    for key, schedule in (("cooldown", "wsd"), ("decay_power", "poly")):
        if c.schedule != schedule and getattr(c, key) != _default(key):
            fail(key, f"applies to schedule {schedule} only; set schedule: {schedule}")
    if c.budget is not None:
        try:
            budget_seconds(c.budget)
        except ValueError as e:
            fail("budget", str(e))
        if c.schedule != "wsd":
            fail("budget", "applies to schedule wsd only (its decay is timed to end on the budget); set schedule: "
                           "wsd")
    if not c.lr > 0:
        fail("lr", f"must be positive, got {c.lr}")
    for key in ("decay_power", "weight_decay", "grad_clip", "eps"):
        if getattr(c, key) < 0:
            fail(key, f"must not be negative, got {getattr(c, key)}")
    if len(c.betas) != 2 or not all(0 <= b < 1 for b in c.betas):
        fail("betas", f"expected two numbers in [0, 1), got {c.betas}")
    if c.zero_stage is not None and c.zero_stage not in (0, 1, 2, 3):
        fail("zero_stage", f"must be 0, 1, 2, 3 or null (by model size), got {c.zero_stage}")
    schedules = {key: parse_schedule(key, getattr(c, key)) for key in SCHEDULED}
    check_values("global_batch", schedules["global_batch"],
                 lambda v: None if isinstance(v, int) and v >= 1 else f"must be an integer of at least 1, got {v}")
    check_values("mask_rate", schedules["mask_rate"], lambda v: None if 0 < v < 1 else f"must be in (0, 1), got {v}")
    for key in ("mask_replace", "mask_random"):
        check_values(key, schedules[key], lambda v: None if 0 <= v <= 1 else f"must be a share in [0, 1], got {v}")
    check_sum_at_most_one(("mask_replace", "mask_random"), (schedules["mask_replace"], schedules["mask_random"]),
                          "mask_random" if c.mask_random != _default("mask_random") else "mask_replace")
    if c.eval_mask_rate is not None and not 0 < c.eval_mask_rate < 1:
        fail("eval_mask_rate", f"must be in (0, 1) or null (the held-out files' masks), got {c.eval_mask_rate}")
    if c.max_predictions is not None and c.max_predictions < 1:
        fail("max_predictions", f"must be at least 1 or null, got {c.max_predictions}")
    if c.masking == "static":
        for key in ("mask_rate", "mask_replace", "mask_random", "whole_word_masking", "max_predictions"):
            if getattr(c, key) != _default(key):
                fail(key, "applies to masking dynamic only (static reads the files' masks as written); set "
                          "masking: dynamic")
    if c.language_alpha is not None:
        if schedules["language_alpha"].linear:
            fail("language_alpha", f"takes a piecewise schedule [[progress, alpha], ...], not {{linear: ...}}: the "
                                   f"mixture changes at its points")
        for alpha in schedules["language_alpha"].values:
            check_alpha(alpha, "language_alpha")
    check_weights(c.language_weights, "language_weights")
    if c.loader_workers < 0:
        fail("loader_workers", f"must not be negative, got {c.loader_workers}")
    hints = typing.get_type_hints(ModelConfig)
    settable = sorted(set(hints) - {"vocab_size", "arch"})
    fixed = {"vocab_size": " (it comes from the vocabulary)", "arch": " (set the phase's arch)"}
    for key, value in c.model.items():
        if key not in settable:
            fail(f"model.{key}", "not a model setting" + fixed.get(key, f" (known: {', '.join(settable)})"))
        if key in _settings_of_others(c.arch):
            having = " and ".join(name for name in names() if key in spec(name).own_settings)
            fail(f"model.{key}", f"applies to arch {having} only (this is arch {c.arch})")
        c.model[key] = coerce(value, hints[key], f"model.{key}")
