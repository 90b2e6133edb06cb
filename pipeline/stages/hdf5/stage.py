"""Stage `hdf5`: masked-LM + next-sentence pretraining instances in NVIDIA's HDF5 layout, one file per shard (or,
for a variant of sequence kind doc-sentences, whole consecutive sentences of one document without NSP pairs).

Output: one variant directory per variant (its layout is defined in wiki2bert_core/variant_dir.py):
`hdf5/<variant>/training/<shard>.hdf5` and `hdf5/<variant>/test/<shard>.hdf5`, where <variant> spells out the
parameters as NVIDIA's directories do (`hdf5_lower_case_0_seq_len_128_max_pred_20_masked_lm_prob_0.15_
random_seed_12345_dupe_factor_5`, then `_doc_sentences` for a variant of sequence kind doc-sentences; lower_case
is read from the tokenizer's normalizer). Each file holds NVIDIA's
six datasets (see wiki2bert_core/hdf5_format.py), chunked (~1 MiB of input_ids per chunk) and gzip-compressed with
HDF5's shuffle filter, which any HDF5 reader decodes. Each variant directory is self-contained: it also gets
`vocab.txt` and the tokenizer files (copies of the vocabulary the ids index and of its tokenizer;
`pipeline verify` and the pretraining runner read them from there) and `variant.json` (the parameters, the
vocabulary size, the special-token ids and the instances per file).

Two parallel passes over the shards, so that each shard is tokenized once for all variants:
1. tokenize: each shard into a flat id array + sentence and document offsets, as raw arrays in the stage's
   scratch dir (2 bytes a token for vocabularies up to 65,536; deleted when the stage ends); see
   pipeline/stages/hdf5/tokenize.py;
2. instances: for each (variant, shard), plan all instances of all `dupe_factor` rounds as token spans,
   shuffle them all with a seeded permutation (a full shuffle, as Google's), then build and write them in
   blocks of whole HDF5 chunks (pipeline/stages/hdf5/instance_files.py). A shard above `window_tokens` is taken a window of
   whole documents at a time, so memory is bounded by the window's ids + ~40 bytes per instance + one block.
Each (variant, shard) draws from its own random streams (its instances', its masks'), seeded from `random_seed`,
the shard's name and the variant, so the bytes do not depend on `--workers`. Each worker uses one core (tokenizers' threads are off).

Resume: each file is written in the stage's cache dir and recorded there as finished (pipeline/stages/hdf5/finished_files.py)
as soon as it is complete, keyed by what decides its bytes; a re-run after a kill reuses the finished files whose
key and sha256 still match (and skips tokenizing shards whose files all are), then hard-links every file into
the output directory.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import shutil
from pathlib import Path

import h5py
import numpy as np
import tokenizers
from tokenizers import Tokenizer

from wiki2bert_core.config import SettingError, added_later, check_minimum, hashed_values
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.errors import DataError
from wiki2bert_core.files import read_json, remove_tree, sha256_file
from pipeline.stages.hdf5.finished_files import SIDECAR, FinishedFiles, file_key
from pipeline.stages.hdf5.instance_files import InstanceFile, write_instance_file
from wiki2bert_core.log import LOGGER_NAME, progress
from wiki2bert_core.masking import Masking, MaskingVocab
from pipeline.stages.hdf5.malloc import reuse_freed_memory
from pipeline.stages.hdf5.tokenize import TokenFiles, id_dtype, token_batches
from pipeline.stages import Stage, StageContext, StageCounts
from wiki2bert_core.variant_dir import (MIXTURE_FILE, SEGMENT_PAIR, SEQUENCE_KINDS, SPLITS, TEST, TRAINING, Mixture,
                                        VariantParams, file_language, split_file, write_variant_files)
from pipeline.tokenizer_files import adopt, lowercases, tokenizer_kind
from wiki2bert_core.wordpiece import (load_tokenizer, one_tokenizer_thread, read_vocab, special_token_ids,
                                     special_token_names, tokenizer_from_json, word_start_marker,
                                     write_tokenizer_files)

# the version of how the files' bytes are made (masking, wiki2bert_core/masking.py, included): a change to it must raise
# it. Part of each finished file's key (resume) and the stage's output_format (work directories made before show the
# stage stale). 3: one masking with the loader's, random tokens never [unusedN]
FILE_FORMAT = 3


@dataclasses.dataclass(frozen=True)
class Variant:
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    sequence_kind: str = added_later(SEGMENT_PAIR)


@dataclasses.dataclass(frozen=True)
class Hdf5Config:
    # one output directory per variant; NVIDIA's phase 1 and phase 2 settings. Each is max_seq_length (tokens per
    # instance), max_predictions_per_seq (masked positions at most) and sequence_kind: segment-pair (BERT's and
    # NVIDIA's: two segments, next sentence or random, with an NSP label) or doc-sentences (RoBERTa's, for MLM-only
    # training: the most consecutive whole sentences of one document that fit, a longer sentence truncated; segment
    # ids and NSP labels 0; the masking settings apply, short_seq_prob does not; the directory name ends in
    # _doc_sentences)
    variants: list[Variant] = dataclasses.field(default_factory=lambda: [Variant(128, 20), Variant(512, 80)])
    masked_lm_prob: float = 0.15  # share of tokens to predict (up to max_predictions_per_seq)
    dupe_factor: int = 5  # rounds over the data, each with other masks and sentence pairs
    # share of (document, round) pairs that aim at a random shorter length (segment-pair variants; doc-sentences
    # variants inject no short sequences, as RoBERTa's)
    short_seq_prob: float = 0.1
    random_seed: int = 12345  # with the shard's name and the variant, seeds each file's random streams
    whole_word_masking: bool = False  # mask all ## pieces of a word together
    gzip_level: int = 1  # HDF5 gzip level (with the shuffle filter): higher levels write smaller files, more slowly
    # instances of a shard are made (random next sentences drawn, shuffled) within windows of whole documents of
    # at most this many tokens: memory stays flat (~6 bytes a token of the window at seq 128) whatever the shard
    # size; shards below it (the default 50 shards up to ~3 GB of text) are one window
    window_tokens: int = 1 << 24

    def __post_init__(self):
        if not self.variants:
            raise SettingError("variants", "at least one variant is needed")
        for i, v in enumerate(self.variants):
            if v.sequence_kind not in SEQUENCE_KINDS:
                raise SettingError(f"variants[{i}].sequence_kind",
                                   f"{v.sequence_kind!r} is not one of {', '.join(SEQUENCE_KINDS)}")
            layout = "[CLS] A [SEP] B [SEP]" if v.sequence_kind == SEGMENT_PAIR else "[CLS] sentences [SEP]"
            special = 3 if v.sequence_kind == SEGMENT_PAIR else 2  # the [CLS] and [SEP]s of the layout
            shortest = len(layout.split())
            if v.max_seq_length < shortest:
                raise SettingError(f"variants[{i}].max_seq_length",
                                   f"{v.max_seq_length} is less than {shortest} ({layout})")
            if not 1 <= v.max_predictions_per_seq <= v.max_seq_length - special:
                raise SettingError(f"variants[{i}].max_predictions_per_seq", f"must be in 1..max_seq_length-{special}")
        if len(set(self.variants)) < len(self.variants):
            raise SettingError("variants", "the same variant is listed twice")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise SettingError("masked_lm_prob", f"{self.masked_lm_prob} is not between 0 and 1")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise SettingError("short_seq_prob", f"{self.short_seq_prob} is not between 0 and 1")
        check_minimum(self, 1, "dupe_factor", "window_tokens")
        check_minimum(self, 0, "random_seed")
        if not 0 <= self.gzip_level <= 9:
            raise SettingError("gzip_level", f"must be in 0..9, got {self.gzip_level}")


def variant_params(config: Hdf5Config, variant: Variant, lower_case: bool, vocab: dict[str, int],
                   mixture: Mixture | None, special_ids: dict[str, int], tokenizer_kind: str,
                   word_start: str) -> VariantParams:
    short_seq_prob = config.short_seq_prob if variant.sequence_kind == SEGMENT_PAIR else 0.0  # none injected
    return VariantParams(variant.max_seq_length, variant.max_predictions_per_seq, config.masked_lm_prob,
                         config.dupe_factor, short_seq_prob, config.random_seed, config.whole_word_masking,
                         lower_case, len(vocab), special_ids, variant.sequence_kind, mixture, tokenizer_kind,
                         word_start)


@dataclasses.dataclass(frozen=True)
class _TokenizeTask:
    text: Path
    tokenizer_json: str  # the tokenizer itself, built once per worker process (wordpiece.tokenizer_from_json)
    special_ids: dict[str, int]
    tokens_dir: Path  # where the shard's TokenFiles go


def run(config: Hdf5Config, ctx: StageContext) -> StageCounts:
    shard_dir, vocab_dir = Path(ctx.inputs["shard"]), Path(ctx.inputs["vocab"])
    shards = _list_shards(shard_dir)
    vocab = read_vocab(vocab_dir / "vocab.txt")
    special_ids = special_token_ids(vocab, special_token_names(vocab_dir))
    tokenizer = load_tokenizer(vocab_dir)
    _check_tokenizer_matches(tokenizer, vocab, vocab_dir)
    lower_case = lowercases(tokenizer)
    kind = tokenizer_kind(tokenizer, vocab_dir / "tokenizer.json")
    word_start = "" if kind == "wordpiece" else word_start_marker(vocab)
    mixture = (Mixture.from_dict(read_json(shard_dir / MIXTURE_FILE), shard_dir / MIXTURE_FILE)
               if (shard_dir / MIXTURE_FILE).is_file() else None)
    params = {v: variant_params(config, v, lower_case, vocab, mixture, special_ids, kind, word_start)
              for v in config.variants}
    variant_dirs = {v: ctx.out_dir / p.dir_name for v, p in params.items()}
    files = {(v, split, path): f"{variant_dirs[v].name}/{split_file(split, path.stem)}"
             for v in config.variants for split, path in shards}
    tokenizer_json = tokenizer.to_str()
    keys = _file_keys(config, shards, files, vocab_dir, tokenizer_json, ctx)
    finished = FinishedFiles(ctx.cache_dir / "files")
    finished.prune(set(files.values()))
    reused = {file: counts for file, relative in files.items()
              if (counts := finished.reusable(relative, keys[file])) is not None}
    if reused:
        ctx.log.info("hdf5: reusing %d of %d files finished by an earlier attempt", len(reused), len(files))
    to_tokenize = [(split, path) for split, path in shards if any((v, split, path) not in reused for v in variant_dirs)]
    shard_counts = {path: c["shard"] for (_, _, path), c in reused.items()}
    shard_counts.update(_tokenize_shards(to_tokenize, tokenizer, tokenizer_json, special_ids, ctx))
    totals = {"shards": len(shards), **{key: sum(c[key] for c in shard_counts.values())
                                        for key in ("documents", "sentences", "input_tokens")}}
    if totals["input_tokens"] == 0:
        raise DataError(f"{shard_dir}: the shards hold no text to make instances from")
    masking_vocab = MaskingVocab.from_vocab(vocab, special_ids, word_start, tokenizer.get_added_tokens_decoder())
    tasks = [InstanceFile(path.stem, ctx.scratch() / "tokens" / path.stem, finished.root, relative,
                          keys[(v, split, path)], shard_counts[path],
                          Masking(masking_vocab, config.masked_lm_prob, v.max_predictions_per_seq,
                                  config.whole_word_masking), v.max_seq_length, v.sequence_kind, config)
             for (v, split, path), relative in files.items() if (v, split, path) not in reused]
    per_file = {**{files[file]: counts for file, counts in reused.items()}, **_write_instance_files(tasks, ctx)}
    for relative in files.values():
        finished.place(relative, ctx.out_dir / relative)
    remove_tree(ctx.scratch() / "tokens")

    variants = {}
    for variant, variant_dir in variant_dirs.items():
        files = {relative.split("/", 1)[1]: c for relative, c in per_file.items()
                 if relative.startswith(variant_dir.name + "/")}
        summary = _variant_summary(files)
        write_variant_files(variant_dir, vocab_dir, params[variant], {
            **summary, **({"languages": _language_instances(files)} if mixture else {}),
            "files": {name: c["instances"] for name, c in files.items()},
            "random_next_own_document": {name: c["random_next_own_document"] for name, c in files.items()},
        })
        variants[variant_dir.name] = summary
        ctx.log.info("hdf5: %s: %s training + %s test instances, short targets %.3f, random next %.3f",
                     variant_dir.name, f"{summary['training_instances']:,}", f"{summary['test_instances']:,}",
                     summary["short_target_share"], summary["random_next_share"])
    return StageCounts({**totals, "instances": sum(v["training_instances"] + v["test_instances"]
                                                   for v in variants.values()), "variants": variants})


def _tokenize_shards(shards: list[tuple[str, Path]], tokenizer: Tokenizer, tokenizer_json: str,
                     special_ids: dict[str, int], ctx: StageContext) -> dict[Path, dict]:
    """Pass 1: each shard's token ids into <scratch>/tokens/<shard>/; returns each shard's counts."""
    tokenizer_from_json(tokenizer_json, tokenizer)
    tasks = [_TokenizeTask(path, tokenizer_json, special_ids, ctx.scratch() / "tokens" / path.stem)
             for _, path in shards]
    sizes = [path.stat().st_size for _, path in shards]
    return {task.text: shard for task, shard in _map_with_progress(_tokenize_shard, tasks, sizes, "hdf5: tokenize",
                                                                   "B", ctx)}


def _write_instance_files(tasks: list[InstanceFile], ctx: StageContext) -> dict[str, dict]:
    """Pass 2: one HDF5 file per (variant, shard), each recorded as finished as soon as it is written; returns
    each file's counts."""
    sizes = [int(task.shard_counts["input_tokens"]) for task in tasks]
    return {task.relative: counts for task, counts in _map_with_progress(write_instance_file, tasks, sizes,
                                                                         "hdf5: instances", "tokens", ctx)}


def _map_with_progress(fn, tasks: list, sizes: list[int], label: str, unit: str, ctx: StageContext):
    """(task, fn(task)) for each task through the executor, in order, with a progress bar advanced by its size."""
    with progress(sum(sizes), label, unit, quiet=ctx.quiet) as bar:
        for task, size, result in zip(tasks, sizes, ctx.executor.map(fn, tasks)):
            bar.update(size)
            yield task, result


def _file_keys(config: Hdf5Config, shards: list[tuple[str, Path]], files: dict, vocab_dir: Path,
               tokenizer_json: str, ctx: StageContext) -> dict[tuple, str]:
    """What decides each output file's bytes: the config, its variant, the shard's name and bytes, the
    vocabulary and tokenizer, and the versions of the libraries that compute and write it."""
    shard_sha = dict(zip([path for _, path in shards], ctx.executor.map(sha256_file, [path for _, path in shards])))
    common = {"format": FILE_FORMAT, "config": {k: v for k, v in dataclasses.asdict(config).items() if k != "variants"},
              "vocab": sha256_file(vocab_dir / "vocab.txt"),
              "tokenizer": hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest(),
              "versions": [np.__version__, h5py.__version__, h5py.version.hdf5_version, tokenizers.__version__]}
    return {(v, split, path): file_key(**common, variant=hashed_values(v), shard=path.stem,
                                       shard_sha256=shard_sha[path])
            for v, split, path in files}


def run_standalone(config: Hdf5Config, inputs: Path, vocab: Path, out: Path, lowercase: bool | None = None,
                   strip_accents: bool | None = None, workers: int = 1, force: bool = False, quiet: bool = False,
                   log: logging.Logger | None = None) -> StageCounts:
    """The stage on the user's own sentence-per-line text (a file, or a directory of *.txt files or of
    training_*/test_* shards) and tokenizer (a vocab.txt, or any form --tokenizer takes: _standalone_vocab).
    `<out>.partial/` keeps the files finished by a killed run for the next run of the same command, which
    removes it when done."""
    out = Path(out)
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise DataError(f"{out}: exists (pass --force to replace it)")
    partial, tmp = out.with_name(out.name + ".partial"), out.with_name(out.name + ".tmp")
    scratch = partial / "scratch"  # one attempt's: shard links, tokenizer, token arrays
    for leftover in (scratch, tmp):
        remove_tree(leftover)
    tmp.mkdir(parents=True)
    try:
        shard_dir = _standalone_shards(Path(inputs), scratch / "shard")
        vocab_dir = _standalone_vocab(Path(vocab), scratch / "vocab", lowercase, strip_accents)
        ctx = StageContext(lang="", out_dir=tmp, inputs={"shard": shard_dir, "vocab": vocab_dir},
                           cache_dir=partial, scratch_dir=scratch / "stage", workers=workers, quiet=quiet,
                           log=log or logging.getLogger(LOGGER_NAME))
        counts = run(config, ctx)
    except BaseException:
        for leftover in (tmp, scratch, *partial.rglob("*.tmp")):
            remove_tree(leftover)
        if not any(partial.rglob(f"*{SIDECAR}")):  # nothing finished for the next run to reuse
            remove_tree(partial)
        raise
    remove_tree(out)
    tmp.rename(out)
    remove_tree(partial)
    return counts


def _standalone_shards(inputs: Path, shard_dir: Path) -> Path:
    if inputs.is_dir() and any(any(inputs.glob(f"{split}_*.txt")) for split in SPLITS):
        return inputs
    files = sorted(inputs.glob("*.txt")) if inputs.is_dir() else [inputs]
    if not files or not all(f.is_file() for f in files):
        raise DataError(f"{inputs}: no such text file, nor a directory of *.txt files")
    shard_dir.mkdir(parents=True)
    for f in files:
        (shard_dir / f"training_{f.name}").symlink_to(f.resolve())
    return shard_dir


def _standalone_vocab(vocab: Path, vocab_dir: Path, lowercase: bool | None, strip_accents: bool | None) -> Path:
    """The tokenizer directory of --vocab: a directory with vocab.txt and tokenizer.json as it is; a bare vocab.txt
    made into BERT's tokenizer (cased unless --lowercase); any other form `pipeline run --tokenizer` takes (a
    tokenizer.json alone, a Hugging Face folder without vocab.txt, a SentencePiece Unigram .model) adopted as the
    vocab stage adopts it (pipeline/tokenizer_files.py), into `vocab_dir`."""
    has_vocab_txt = (vocab / "vocab.txt").is_file() if vocab.is_dir() else vocab.suffix == ".txt"
    if (vocab.is_dir() and (vocab / "tokenizer.json").is_file()) or (vocab.exists() and not has_vocab_txt):
        if lowercase is not None or strip_accents is not None:
            decider = vocab / "tokenizer.json" if (vocab / "tokenizer.json").is_file() else vocab
            raise ConfigError(f"--lowercase/--strip-accents: {decider} already decides them; "
                              "pass a bare vocab.txt to choose")
        if has_vocab_txt:
            return vocab
        adopt(vocab, vocab_dir, None, False, "--vocab")
        return vocab_dir
    vocab_file = vocab / "vocab.txt" if vocab.is_dir() else vocab
    lowercase = bool(lowercase)
    vocab = read_vocab(vocab_file)
    vocab_dir.mkdir(parents=True)
    shutil.copyfile(vocab_file, vocab_dir / "vocab.txt")
    write_tokenizer_files(vocab_dir, vocab, lowercase=lowercase,
                          strip_accents=lowercase if strip_accents is None else strip_accents)
    return vocab_dir


def _list_shards(shard_dir: Path) -> list[tuple[str, Path]]:
    shards = [(split, p) for split in SPLITS for p in sorted(Path(shard_dir).glob(f"{split}_*.txt"))]
    if not shards:
        raise DataError(f"{shard_dir}: no training_*.txt or test_*.txt shards (is the shard stage complete?)")
    return shards


def _check_tokenizer_matches(tokenizer, vocab: dict[str, int], vocab_dir: Path) -> None:
    for token, token_id in ((token, vocab[token]) for token in special_token_names(vocab_dir).values()):
        if tokenizer.token_to_id(token) != token_id:
            raise DataError(f"{vocab_dir}: tokenizer.json gives {token} id {tokenizer.token_to_id(token)}, "
                                f"vocab.txt {token_id}")
    if tokenizer.get_vocab_size() != len(vocab):
        raise DataError(f"{vocab_dir}: tokenizer.json has {tokenizer.get_vocab_size()} tokens, "
                            f"vocab.txt {len(vocab)}")


def _tokenize_shard(task: _TokenizeTask) -> dict:
    reuse_freed_memory()
    with one_tokenizer_thread():
        tokenizer = tokenizer_from_json(task.tokenizer_json)
        return TokenFiles(task.tokens_dir).write(token_batches(task.text, tokenizer, task.special_ids),
                                                 id_dtype(tokenizer))




def _variant_summary(files: dict[str, dict]) -> dict:
    def total(key, split=None):
        return sum(c[key] for name, c in files.items() if split is None or name.startswith(f"{split}/"))
    instances = total("instances")
    return {"training_instances": total("instances", TRAINING), "test_instances": total("instances", TEST),
            "masked_tokens": total("masked_tokens"),
            "random_next_share": round(total("random_next") / max(1, instances), 4),
            "short_target_share": round(total("short_targets") / max(1, total("document_rounds")), 4)}


def _language_instances(files: dict[str, dict]) -> dict[str, dict[str, int]]:
    """A variant of several languages: each language's training and test instances and masked tokens (what a
    pretraining phase's own mixture of languages reads them by: pretrain/data/loader.py)."""
    languages: dict[str, dict[str, int]] = {}
    for name, counts in files.items():
        split = name.split("/")[0]
        language = languages.setdefault(file_language(name), {f"{s}_{key}": 0 for s in SPLITS
                                                               for key in ("instances", "masked_tokens")})
        language[f"{split}_instances"] += counts["instances"]
        language[f"{split}_masked_tokens"] += counts["masked_tokens"]
    return dict(sorted(languages.items()))


STAGE = Stage("hdf5", Hdf5Config, run, inputs=("shard", "vocab"), tools=("tokenizers", "h5py", "numpy"),
              output_format=FILE_FORMAT)
