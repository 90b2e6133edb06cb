"""Stage `hdf5`: masked-LM + next-sentence pretraining instances in NVIDIA's HDF5 layout, one file per shard.

Output: `hdf5/<variant>/training/<shard>.hdf5` and `hdf5/<variant>/test/<shard>.hdf5`, where <variant> spells
out the parameters as NVIDIA's directories do (`hdf5_lower_case_0_seq_len_128_max_pred_20_masked_lm_prob_0.15_
random_seed_12345_dupe_factor_5`; lower_case is read from the tokenizer's normalizer). Each file holds NVIDIA's
six datasets (see core/hdf5_format.py), chunked (~1 MiB of input_ids per chunk) and gzip-compressed with
HDF5's shuffle filter, which any HDF5 reader decodes. Each variant directory is self-contained: it also gets
`vocab.txt` and the tokenizer files (copies of the vocabulary the ids index and of its tokenizer;
`pipeline verify` and the pretraining runner read them from there) and `variant.json` (the parameters, the
vocabulary size, the special-token ids and the instances per file).

Two parallel passes over the shards, so that each shard is tokenized once for all variants:
1. tokenize: each shard into a flat id array + sentence and document offsets, as `.npy` files in the cache
   dir (2 bytes a token for vocabularies up to 65,536; deleted when the stage ends);
2. instances: for each (variant, shard), plan all instances of all `dupe_factor` rounds as token spans,
   shuffle them all with a seeded permutation (a full shuffle, as Google's), then build and write them in
   blocks of whole HDF5 chunks. Memory: the shard's ids + ~40 bytes per instance + one block.
Each (variant, shard) draws from its own random stream, seeded from `random_seed`, the shard's name and the
variant, so the bytes do not depend on `--workers`. Each worker uses one core (tokenizers' threads are off).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np
from tokenizers import Tokenizer

from core.errors import ConfigError
from core.errors import PipelineError
from core.fileio import remove_tree, write_json
from core.hdf5_format import MASKED_LM_POSITIONS, create_datasets, used_positions
from pipeline.instances import MaskingVocab, TokenizedDocuments, make_instances, plan_instances
from core.log import LOGGER_NAME, progress
from pipeline.tokenize import tokenize_documents
from pipeline.stages import Stage, StageContext
from core.wordpiece import copy_tokenizer_files, load_tokenizer, read_vocab, special_token_ids, write_tokenizer_files

SPLITS = ("training", "test")
CHUNK_BYTES = 1 << 20  # HDF5 chunk of input_ids: fits h5py's default 1 MiB chunk cache
CHUNKS_PER_BLOCK = 4  # instances are built and written this many chunks at a time


@dataclasses.dataclass(frozen=True)
class Variant:
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20


@dataclasses.dataclass(frozen=True)
class Hdf5Config:
    # one output directory per variant; NVIDIA's phase 1 and phase 2 settings
    variants: list[Variant] = dataclasses.field(default_factory=lambda: [Variant(128, 20), Variant(512, 80)])
    masked_lm_prob: float = 0.15  # share of tokens to predict (up to max_predictions_per_seq)
    dupe_factor: int = 5  # rounds over the data, each with other masks and sentence pairs
    short_seq_prob: float = 0.1  # share of (document, round) pairs that aim at a random shorter length
    random_seed: int = 12345  # with the shard's name and the variant, seeds each file's random stream
    whole_word_masking: bool = False  # mask all ## pieces of a word together
    gzip_level: int = 1  # HDF5 gzip level (with the shuffle filter): higher levels write smaller files, more slowly

    def __post_init__(self):
        if not self.variants:
            raise ConfigError("hdf5.variants: at least one variant is needed")
        for i, v in enumerate(self.variants):
            if v.max_seq_length < 5:
                raise ConfigError(f"hdf5.variants[{i}].max_seq_length: {v.max_seq_length} is less than 5 "
                                  "([CLS] A [SEP] B [SEP])")
            if not 1 <= v.max_predictions_per_seq <= v.max_seq_length - 3:
                raise ConfigError(f"hdf5.variants[{i}].max_predictions_per_seq: must be in 1..max_seq_length-3")
        if len({(v.max_seq_length, v.max_predictions_per_seq) for v in self.variants}) < len(self.variants):
            raise ConfigError("hdf5.variants: the same variant is listed twice")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ConfigError(f"hdf5.masked_lm_prob: {self.masked_lm_prob} is not between 0 and 1")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ConfigError(f"hdf5.short_seq_prob: {self.short_seq_prob} is not between 0 and 1")
        if self.dupe_factor < 1:
            raise ConfigError("hdf5.dupe_factor: must be at least 1")
        if self.random_seed < 0:
            raise ConfigError("hdf5.random_seed: must not be negative")
        if not 0 <= self.gzip_level <= 9:
            raise ConfigError("hdf5.gzip_level: must be in 0..9")


def variant_dir_name(config: Hdf5Config, variant: Variant, lower_case: bool) -> str:
    name = (f"hdf5_lower_case_{int(lower_case)}_seq_len_{variant.max_seq_length}"
            f"_max_pred_{variant.max_predictions_per_seq}_masked_lm_prob_{config.masked_lm_prob}"
            f"_random_seed_{config.random_seed}_dupe_factor_{config.dupe_factor}")
    return name + "_whole_word_mask" if config.whole_word_masking else name


@dataclasses.dataclass(frozen=True)
class _TokenizeTask:
    text: Path
    tokenizer_json: str  # the tokenizer itself: loaded once per worker process (see _tokenizer_from_json)
    special_ids: dict[str, int]
    tokens_dir: Path  # where the shard's .npy arrays go


@dataclasses.dataclass(frozen=True)
class _InstancesTask:
    name: str  # "<split>_<shard>": names the file and seeds its random stream
    tokens_dir: Path
    out_file: Path
    vocab: MaskingVocab
    variant: Variant
    config: Hdf5Config


def run(config: Hdf5Config, ctx: StageContext) -> dict:
    shard_dir, vocab_dir = Path(ctx.inputs["shard"]), Path(ctx.inputs["vocab"])
    shards = _list_shards(shard_dir)
    vocab = read_vocab(vocab_dir / "vocab.txt")
    tokenizer = load_tokenizer(vocab_dir)
    _check_tokenizer_matches(tokenizer, vocab, vocab_dir)
    lower_case = _lowercases(tokenizer)
    variant_dirs = {v: ctx.out_dir / variant_dir_name(config, v, lower_case) for v in config.variants}
    tokens_root = ctx.cache_dir / "tokens"
    remove_tree(tokens_root)
    try:
        totals, token_dirs = _tokenize_shards(shards, tokenizer, special_token_ids(vocab), tokens_root, ctx)
        if totals["input_tokens"] == 0:
            raise PipelineError(f"{shard_dir}: the shards hold no text to make instances from")
        per_file = _write_instance_files(config, shards, token_dirs, variant_dirs, MaskingVocab.from_vocab(vocab),
                                         ctx)
    finally:
        remove_tree(tokens_root)

    variants = {}
    for variant, variant_dir in variant_dirs.items():
        copy_tokenizer_files(vocab_dir, variant_dir)
        files = {str(p.relative_to(variant_dir)): c for p, c in per_file.items() if p.parent.parent == variant_dir}
        summary = _variant_summary(files)
        write_json(variant_dir / "variant.json", {
            **dataclasses.asdict(variant),
            "masked_lm_prob": config.masked_lm_prob, "dupe_factor": config.dupe_factor,
            "short_seq_prob": config.short_seq_prob, "random_seed": config.random_seed,
            "whole_word_masking": config.whole_word_masking, "lower_case": lower_case,
            "vocab_size": len(vocab), "special_token_ids": special_token_ids(vocab),
            **summary, "files": {name: c["instances"] for name, c in files.items()},
        })
        variants[variant_dir.name] = summary
        ctx.log.info("hdf5: %s: %s training + %s test instances, short targets %.3f, random next %.3f",
                     variant_dir.name, f"{summary['training_instances']:,}", f"{summary['test_instances']:,}",
                     summary["short_target_share"], summary["random_next_share"])
    return {**totals, "instances": sum(v["training_instances"] + v["test_instances"] for v in variants.values()),
            "variants": variants}


def _tokenize_shards(shards: list[tuple[str, Path]], tokenizer: Tokenizer, special_ids: dict[str, int],
                     tokens_root: Path, ctx: StageContext) -> tuple[dict, list[Path]]:
    """Pass 1: each shard's token ids into tokens_root/<shard>/; returns the totals and those directories."""
    tokenizer_json = tokenizer.to_str()
    tasks = [_TokenizeTask(path, tokenizer_json, special_ids, tokens_root / path.stem) for _, path in shards]
    totals = {"shards": len(shards), "documents": 0, "sentences": 0, "input_tokens": 0}
    sizes = [path.stat().st_size for _, path in shards]
    with progress(sum(sizes), "hdf5: tokenize", "B", quiet=ctx.quiet) as bar:
        for size, counts in zip(sizes, ctx.executor.map(_tokenize_shard, tasks)):
            for key, value in counts.items():
                totals[key] += value
            bar.update(size)
    return totals, [task.tokens_dir for task in tasks]


def _write_instance_files(config: Hdf5Config, shards: list[tuple[str, Path]], token_dirs: list[Path],
                          variant_dirs: dict[Variant, Path], vocab: MaskingVocab,
                          ctx: StageContext) -> dict[Path, dict]:
    """Pass 2: one HDF5 file per (variant, shard); returns each file's counts."""
    tasks, sizes = [], []
    for variant, variant_dir in variant_dirs.items():
        for (split, path), tokens_dir in zip(shards, token_dirs):
            (variant_dir / split).mkdir(parents=True, exist_ok=True)
            tasks.append(_InstancesTask(path.stem, tokens_dir, variant_dir / split / f"{path.stem}.hdf5", vocab,
                                        variant, config))
            sizes.append(path.stat().st_size)
    per_file = {}
    with progress(sum(sizes), "hdf5: instances", "B", quiet=ctx.quiet) as bar:
        for task, size, counts in zip(tasks, sizes, ctx.executor.map(_write_instances, tasks)):
            per_file[task.out_file] = counts
            bar.update(size)
    return per_file


def run_standalone(config: Hdf5Config, inputs: Path, vocab: Path, out: Path, lowercase: bool | None = None,
                   strip_accents: bool | None = None, workers: int = 1, force: bool = False, quiet: bool = False,
                   log: logging.Logger | None = None) -> dict:
    """The stage on the user's own sentence-per-line text (a file, or a directory of *.txt files or of
    training_*/test_* shards) and vocabulary (a vocab.txt, or a directory with vocab.txt + tokenizer.json)."""
    out = Path(out)
    if out.exists() and not force and (not out.is_dir() or any(out.iterdir())):
        raise PipelineError(f"{out}: exists (pass --force to replace it)")
    with tempfile.TemporaryDirectory(prefix="wiki2bert-hdf5-") as scratch:
        scratch = Path(scratch)
        shard_dir = _standalone_shards(Path(inputs), scratch / "shard")
        vocab_dir = _standalone_vocab(Path(vocab), scratch / "vocab", lowercase, strip_accents)
        tmp = out.with_name(out.name + ".tmp")
        remove_tree(tmp)
        tmp.mkdir(parents=True)
        ctx = StageContext(lang="", out_dir=tmp, inputs={"shard": shard_dir, "vocab": vocab_dir},
                           cache_dir=scratch / "cache", workers=workers, quiet=quiet,
                           log=log or logging.getLogger(LOGGER_NAME))
        try:
            counts = run(config, ctx)
        except BaseException:
            remove_tree(tmp)
            raise
    remove_tree(out)
    tmp.rename(out)
    return counts


def _standalone_shards(inputs: Path, shard_dir: Path) -> Path:
    if inputs.is_dir() and any(any(inputs.glob(f"{split}_*.txt")) for split in SPLITS):
        return inputs
    files = sorted(inputs.glob("*.txt")) if inputs.is_dir() else [inputs]
    if not files or not all(f.is_file() for f in files):
        raise PipelineError(f"{inputs}: no such text file, nor a directory of *.txt files")
    shard_dir.mkdir(parents=True)
    for f in files:
        (shard_dir / f"training_{f.name}").symlink_to(f.resolve())
    return shard_dir


def _standalone_vocab(vocab: Path, vocab_dir: Path, lowercase: bool | None, strip_accents: bool | None) -> Path:
    if vocab.is_dir() and (vocab / "tokenizer.json").is_file():
        if lowercase is not None or strip_accents is not None:
            raise ConfigError(f"--lowercase/--strip-accents: {vocab / 'tokenizer.json'} already decides them; "
                              "pass a bare vocab.txt to choose")
        return vocab
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
        raise PipelineError(f"{shard_dir}: no training_*.txt or test_*.txt shards (is the shard stage complete?)")
    return shards


def _check_tokenizer_matches(tokenizer, vocab: dict[str, int], vocab_dir: Path) -> None:
    for token, token_id in special_token_ids(vocab).items():
        if tokenizer.token_to_id(token) != token_id:
            raise PipelineError(f"{vocab_dir}: tokenizer.json gives {token} id {tokenizer.token_to_id(token)}, "
                                f"vocab.txt {token_id}")
    if tokenizer.get_vocab_size() != len(vocab):
        raise PipelineError(f"{vocab_dir}: tokenizer.json has {tokenizer.get_vocab_size()} tokens, "
                            f"vocab.txt {len(vocab)}")


def _lowercases(tokenizer) -> bool:
    """Whether the tokenizer's normalizer lowercases (BertNormalizer's flag, or a Lowercase step)."""
    def walk(node) -> bool:
        if not isinstance(node, dict):
            return False
        if node.get("type") == "Lowercase" or (node.get("type") == "BertNormalizer" and node.get("lowercase")):
            return True
        return any(walk(child) for child in node.get("normalizers", []))
    return walk(json.loads(tokenizer.to_str()).get("normalizer"))


def _tokenize_shard(task: _TokenizeTask) -> dict:
    with _one_tokenizer_thread():
        docs = tokenize_documents(task.text, _tokenizer_from_json(task.tokenizer_json), task.special_ids)
    task.tokens_dir.mkdir(parents=True)
    for field in dataclasses.fields(docs):
        np.save(task.tokens_dir / f"{field.name}.npy", getattr(docs, field.name))
    return {"documents": len(docs.document_starts) - 1, "sentences": len(docs.sentence_starts) - 1,
            "input_tokens": len(docs.ids)}


@functools.lru_cache(maxsize=1)
def _tokenizer_from_json(tokenizer_json: str) -> Tokenizer:
    return Tokenizer.from_str(tokenizer_json)


@contextlib.contextmanager
def _one_tokenizer_thread():
    """One core per worker: --workers decides the parallelism (tokenizers reads this variable at each call)."""
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous


def _write_instances(task: _InstancesTask) -> dict:
    config, variant = task.config, task.variant
    seq, preds = variant.max_seq_length, variant.max_predictions_per_seq
    docs = TokenizedDocuments(*(np.load(task.tokens_dir / f"{f.name}.npy", mmap_mode="r")
                                for f in dataclasses.fields(TokenizedDocuments)))
    rng = _rng(config.random_seed, f"{task.name}/{seq}/{preds}")
    plan = plan_instances(docs, seq, config.short_seq_prob, config.dupe_factor, rng)
    order = rng.permutation(len(plan))
    chunk_rows = max(1, min(len(plan), CHUNK_BYTES // (4 * seq)))
    block_rows = chunk_rows * CHUNKS_PER_BLOCK
    masked = 0
    with h5py.File(task.out_file, "w") as f:
        datasets = create_datasets(f, len(plan), seq, preds, chunk_rows, compression="gzip",
                                   compression_opts=config.gzip_level, shuffle=True, track_times=False)
        for start in range(0, len(plan), block_rows):
            block = make_instances(docs.ids, plan.take(order[start:start + block_rows]), seq, preds,
                                   config.masked_lm_prob, task.vocab, config.whole_word_masking, rng)
            for name, values in block.items():
                datasets[name][start:start + len(values)] = values
            masked += int(np.count_nonzero(used_positions(block[MASKED_LM_POSITIONS])))
    return {"instances": len(plan), "random_next": int(plan.random_next.sum()), "masked_tokens": masked,
            "short_targets": plan.short_targets, "document_rounds": plan.document_rounds}


def _rng(seed: int, name: str) -> np.random.Generator:
    words = np.frombuffer(hashlib.sha256(name.encode("utf-8")).digest(), dtype=np.uint32)
    return np.random.default_rng([seed, *words.tolist()])


def _variant_summary(files: dict[str, dict]) -> dict:
    def total(key, split=None):
        return sum(c[key] for name, c in files.items() if split is None or name.startswith(f"{split}/"))
    instances = total("instances")
    return {"training_instances": total("instances", "training"), "test_instances": total("instances", "test"),
            "masked_tokens": total("masked_tokens"),
            "random_next_share": round(total("random_next") / max(1, instances), 4),
            "short_target_share": round(total("short_targets") / max(1, total("document_rounds")), 4)}


STAGE = Stage("hdf5", Hdf5Config, run, inputs=("shard", "vocab"), tools=("tokenizers", "h5py", "numpy"))
