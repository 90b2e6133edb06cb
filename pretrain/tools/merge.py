"""`pretrain merge`: the element-wise mean of the weights of several models of one arch, shape and tokenizer, written
as an export (export.py), e.g. the decay variants continued from one stable checkpoint, which mmBERT averages into
its released model.

Each model is a model directory as `pretrain export` takes one (pretrain/model/model_dir.py: an export, another Hugging
Face directory of our archs, a phase directory's latest checkpoint), its tokenizer read as the export reads it
(vocab.txt, else tokenizer.json: a hub folder may hold it alone). They must agree on every model setting but
`activation_checkpointing` (a memory setting) and `vocab_size` (padded in a phase directory, the tokenizer's rows in an
export: the weights are averaged over the tokenizer's rows, as the export holds them), on the vocabulary and on the
heads they hold; the first difference is refused with one line. The mean is taken in float64 and stored in each
tensor's own dtype; tensors that are not floating point must be equal. One model is held in memory beside the
running sum.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from wiki2bert_core.errors import ConfigError
from pretrain.model.model_dir import OurModel, read_our_model, vocabulary_difference
from pretrain.tools.export import check_export_out_dir, export_model, read_tokenizer, write_export

COMMAND = "pretrain merge"
UNCOMPARED_SETTINGS = {"activation_checkpointing", "vocab_size"}  # see the module's doc


def merge_models(model_dirs: list[Path], out_dir: Path, force: bool = False) -> Path:
    """Writes the mean of the models in `model_dirs` as an export into `out_dir`; ConfigError for fewer than two
    models, for models that differ (the module's doc) or an `out_dir` an export may not replace."""
    model_dirs, out_dir = [Path(d) for d in model_dirs], Path(out_dir)
    if len(model_dirs) < 2:
        raise ConfigError(f"{COMMAND}: {len(model_dirs)} model directory given; the mean needs at least two")
    for model_dir in model_dirs:
        check_export_out_dir(model_dir, out_dir, force, command=COMMAND)
    first = read_our_model(model_dirs[0], COMMAND, "merge")
    first_tokenizer = read_tokenizer(first.model_dir)
    merged = export_model(first, first_tokenizer)
    state = merged.state_dict()
    sums = {name: value.double() for name, value in state.items() if value.is_floating_point()}
    merged_from = [_source(first)]
    for model_dir in model_dirs[1:]:
        other = read_our_model(model_dir, COMMAND, "merge")
        other_tokenizer = read_tokenizer(other.model_dir)
        _check_same(first, first_tokenizer.vocab, other, other_tokenizer.vocab)
        merged_from.append(_source(other))
        for name, value in export_model(other, other_tokenizer).state_dict().items():
            if name in sums:
                sums[name] += value.double()
            elif not torch.equal(value, state[name]):
                raise ConfigError(f"{model_dir}: {name} differs from {model_dirs[0]}'s and is not a weight to "
                                  f"average; {COMMAND} averages models of one arch, shape and tokenizer")
        del other
    merged.load_state_dict({name: (sums[name] / len(model_dirs)).to(value.dtype) if name in sums else value
                            for name, value in state.items()})
    return write_export(first, merged, first_tokenizer, out_dir, {"checkpoint": None, "merged_from": merged_from})


def _source(read: OurModel) -> dict:
    """A merged model, as pretraining_config.json's `merged_from` records it."""
    return {"model": str(read.model_dir.path), "checkpoint": read.checkpoint and read.checkpoint.tag}


def _check_same(first: OurModel, first_vocab: dict[str, int], other: OurModel, other_vocab: dict[str, int]) -> None:
    """ConfigError (one line naming `other`'s directory) at the first difference from `first` (each with its
    tokenizer's token -> id map)."""
    def refuse(problem: str):
        raise ConfigError(f"{other.model_dir.path}: {problem} {first.model_dir.path}'s; {COMMAND} averages models of "
                          f"one arch, shape and tokenizer")

    ours, theirs = dataclasses.asdict(first.model.config), dataclasses.asdict(other.model.config)
    for key in ours:
        if key not in UNCOMPARED_SETTINGS and ours[key] != theirs[key]:
            refuse(f"model setting {key} is {theirs[key]!r}, against {ours[key]!r} in")
    difference = vocabulary_difference(first_vocab, other_vocab)
    if difference:
        refuse(f"its vocabulary differs ({difference}) from")
    mine, others = set(first.model.state_dict()), set(other.model.state_dict())
    if mine != others:
        only = sorted(others - mine) or sorted(mine - others)
        refuse(f"{'has' if others - mine else 'lacks'} {only[0]} (a head), unlike")
