"""The model directory, defined once: what `pretrain eval`, `phase1/phase2 --init`, `pretrain export` and
`pretrain finetune` take as a model (the counterpart of wiki2bert_core/variant_dir.py on the model's side).

    <phase dir>/                a pretraining phase (`pretrain phase1 --out RUN` writes RUN/phase1/)
        model_config.json       our ModelConfig (checkpoint_files.py)
        checkpoints/<tag>/      its checkpoints; checkpoints/latest names the newest complete one (checkpoint_files.py)
        hparams.json            the run's settings (pretrain/run/run_files.py)
        tokenizer/              the data's vocab.txt and tokenizer files
    <Hugging Face dir>/         what transformers' `save_pretrained` writes, `pretrain export` included
        config.json             its model_type says which model it is (model_types)
        model.safetensors | pytorch_model.bin, or shards (model-00001-of-00003.safetensors, ...) named by
                                model.safetensors.index.json | pytorch_model.bin.index.json (WEIGHT_FILES)
        vocab.txt, tokenizer.json, ...  its tokenizer
        pretraining_config.json what `pretrain export` adds: the model config and checkpoint it was exported from

One rule tells them apart (`open_model_dir`): a directory with model_config.json or checkpoints/ is a phase directory,
else one with config.json is a Hugging Face directory; anything else is neither, one error line. Every command that
takes a model takes both kinds: `eval`, `--init` and `export` read either into our model (`read_our_model`, or
InitFrom in pretrain/run/prepare.py), `finetune` runs transformers' classes on a Hugging Face directory and exports a
phase directory into one first (pretrain/finetune/run.py). Every weight of the model a command builds, outside the heads
it adds fresh, must come from the directory (`refuse_fresh`): weights that do not belong to the config are refused,
never trained from random values under the model's name.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError, DataError, first_line
from wiki2bert_core.files import read_json
from wiki2bert_core.variant_dir import VOCAB_FILE
from pretrain.config import ModelConfig
from pretrain.model.arch import ArchSpec, names, of_model_type, pretraining_model, spec
from pretrain.model import checkpoint_files
from pretrain.model.checkpoint_files import Checkpoint
from pretrain.model.hf_config import read_hf_config
from pretrain.model.hf_weights import INDEX_SUFFIX, load_matching, match_names, read_tensors, shard_files, tensor_names

HPARAMS = "hparams.json"
TOKENIZER_DIR = "tokenizer"
HF_CONFIG = "config.json"
TOKENIZER_JSON = "tokenizer.json"
PRETRAINING_CONFIG = "pretraining_config.json"
# the files a Hugging Face directory keeps its weights in, in the order transformers looks for them; an index names
# the shards (WEIGHT_SHARDS) the weights are split into
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
WEIGHT_SHARDS = ("model-*-of-*.safetensors", "pytorch_model-*-of-*.bin")
# fine-tuning runs transformers' Auto classes, which take the BERT-family encoders that have all three task classes
# (pretrain/finetune/train.py passes token type ids to those that take them): ours and these
OTHER_FINETUNE_TYPES = ("camembert", "electra", "deberta-v2")


def model_types(reader: str) -> tuple[str, ...]:
    """config.json's model_types that `reader` takes: "ours" (eval, --init, export: our models, pretrain/model/arch.py)
    or "finetune"."""
    ours = tuple(model_type for name in names() for model_type in spec(name).model_types)
    return ours if reader == "ours" else tuple(dict.fromkeys((*ours, *OTHER_FINETUNE_TYPES)))


def is_phase_dir(path: Path) -> bool:
    """The one rule: our training's output (model_config.json, or checkpoints/ whose model_config.json is lost)."""
    path = Path(path)
    return (path / checkpoint_files.MODEL_CONFIG).is_file() or (path / checkpoint_files.CHECKPOINTS).is_dir()


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """A model directory of either kind (`open_model_dir`)."""
    path: Path

    @property
    def tokenizer_dir(self) -> Path:
        return self.path

    @property
    def vocab_file(self) -> Path:
        return self.tokenizer_dir / VOCAB_FILE

    def require_vocab(self, why: str) -> Path:
        """Its vocab.txt; ConfigError if it has none (`why`: what it is needed for)."""
        if not self.vocab_file.is_file():
            raise ConfigError(f"{self.path}: no {VOCAB_FILE}, so {why}")
        return self.vocab_file

    def tokenizer_file(self, why: str) -> Path:
        """The file its vocabulary is read from: vocab.txt, else tokenizer.json (a hub folder of XLM-R or ModernBERT
        has no vocab.txt); ConfigError if it has neither."""
        found = next((self.tokenizer_dir / name for name in (VOCAB_FILE, TOKENIZER_JSON)
                      if (self.tokenizer_dir / name).is_file()), None)
        if found is None:
            raise ConfigError(f"{self.path}: no {VOCAB_FILE} nor {TOKENIZER_JSON}, so {why}")
        return found

    def vocabulary(self, why: str) -> tuple[Path, dict[str, int]]:
        """Its tokenizer_file and the token -> id map read from it: vocab.txt's lines, else tokenizer.json's tokens
        (added ones included); ConfigError if it has neither (`why`: what the vocabulary is needed for)."""
        from wiki2bert_core.wordpiece import read_vocab

        found = self.tokenizer_file(why)
        return found, read_vocab(found) if found.name == VOCAB_FILE else token_ids(found)


class PhaseDir(ModelDir):
    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER_DIR

    def model_config(self) -> ModelConfig:
        return checkpoint_files.read_model_config(self.path)

    def hparams(self) -> dict:
        """Its hparams.json ({} if it has none)."""
        path = self.path / HPARAMS
        return read_json(path) if path.is_file() else {}

    def find_checkpoint(self, purpose: str, tag: str | None = None) -> Checkpoint:
        """Checkpoint `tag`, or the latest; ConfigError if there is none (`purpose`: "export", ...)."""
        if tag:
            return checkpoint_files.by_tag(self.path, tag)
        return checkpoint_files.require_latest(self.path, f"to {purpose}")


class HuggingFaceDir(ModelDir):
    def model_type(self, reader: str, command: str) -> str:
        """config.json's model_type; ConfigError if it is not one of model_types(reader) (`command` reads it)."""
        path = self.path / HF_CONFIG
        config = read_json(path)
        model_type = config.get("model_type") if isinstance(config, dict) else None
        accepted = model_types(reader)
        if model_type not in accepted:
            raise ConfigError(f"{path}: model_type {model_type!r}, but {command} takes only BERT-family encoders "
                              f"(model_type {', '.join(accepted)})")
        return model_type

    def architecture(self, command: str) -> ArchSpec:
        """The architecture of our models it holds; ConfigError if it holds another model."""
        return of_model_type(self.model_type("ours", command))

    def model_config(self, command: str) -> ModelConfig:
        """Our ModelConfig of its config.json (vocab_size: the rows its weights have); ConfigError if our model does
        not compute it."""
        self.model_type("ours", command)
        return read_hf_config(self.path / HF_CONFIG)

    def weights_file(self) -> Path:
        """The file transformers would read (a shard index for weights in shards); ConfigError if there is none."""
        found = next((self.path / name for name in WEIGHT_FILES if (self.path / name).is_file()), None)
        if found is None:
            raise ConfigError(f"{self.path}: no weights ({', '.join(WEIGHT_FILES)})")
        return found

    def weight_files(self) -> list[Path]:
        """Every file its weights are in: the weights file, or the index and the shards it names."""
        found = self.weights_file()
        return [found, *shard_files(found)] if found.name.endswith(INDEX_SUFFIX) else [found]

    def weight_names(self) -> set[str]:
        """Our names of its tensors, read without their values."""
        return tensor_names(self.weights_file(), self.architecture("reading it"))

    def weights(self) -> dict[str, torch.Tensor]:
        """Its tensors under our names (as stored: rows of the tokenizer's vocabulary, unpadded)."""
        return read_tensors(self.weights_file(), self.architecture("reading it"))


def open_model_dir(path: Path) -> ModelDir:
    """The model directory at `path`, by the one rule; ConfigError (one line) if it is neither kind."""
    path = Path(path)
    if is_phase_dir(path):
        return PhaseDir(path)
    if (path / HF_CONFIG).is_file():
        return HuggingFaceDir(path)
    if not path.is_dir():
        raise ConfigError(f"{path}: no such model directory")
    phases = sorted(child.name for child in path.iterdir() if child.is_dir() and is_phase_dir(child))
    hint = f"; it is a run directory: name one of its phases ({', '.join(phases)})" if phases else ""
    raise ConfigError(f"{path}: neither a pretraining phase directory ({checkpoint_files.MODEL_CONFIG}) nor a Hugging "
                      f"Face model directory ({HF_CONFIG}){hint}")


def arch_of(path: Path) -> str | None:
    """The arch of the model in the model directory `path`; None where it cannot be read (prepare says why)."""
    try:
        model_dir = open_model_dir(path)
        return (model_dir.model_config() if isinstance(model_dir, PhaseDir) else model_dir.model_config("--init")).arch
    except (ConfigError, DataError):
        return None


def token_ids(tokenizer_json: Path) -> dict[str, int]:
    """token -> id of a tokenizer.json (its model's vocabulary and its added tokens); DataError naming the file if it
    does not load."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(tokenizer_json)).get_vocab(with_added_tokens=True)
    except Exception as e:  # the Rust library raises its own exception types
        raise DataError(f"{tokenizer_json}: not a tokenizer ({first_line(e)})") from None


def vocabulary_difference(ours: dict[str, int], theirs: dict[str, int]) -> str | None:
    """The first id (lowest) at which two token -> id maps differ, in words; None if they are the same."""
    if ours == theirs:
        return None
    ours_by_id, theirs_by_id = ({i: t for t, i in tokens.items()} for tokens in (ours, theirs))
    first = min(i for i in ours_by_id.keys() | theirs_by_id.keys() if ours_by_id.get(i) != theirs_by_id.get(i))
    return (f"id {first}: {ours_by_id.get(first, 'no token')!r} against {theirs_by_id.get(first, 'no token')!r} "
            f"({len(ours)} tokens against {len(theirs)})")


def encoder_weights(names: list[str], encoder: str) -> list[str]:
    """The names of `names` that are the encoder's (prefix `encoder`), not a head's. The pooler counts as a head:
    only next-sentence prediction trains it, so a model pretrained without it has none, and a task trains it with
    its own head (transformers' BertForSequenceClassification does so)."""
    return [name for name in names if name.startswith(f"{encoder}.") and not name.startswith(f"{encoder}.pooler.")]


def refuse_fresh(source: Path, fresh: list[str], config_file: str) -> None:
    """DataError naming `source` and the first of `fresh` (the model's weights its files do not hold, which would
    start from random values), if there are any."""
    if fresh:
        shown = ", ".join(fresh[:3]) + (", ..." if len(fresh) > 3 else "")
        raise DataError(f"{source}: {len(fresh)} of the model's weights are not in its weight files and would start "
                        f"from random values ({shown}); the weights do not belong to the model its {config_file} "
                        f"describes")


def require_encoder_weights(model_dir: HuggingFaceDir, config: ModelConfig) -> None:
    """DataError unless the directory's weights fill every weight of our model's encoder (of `config`); heads it
    lacks may start fresh (--init: a BertModel's masked-LM head, a BertForMaskedLM's NSP head). Read from the names
    alone, on a model without storage."""
    with torch.device("meta"):
        model = pretraining_model(config)
    fresh, _ = match_names(model, model_dir.weight_names())
    refuse_fresh(model_dir.path, encoder_weights(fresh, spec(config.arch).encoder), HF_CONFIG)


@dataclasses.dataclass
class OurModel:
    """A model directory read into our model (`read_our_model`)."""
    model_dir: ModelDir
    model: torch.nn.Module  # a pretraining model (arch.py) with the heads the directory holds
    vocab_tokens: int  # the tokenizer's tokens (a Hugging Face directory's: its config's vocab_size)
    checkpoint: Checkpoint | None  # the phase directory's checkpoint read; None for a Hugging Face directory

    @property
    def described(self) -> str:
        """What was read, in words."""
        found = self.checkpoint
        return f"{found.path} (step {found.step})" if found else f"{self.model_dir.path} (Hugging Face)"


def read_our_model(path: Path, command: str, purpose: str, tag: str | None = None) -> OurModel:
    """Our model with the weights of a phase directory's latest checkpoint (or `tag`'s) or of a Hugging Face BERT,
    ModernBERT or XLM-R directory, with the heads they hold (`command` reads it to `purpose`: "pretrain eval",
    "evaluate"); ConfigError if the directory is neither kind or holds no masked-LM head, DataError if its weights do
    not fill the model."""
    from wiki2bert_core.wordpiece import read_vocab

    model_dir = open_model_dir(path)
    if isinstance(model_dir, PhaseDir):
        found = model_dir.find_checkpoint(purpose, tag)
        config, config_file = model_dir.model_config(), checkpoint_files.MODEL_CONFIG
        state, source = checkpoint_files.load_weights(found), found.path
        tokens = len(read_vocab(model_dir.require_vocab("the tokenizer's size is unknown")))
    else:
        if tag:
            raise ConfigError(f"--tag {tag}: {path} is a Hugging Face directory, which has one set of weights")
        found, config_file = None, HF_CONFIG
        config = model_dir.model_config(command)
        state, source, tokens = model_dir.weights(), model_dir.path, config.vocab_size
    arch = spec(config.arch)
    if arch.mlm_head not in state:
        raise ConfigError(f"{source}: holds no masked-LM head ({arch.mlm_head}), so there is nothing to {purpose}")
    model = pretraining_model(config, nsp_head=arch.nsp_head in state)
    fresh, _ = load_matching(model, state, source)
    refuse_fresh(source, fresh, config_file)
    return OurModel(model_dir, model, tokens, found)
