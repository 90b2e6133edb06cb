"""The variant directory, defined once: the contract between the pipeline's `hdf5` stage, which writes it, and
pretraining, `pipeline verify` and `pipeline report`, which read it (as LDDL's loader takes its layout from shared
code).

    <variant>/                  named by variant_dir_name: hdf5_lower_case_1_seq_len_128_max_pred_20_...
                                (..._doc_sentences for a variant of whole sentences, not pairs)
        training/<shard>.hdf5   the training split (NVIDIA's layout, wiki2bert_core/hdf5_format.py)
        test/<shard>.hdf5       the held-out split; absent or empty when the shard stage held nothing out
        vocab.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json
                                the vocabulary the ids index and its tokenizer (wordpiece.TOKENIZER_FILES)
        variant.json            VariantParams, then the stage's counts (instances per file, ...)

A variant of several languages (`pipeline run --lang hu,fi,et`) names each file after its language, as the shard
stage named the shard it comes from (`shard_name`): training/training_hu_0000.hdf5, test/test_fi_0000.hdf5 (each
instance is from one language; `file_language` reads it back), and its variant.json records the mixture
(`Mixture`: alpha, weights, each language's size and share of the training split), from which a pretraining phase
can sample the languages by its own alpha or weights.

NVIDIA's own scripts write a flat directory of *.hdf5 files instead: no splits, no vocabulary, no variant.json (the
shapes come from the files). Its files are the training files, and what `pretrain eval` evaluates on when pointed at
it; a training run on it evaluates only on --eval-data.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from wiki2bert_core.errors import ConfigError, DataError
from wiki2bert_core.files import read_json, write_json
from wiki2bert_core.hdf5_format import SUFFIXES
from wiki2bert_core.utf8_paths import utf8_names
from wiki2bert_core.wordpiece import (copy_tokenizer_files, read_vocab, special_token_ids, special_token_names,
                                      vocab_difference)

TRAINING, TEST = "training", "test"
SPLITS = (TRAINING, TEST)  # also the prefixes of the shard stage's files (training_0000.txt) the splits come from
VOCAB_FILE = "vocab.txt"
PARAMS_FILE = "variant.json"
# what an instance holds: two segments with an NSP label (BERT's and NVIDIA's), or whole consecutive sentences of
# one document up to the length limit, segment ids 0 and NSP label 0 (RoBERTa's DOC-SENTENCES: MLM-only training)
SEGMENT_PAIR, DOC_SENTENCES = "segment-pair", "doc-sentences"
SEQUENCE_KINDS = (SEGMENT_PAIR, DOC_SENTENCES)
MIXTURE_FILE = "mixture.json"  # the shard stage's record of a mixture of languages (Mixture.to_dict), for variant.json
_LANGUAGE_FILE = re.compile(r"(?:training|test)_([a-z][a-z0-9-]*)_\d+")


def shard_name(split: str, index: int, language: str | None = None) -> str:
    """The name (without suffix) of a shard and of the HDF5 files made of it: training_0000, or training_hu_0000 for
    language hu of a run of several languages."""
    return f"{split}_{language}_{index:04d}" if language else f"{split}_{index:04d}"


def file_language(path: Path | str) -> str | None:
    """The language a shard or HDF5 file holds (shard_name's), None for a file of a one-language run."""
    match = _LANGUAGE_FILE.fullmatch(Path(path).name.split(".")[0])
    return match.group(1) if match else None


@dataclasses.dataclass(frozen=True)
class LanguageShare:
    """One language of a mixture."""
    tokens: int  # its training documents' WordPiece tokens, each document once (after rehydration and the source
    # weights): its size
    training_tokens: int  # its tokens in the training split after the mixture (repeated and subsampled documents)
    share: float  # training_tokens over all languages' training_tokens


@dataclasses.dataclass(frozen=True)
class Mixture:
    """How the languages of a variant of several languages were mixed (wiki2bert_core/mixture.py's formula)."""
    alpha: float
    weights: dict[str, float]  # the languages' weights (1 for those not named)
    languages: dict[str, LanguageShare]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record, path: Path) -> Mixture:
        """DataError naming `path` if `record` is not a mixture."""
        try:
            languages = {str(language): LanguageShare(int(v["tokens"]), int(v["training_tokens"]), float(v["share"]))
                         for language, v in record["languages"].items()}
            return cls(float(record["alpha"]), {str(k): float(v) for k, v in record["weights"].items()}, languages)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise DataError(f"{path}: mixture is not a record of alpha, weights and languages (tokens, "
                            f"training_tokens, share each)") from None


@dataclasses.dataclass(frozen=True)
class VariantParams:
    """How a variant's files were made: the first keys of its variant.json (the stage's counts follow them)."""
    max_seq_length: int  # tokens per instance (the files' width): the sequence length pretraining runs at
    max_predictions_per_seq: int  # masked positions per instance (the width of masked_lm_positions)
    masked_lm_prob: float
    dupe_factor: int
    short_seq_prob: float
    random_seed: int
    whole_word_masking: bool
    lower_case: bool
    vocab_size: int  # tokens in its vocab.txt
    special_token_ids: dict[str, int]
    sequence_kind: str = SEGMENT_PAIR  # one of SEQUENCE_KINDS; variant.json files written before it existed: pairs
    mixture: Mixture | None = None  # a variant of several languages: how they were mixed; None (left out): one
    # the tokenizer's model: wordpiece, unigram or bpe (left out of variant.json for wordpiece, as before it existed)
    tokenizer_kind: str = "wordpiece"
    # the marker a word's first piece starts with (▁ or Ġ); "" (left out): BERT's `##` pieces continue a word
    word_start: str = ""

    def to_dict(self) -> dict:
        """The first keys of variant.json (a variant of one language has no `mixture`; a WordPiece one neither
        `tokenizer_kind` nor `word_start`)."""
        record = dataclasses.asdict(self)
        for key, default in (("mixture", None), ("tokenizer_kind", "wordpiece"), ("word_start", "")):
            if record[key] == default:
                del record[key]
        return record

    @property
    def dir_name(self) -> str:
        return variant_dir_name(self.max_seq_length, self.max_predictions_per_seq, self.masked_lm_prob,
                                self.random_seed, self.dupe_factor, self.whole_word_masking, self.lower_case,
                                self.sequence_kind)

    @classmethod
    def from_dict(cls, record: dict, path: Path) -> VariantParams:
        """From a variant.json's object; DataError naming `path` if a parameter is missing or of the wrong type."""
        kinds = {"int": int, "float": (int, float), "bool": bool, "dict[str, int]": dict, "str": str}
        record = {field.name: field.default for field in dataclasses.fields(cls)
                  if field.default is not dataclasses.MISSING} | record
        mixture = None if record["mixture"] is None else Mixture.from_dict(record["mixture"], path)
        for field in dataclasses.fields(cls):
            if field.name == "mixture":
                continue
            value = record.get(field.name)
            if not isinstance(value, kinds[field.type]) or (field.type != "bool" and isinstance(value, bool)):
                raise DataError(f"{path}: {field.name} is {value!r}, expected {field.type}; not a variant.json of "
                                f"the hdf5 stage")
        if record["sequence_kind"] not in SEQUENCE_KINDS:
            raise DataError(f"{path}: sequence_kind is {record['sequence_kind']!r}, expected one of "
                            f"{', '.join(SEQUENCE_KINDS)}")
        return cls(**{field.name: record[field.name] for field in dataclasses.fields(cls)} | {"mixture": mixture})


def variant_dir_name(max_seq_length: int, max_predictions_per_seq: int, masked_lm_prob: float, random_seed: int,
                     dupe_factor: int, whole_word_masking: bool, lower_case: bool,
                     sequence_kind: str = SEGMENT_PAIR) -> str:
    """The parameters spelled out, as NVIDIA names its directories; a doc-sentences variant's ends in
    _doc_sentences (a segment-pair variant's, NVIDIA's kind, says nothing more)."""
    name = (f"hdf5_lower_case_{int(lower_case)}_seq_len_{max_seq_length}_max_pred_{max_predictions_per_seq}"
            f"_masked_lm_prob_{masked_lm_prob}_random_seed_{random_seed}_dupe_factor_{dupe_factor}")
    name += "_whole_word_mask" if whole_word_masking else ""
    return name + "_doc_sentences" if sequence_kind == DOC_SENTENCES else name


def split_file(split: str, shard: str) -> str:
    """Where in a variant directory the hdf5 stage writes the file of a shard (its name without .txt)."""
    return f"{split}/{shard}.hdf5"


def write_variant_files(variant_dir: Path, vocab_dir: Path, params: VariantParams, counts: dict) -> None:
    """Make a variant directory whose HDF5 files are in place self-contained: the vocabulary and tokenizer files of
    `vocab_dir`, and variant.json (`params`, then `counts`)."""
    copy_tokenizer_files(vocab_dir, variant_dir)
    write_json(Path(variant_dir) / PARAMS_FILE, {**params.to_dict(), **counts})


def read_record(data_dir: Path) -> dict | None:
    """The whole variant.json of a directory (parameters and counts); None when it has none (NVIDIA's)."""
    path = Path(data_dir) / PARAMS_FILE
    if not path.is_file():
        return None
    record = read_json(path)
    if not isinstance(record, dict):
        raise DataError(f"{path}: expected a JSON object")
    return record


def read_params(data_dir: Path) -> VariantParams | None:
    """The parameters of a variant directory; None for a directory without variant.json (NVIDIA's)."""
    record = read_record(data_dir)
    return None if record is None else VariantParams.from_dict(record, Path(data_dir) / PARAMS_FILE)


def is_variant_dir(data_dir: Path) -> bool:
    """A directory with splits (the hdf5 stage's), not a flat directory of HDF5 files (NVIDIA's)."""
    return any((Path(data_dir) / split).is_dir() for split in SPLITS)


def hdf5_files(directory: Path) -> list[Path]:
    """The HDF5 files directly in `directory`, sorted by name ([] if it is not a directory); DataError if one's name
    is not UTF-8."""
    directory = Path(directory)
    return utf8_names(sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file())) \
        if directory.is_dir() else []


def training_files(data_dir: Path) -> list[Path]:
    """The files to train on: a variant directory's training split, or a flat directory's files; ConfigError if
    there are none."""
    return _named_split(data_dir, TRAINING, "; expected the output of the hdf5 stage (data/<lang>/hdf5/<variant>/)")


def held_out_split(data_dir: Path) -> list[Path]:
    """The files of a variant directory's test split; [] when it has none (or none with files), and for a flat
    directory, which has no split: a training run then evaluates only on what it is told to (eval_data)."""
    return hdf5_files(Path(data_dir) / TEST) if is_variant_dir(data_dir) else []


def held_out_files(data_dir: Path) -> list[Path]:
    """The files to evaluate on when a directory is named for that (`pretrain eval --data`, eval_data): a variant
    directory's test split, or a flat directory's files; ConfigError if there are none."""
    return _named_split(data_dir, TEST, " to evaluate on; expected a variant directory with test/*.hdf5 or a "
                                        "directory of HDF5 files")


def _named_split(data_dir: Path, split: str, hint: str) -> list[Path]:
    """The files of a directory the user named: a variant directory's `split`, or a flat directory's files."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ConfigError(f"{data_dir}: {'not a directory' if data_dir.exists() else 'does not exist'}")
    directory = data_dir / split if is_variant_dir(data_dir) else data_dir
    files = hdf5_files(directory)
    if not files:
        raise ConfigError(f"{directory}: no HDF5 files (*.hdf5){hint}")
    return files


def own_vocab(data_dir: Path) -> Path | None:
    """The vocab.txt a data directory holds (a variant directory always does; NVIDIA's do not)."""
    path = Path(data_dir) / VOCAB_FILE
    return path if path.is_file() else None


def find_vocab_file(data_dir: Path, vocab_dir: Path | None = None) -> Path:
    """The vocab.txt the data's token ids index: `vocab_dir`'s (--vocab) if given, else the data directory's own.
    Where the data directory records its vocabulary (its own vocab.txt, or variant.json's size and special token
    ids), --vocab must name that vocabulary; NVIDIA's directories record none, and --vocab is all there is."""
    if vocab_dir is not None:
        path = Path(vocab_dir) / VOCAB_FILE
        if not path.is_file():
            raise ConfigError(f"{path}: not found; --vocab takes a directory with vocab.txt")
        _check_data_vocab(data_dir, path)
        return path
    path = own_vocab(data_dir)
    if path is None:
        raise ConfigError(f"{data_dir}: no vocab.txt in this data directory; pass --vocab DIR (a directory with "
                          f"vocab.txt, e.g. for NVIDIA's own HDF5 directories)")
    return path


def _check_data_vocab(data_dir: Path, given: Path) -> None:
    own = own_vocab(data_dir)
    if own is not None:
        detail = vocab_difference(given, own)
        if detail:
            raise ConfigError(f"--vocab {given}: differs from {own}, the vocabulary the data's token ids index "
                              f"({detail}); leave out --vocab")
        return
    params = read_params(data_dir)
    vocab = read_vocab(given)
    special = special_token_ids(vocab, special_token_names(given.parent))
    if params is not None and (len(vocab), special) != (params.vocab_size, params.special_token_ids):
        raise ConfigError(f"--vocab {given}: {len(vocab)} tokens, special token ids {special}, but "
                          f"{Path(data_dir) / PARAMS_FILE} records the data's vocabulary as {params.vocab_size} "
                          f"tokens, special token ids {params.special_token_ids}; pass the vocabulary the data was "
                          f"made with")


def data_dir_of(hdf5_file: Path) -> Path:
    """The data directory an HDF5 file belongs to: the variant directory of a file in a split, else the (flat)
    directory it is in."""
    parent = Path(hdf5_file).parent
    return parent.parent if parent.name in SPLITS else parent
