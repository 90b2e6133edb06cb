"""Run preparation: every check a pretraining phase needs (config, vocabulary, data, the checkpoint to resume or
the model to start from) before anything is written or DeepSpeed is imported, gathered into a `Run`."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from wiki2bert_core.config import changeable_fields, config_to_dict
from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import read_json
from wiki2bert_core.wordpiece import (added_token_ids, load_tokenizer, padded_vocab_size, read_vocab,
                                      special_token_ids, special_token_names, vocab_difference, word_start_marker)
from pretrain.model.attention import available_kernels
from pretrain.model import checkpoint_files
from pretrain.model.checkpoint_files import Checkpoint
from pretrain.config import ModelConfig, TrainConfig, model_config, preset_of
from pretrain.model.arch import DEFAULT_ARCH, spec
from pretrain.data.loader import DataDirectory, open_data
from pretrain.run.deepspeed_settings import choose_precision, read_user_ds_config
from pretrain.model.model_dir import (HPARAMS, HuggingFaceDir, ModelDir, PhaseDir, is_phase_dir, open_model_dir,
                                      require_encoder_weights, vocabulary_difference)
from pretrain.out_dirs import RUN, check_out_dir
from wiki2bert_core.variant_dir import (DOC_SENTENCES, PARAMS_FILE, find_vocab_file, held_out_files, held_out_split,
                                        own_vocab, read_params, training_files)
from pretrain.data.masking import DynamicMasking
from pretrain.schedules import PhaseSchedules
from wiki2bert_core.masking import MaskingVocab, default_max_predictions, predictions_needed

EVAL_MASK_SEED = 0  # the held-out masks at eval_mask_rate: the same in every run and phase


@dataclasses.dataclass(frozen=True)
class InitFrom:
    """The weights a phase starts from (--init; recorded in hparams.json as `init`): the latest checkpoint of a phase
    directory (phase 2 from phase 1, or a phase continuing another run), or a Hugging Face BERT, XLM-R or ModernBERT
    directory (an export, or another model: hf_weights.py)."""
    path: Path
    tag: str | None = None  # the phase directory's checkpoint; None: a Hugging Face directory
    step: int | None = None

    @property
    def hugging_face(self) -> bool:
        return self.tag is None

    @property
    def model_dir(self) -> ModelDir:
        return HuggingFaceDir(self.path) if self.hugging_face else PhaseDir(self.path)

    def to_dict(self) -> dict:
        if self.hugging_face:
            return {"model_dir": str(self.path)}
        return {"phase_dir": str(self.path), "tag": self.tag, "step": self.step}

    @classmethod
    def from_dict(cls, d: dict) -> InitFrom:
        if "model_dir" in d:
            return cls(Path(d["model_dir"]))
        return cls(Path(d["phase_dir"]), d["tag"], int(d["step"]))

    def weights(self) -> dict:
        """Its weights under our parameter names (fp32 from a checkpoint, as stored from a Hugging Face directory)."""
        if self.hugging_face:
            return self.model_dir.weights()
        return checkpoint_files.load_weights(checkpoint_files.by_tag(self.path, self.tag))

    def __str__(self) -> str:
        return f"{self.path} (Hugging Face)" if self.hugging_face else f"{self.path}, step {self.step}"


@dataclasses.dataclass(frozen=True)
class Run:
    phase: str
    phase_dir: Path
    config: TrainConfig
    model: ModelConfig
    data: DataDirectory  # its seq_len is the run's (the data's; config.seq_len, when set, only asserts it)
    vocab_dir: Path
    vocab_size: int  # tokens in vocab.txt (the model's vocabulary is this padded to a multiple of 8)
    init: InitFrom | None  # the weights it started from (phase 2: phase 1's; phase 1: those of --init, if given)
    resume: Checkpoint | None  # this phase's own latest checkpoint
    world_size: int
    grad_accumulation: int  # the first step's (a scheduled global_batch: `schedules` has each step's)
    schedules: PhaseSchedules  # each setting's value at each step (scheduled or not)
    precision: str  # fp32 | bf16 | fp16
    user_ds_config: dict
    eval_files: list[Path] = dataclasses.field(default_factory=list)  # held-out files; [] = no evaluation
    masking: DynamicMasking | None = None  # None: the files' masks (masking static)
    # --init of a Hugging Face directory whose tokenizer the data's extends (vocab.extend_with): each new token's id
    # -> the ids of the pieces the directory's tokenizer splits it into, whose rows' mean its rows start from
    new_token_pieces: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    eval_masking: DynamicMasking | None = None  # the held-out masks at eval_mask_rate; None: the files' own

    @property
    def complete(self) -> bool:
        return self.resume is not None and self.resume.step >= self.config.steps


def prepare(phase: str, data_dir: Path, out_dir: Path, config: TrainConfig, vocab_dir: Path | None = None,
            init_dir: Path | None = None, deepspeed_config: Path | None = None,
            preset_flag: str | None = None) -> Run:
    """Every check that can fail before training; ConfigError (exit 2) with one line on the first problem."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = config.micro_batch * world_size
    schedules = PhaseSchedules.of(config, world_size)
    batches = schedules.schedules["global_batch"]
    for global_batch in [] if batches.linear else batches.values:
        if global_batch % per_step:
            raise ConfigError(f"global_batch {global_batch} is not a multiple of micro_batch {config.micro_batch} x "
                              f"{world_size} rank(s) = {per_step}; change global_batch or micro_batch")
    check_out_dir(Path(out_dir), f"pretrain {phase}", RUN)
    phase_dir = Path(out_dir) / phase
    training_files(data_dir)  # a wrong --data is reported as such, before the vocabulary is looked for
    vocab_dir = find_vocab_file(data_dir, vocab_dir).parent
    vocab = read_vocab(vocab_dir / "vocab.txt")

    resume = checkpoint_files.latest(phase_dir)
    if resume is not None and not (phase_dir / HPARAMS).is_file():
        raise DataError(f"{phase_dir / HPARAMS}: missing, so the checkpoint's settings are unknown")
    hparams = read_json(phase_dir / HPARAMS) if resume else None
    init = _init(phase, phase_dir, Path(init_dir) if init_dir else None, Path(out_dir), hparams)
    new_token_pieces = {}
    if resume:
        _check_same_vocab(vocab_dir / "vocab.txt", PhaseDir(phase_dir).vocab_file,
                          "the vocabulary the model was trained with")
    elif init:
        new_token_pieces = _check_init_vocab(vocab_dir / "vocab.txt", vocab, init.model_dir)
    if init:
        model, config = _continued_model(PhaseDir(phase_dir) if resume else init.model_dir, config, preset_flag,
                                         phase, len(vocab))
    else:
        try:
            model = model_config(config.preset, len(vocab), config.arch, **config.model)
        except ValueError as e:
            raise ConfigError(f"model: {e}") from None
    if config.objective is None:  # that of the model continued
        source = PhaseDir(phase_dir) if resume else init.model_dir if init else None
        config = dataclasses.replace(config, objective=_objective_of(source) if source
                                     else spec(config.arch).default_objective)
    if resume:
        _check_resumable(resume, hparams, config)
    if config.objective == "mlm+nsp":
        _check_sentence_pairs(data_dir)
    if len(vocab) > model.vocab_size:
        raise ConfigError(f"{vocab_dir / 'vocab.txt'}: {len(vocab)} tokens, more than the model's vocabulary "
                          f"({model.vocab_size})")
    if config.attention == "flash" and "flash" not in available_kernels(torch.device("cuda" if torch.cuda.is_available()
                                                                                          else "cpu")):
        raise ConfigError("attention flash: needs a CUDA GPU and the flash-attn package; use auto, mask or nested")
    data = open_data(data_dir, config.seq_len, len(vocab), world_size, config.language_alpha, config.language_weights)
    data.check_positions(model.max_position_embeddings)
    problem = spec(model.arch).check_data(model, data.seq_len)
    if problem:
        raise ConfigError(problem)
    user_ds = read_user_ds_config(deepspeed_config)
    stage = user_ds.get("zero_optimization", {}).get("stage", config.zero_stage)
    if stage == 3 and config.optimizer in ("lamb", "lans", "stableadamw"):
        raise ConfigError(f"zero_stage 3: {config.optimizer} needs whole tensors for its per-tensor statistics and "
                          f"ZeRO-3 does not give them; use zero_stage 1 or 2 (the same per-tensor values) or adamw")
    masking_vocab = (_masking_vocab(vocab, vocab_dir, data_dir)
                     if config.masking == "dynamic" or config.eval_mask_rate is not None else None)
    masking = (_dynamic_masking(config, masking_vocab, data.seq_len, schedules) if config.masking == "dynamic"
               else None)
    eval_masking = (held_out_masking(masking_vocab, config.eval_mask_rate) if config.eval_mask_rate is not None
                    else None)
    eval_files = _held_out_files(config, data_dir)
    return Run(phase=phase, phase_dir=phase_dir, config=config, model=model, data=data, vocab_dir=vocab_dir,
               vocab_size=len(vocab), init=init, resume=resume, world_size=world_size,
               grad_accumulation=schedules.accumulation(1), precision=choose_precision(config.precision),
               user_ds_config=user_ds, eval_files=eval_files, masking=masking, eval_masking=eval_masking,
               schedules=schedules, new_token_pieces=new_token_pieces)


def held_out_masking(masking_vocab: MaskingVocab, rate: float) -> DynamicMasking:
    """The held-out masks at `rate` (eval_mask_rate, `pretrain eval --mask-rate`): the same draws in every run, phase
    and evaluation (EVAL_MASK_SEED); HeldOut.read caps the predictions at the files' sequence length."""
    return DynamicMasking(masking_vocab, rate, 0, False, EVAL_MASK_SEED)


def data_masking_vocab(data_dir: Path) -> MaskingVocab:
    """The masking vocabulary of a data directory with its own vocabulary (ConfigError naming it if it has none)."""
    vocab_file = own_vocab(data_dir)
    if vocab_file is None:
        raise ConfigError(f"{data_dir}: no vocab.txt in this data directory, so new masks cannot be drawn; name a "
                          f"variant directory of the pipeline or leave --mask-rate out (the files' own masks)")
    vocab_dir = vocab_file.parent
    return _masking_vocab(read_vocab(vocab_dir / "vocab.txt"), vocab_dir, data_dir)


def _masking_vocab(vocab: dict[str, int], vocab_dir: Path, data_dir: Path) -> MaskingVocab:
    """The special ids and word-start marker as the data's variant.json records them (without one, the vocabulary's:
    the tokens its special_tokens_map.json names, BERT's without one, and the word-start marker of its pieces),
    the added tokens of the vocabulary's tokenizer.json."""
    params = read_params(data_dir)
    if params:
        special_ids, word_start = params.special_token_ids, params.word_start
    else:  # a WordPiece vocabulary (## continuations) has no word-start marker, whichever letters its tokens hold
        special_ids = special_token_ids(vocab, special_token_names(vocab_dir))
        word_start = "" if any(token.startswith("##") for token in vocab) else word_start_marker(vocab)
    return MaskingVocab.from_vocab(vocab, special_ids, word_start, added_token_ids(vocab_dir))


def _dynamic_masking(config: TrainConfig, masking_vocab: MaskingVocab, seq_len: int,
                     schedules: PhaseSchedules) -> DynamicMasking:
    """The training's masking, with the mask settings' schedules where one is scheduled. ConfigError if
    max_predictions is below what the highest mask_rate needs in a sequence of the data's length."""
    rate = max(schedules.schedules["mask_rate"].values)
    needed = int(predictions_needed(rate, seq_len))
    if config.max_predictions is not None and config.max_predictions < needed:
        raise ConfigError(f"max_predictions {config.max_predictions}: mask_rate {rate} needs {needed} "
                          f"in a sequence of {seq_len} tokens; raise it or leave it null (ceil(mask_rate * seq_len))")
    cap = config.max_predictions if config.max_predictions is not None else default_max_predictions(rate, seq_len)
    scheduled = {"mask_rate", "mask_replace", "mask_random"} & set(schedules.scheduled)
    return DynamicMasking(masking_vocab, schedules.value("mask_rate", 1), cap, config.whole_word_masking, config.seed,
                          mask_share=schedules.value("mask_replace", 1), random_share=schedules.value("mask_random", 1),
                          schedules=schedules if scheduled else None)


def _held_out_files(config: TrainConfig, data_dir: Path) -> list[Path]:
    """The files evaluate.py reads: `eval_data`'s (which must have some), else the data directory's test split;
    none when evaluation is off or the data has no test split."""
    if config.eval_every == 0:
        return []
    if config.eval_data is not None:
        return held_out_files(Path(config.eval_data))
    return held_out_split(data_dir)


def _check_resumable(resume: Checkpoint, hparams: dict, config: TrainConfig) -> None:
    # runs from before the objective and arch settings trained BERT with mlm+nsp, those from before the language
    # settings all languages as the files held them
    before = {"objective": "mlm+nsp", "arch": DEFAULT_ARCH, "language_alpha": None, "language_weights": {},
              "mask_replace": 0.8, "mask_random": 0.1, **hparams["config"]}
    now = config_to_dict(config)
    changeable = changeable_fields(TrainConfig)
    for key, value in now.items():
        if key not in changeable and before.get(key) != value:
            raise ConfigError(f"{resume.phase_dir}: resuming a run started with {key}={before.get(key)!r}, now "
                              f"{value!r}; keep the run's settings or use another --out")


def _init(phase: str, phase_dir: Path, init_dir: Path | None, out_dir: Path, hparams: dict | None) -> InitFrom | None:
    """What the phase starts from: a resumed run's recorded start (--init, if given, must name it), else --init
    (phase 2: by default <out>/phase1), else nothing (phase 1 from random weights)."""
    if hparams is not None:
        recorded = InitFrom.from_dict(hparams["init"]) if hparams.get("init") else None
        if init_dir is not None and (recorded is None or recorded.path != init_dir.resolve()):
            raise ConfigError(f"--init {init_dir}: {phase_dir} holds a run started from "
                              f"{recorded.path if recorded else 'random weights'}, which this command would resume; "
                              f"leave out --init, or use another --out")
        return recorded
    if init_dir is None and phase == "phase1":
        return None
    if init_dir is None and not is_phase_dir(out_dir / "phase1"):
        raise ConfigError(f"{out_dir / 'phase1'}: no checkpoint to start phase 2 from; pass --init PHASE1_DIR")
    return _find_init(init_dir or out_dir / "phase1", phase)


def _find_init(init_dir: Path, phase: str) -> InitFrom:
    """--init: a model directory (model_dir.py): a phase directory's latest checkpoint, or a Hugging Face BERT
    directory whose weights fill our model's encoder (the heads it lacks start fresh)."""
    model_dir = open_model_dir(init_dir)
    if isinstance(model_dir, PhaseDir):
        found = model_dir.find_checkpoint(f"start {phase.replace('phase', 'phase ')} from")
        model_dir.model_config()
        return InitFrom(init_dir.resolve(), found.tag, found.step)
    config = model_dir.model_config("--init")
    model_dir.tokenizer_file("its vocabulary cannot be checked against the data's")
    require_encoder_weights(model_dir, config)
    return InitFrom(init_dir.resolve())


def _continued_model(source: ModelDir, config: TrainConfig, preset_flag: str | None, phase: str = "phase2",
                     data_tokens: int = 0) -> tuple[ModelConfig, TrainConfig]:
    """The model of a phase that continues another's weights (phase 2 those of phase 1, any phase those of --init;
    when resuming, its own run's): that of the model directory `source`, where only training-time settings (the
    changeable ModelConfig fields) may change. The config gets the model's preset (a Hugging Face model's: the preset
    of its shape, if one has it). A Hugging Face model's vocabulary grows to the data's `data_tokens` where they are
    more (its tokenizer extended)."""
    if isinstance(source, PhaseDir):
        continued = source.model_config()
        saved = dataclasses.asdict(continued)
        preset = source.hparams().get("config", {}).get("preset", config.preset)
    else:
        continued = source.model_config("--init")
        saved = {**dataclasses.asdict(continued),
                 "vocab_size": padded_vocab_size(max(continued.vocab_size, data_tokens))}
        preset = preset_of(continued)
        if preset is None and preset_flag is None:
            preset = config.preset
    what = phase.replace("phase", "phase ")
    if saved["arch"] != config.arch:
        raise ConfigError(f"arch {config.arch}: {what} continues the {continued.arch} model of {source.path}; set "
                          f"arch {continued.arch} (--set arch={continued.arch}), which also picks its recipe")
    if preset_flag is not None and preset_flag != preset:
        raise ConfigError(f"--preset {preset_flag}: {what} continues the {preset or 'custom-shaped'} model of "
                          f"{source.path}")
    training_only = changeable_fields(ModelConfig)
    changed = [k for k in config.model if k not in training_only and config.model[k] != saved.get(k)]
    if changed:
        raise ConfigError(f"model.{changed[0]}: {what} cannot change the shape of the model in {source.path} "
                          f"(only {', '.join(training_only)})")
    try:
        model = ModelConfig(**{**saved, **config.model})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: {e}") from None
    return model, dataclasses.replace(config, preset=preset)


def _objective_of(source: ModelDir) -> str:
    """The objective the model of a phase directory was trained with (recorded; mlm+nsp in runs older than the
    setting), or that of a Hugging Face model's heads (mlm for a masked-LM head alone, and for ModernBERT)."""
    if isinstance(source, PhaseDir):
        return source.hparams().get("config", {}).get("objective") or "mlm+nsp"
    arch = source.architecture("--init")
    names = source.weight_names()
    return "mlm" if arch.nsp_head is None or (arch.mlm_head in names and arch.nsp_head not in names) else "mlm+nsp"


def _check_sentence_pairs(data_dir: Path) -> None:
    """Next-sentence prediction needs sentence pairs: refuses a variant written without them."""
    params = read_params(data_dir)
    if params is not None and params.sequence_kind == DOC_SENTENCES:
        raise ConfigError(f"{Path(data_dir) / PARAMS_FILE}: sequence_kind {DOC_SENTENCES}, no sentence pairs for "
                          f"next-sentence prediction (objective mlm+nsp); train it with --set objective=mlm")


def _check_init_vocab(vocab_file: Path, vocab: dict[str, int], init_dir: ModelDir) -> dict[int, list[int]]:
    """The model --init starts from must have the data's vocabulary: its vocab.txt the same lines, or, where a Hugging
    Face directory has none, its tokenizer.json the same token -> id map. A Hugging Face directory's may also be
    extended by tokens after its last id (vocab.extend_with): returns each such token's id -> the ids of the pieces
    the directory's tokenizer splits it into ({} for the same vocabulary)."""
    what = "the vocabulary of the model --init starts from"
    if isinstance(init_dir, PhaseDir):
        _check_same_vocab(vocab_file, init_dir.vocab_file, what)
        return {}
    tokenizer_file, theirs = init_dir.vocabulary("its vocabulary cannot be checked against the data's")
    if len(vocab) <= len(theirs) or {t: i for t, i in vocab.items() if i < len(theirs)} != theirs:
        if tokenizer_file == init_dir.vocab_file:
            _check_same_vocab(vocab_file, tokenizer_file, what)
            return {}
        detail = vocabulary_difference(vocab, theirs)
        if detail:
            raise ConfigError(f"{vocab_file}: differs from {what} ({tokenizer_file}: {detail})")
        return {}
    original = load_tokenizer(init_dir.path)  # its model alone splits a token spelled as its input (▁word, Ġword)
    return {i: [piece.id for piece in original.model.tokenize(token)] for token, i in vocab.items()
            if i >= len(theirs)}


def _check_same_vocab(vocab: Path, reference: Path, what: str) -> None:
    detail = vocab_difference(vocab, reference) if reference.is_file() else None
    if detail:
        raise ConfigError(f"{vocab}: differs from {what} ({reference}: {detail})")
