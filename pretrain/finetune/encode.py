"""A task's examples as model inputs: tokenized once per model and task (every seed reuses them), padded per batch.

single: [CLS] sentence [SEP]; pair: [CLS] first [SEP] second [SEP]; choice: one such pair (context, choice) per
candidate; tokens: the words split into sub-tokens, the first sub-token of each word labelled with its tag and the
rest ignored (-100), so that the model predicts one tag per word.
"""
from __future__ import annotations

import dataclasses

import torch

from wiki2bert_core.errors import DataError
from pretrain.finetune.task import Example, Task

IGNORE = -100  # the label of positions the loss skips (cross_entropy's ignore_index)


@dataclasses.dataclass(frozen=True)
class Encoded:
    rows: tuple[tuple[int, ...], ...]  # input ids: one row (choice: one per candidate)
    segments: tuple[tuple[int, ...], ...]  # token type ids, as rows
    label: int | tuple[int, ...]  # the class (choice: the right candidate's index); tokens: a label per sub-token
    first_tokens: tuple[int, ...] = ()  # tokens: the position of each word's first sub-token (words cut off: none)

    @property
    def length(self) -> int:
        return sum(len(row) for row in self.rows)


def encode_task(tokenizer, task: Task, examples: tuple[Example, ...], max_length: int) -> list[Encoded]:
    if task.kind == "tokens":
        return [_encode_words(tokenizer, task, example, max_length) for example in examples]
    index = {label: i for i, label in enumerate(task.labels)}
    encoded = []
    for example in examples:
        if task.kind == "choice":
            pairs = [(example.texts[0], choice) for choice in example.choices]
        else:
            pairs = [tuple(example.texts)]
        rows, segments = [], []
        for texts in pairs:
            out = tokenizer(*texts, truncation=True, max_length=max_length)
            rows.append(tuple(out["input_ids"]))
            segments.append(tuple(out.get("token_type_ids") or [0] * len(out["input_ids"])))
        # the test split has no labels: 0 stands in (predictions never read it)
        encoded.append(Encoded(tuple(rows), tuple(segments), 0 if example.label is None else index[example.label]))
    return encoded


def _encode_words(tokenizer, task: Task, example: Example, max_length: int) -> Encoded:
    if not tokenizer.is_fast:
        raise DataError(f"{tokenizer.name_or_path}: token tasks need a fast tokenizer (tokenizer.json, or a "
                        f"vocab.txt transformers can convert), to map sub-tokens to words")
    index = {tag: i for i, tag in enumerate(task.labels)}
    out = tokenizer(list(example.words), is_split_into_words=True, truncation=True, max_length=max_length)
    word_ids = out.word_ids()
    labels, first = [], {}
    for position, word in enumerate(word_ids):
        if word is None or word in first:
            labels.append(IGNORE)
        else:
            first[word] = position
            labels.append(index[example.tags[word]] if example.tags else 0)  # the test split: no tags
    input_ids = tuple(out["input_ids"])
    return Encoded((input_ids,), (tuple(out.get("token_type_ids") or [0] * len(input_ids)),), tuple(labels),
                   tuple(first.get(word, -1) for word in range(len(example.words))))


def collate(batch: list[Encoded], kind: str, pad_id: int) -> dict[str, torch.Tensor]:
    """The model's keyword arguments for `batch`, padded to its longest row: [examples, length], choice
    [examples, candidates, length]."""
    length = max(len(row) for encoded in batch for row in encoded.rows)

    def padded(rows, value):
        return [list(row) + [value] * (length - len(row)) for row in rows]

    ids = [padded(e.rows, pad_id) for e in batch]
    segments = [padded(e.segments, 0) for e in batch]
    mask = [[[1] * len(row) + [0] * (length - len(row)) for row in e.rows] for e in batch]
    if kind == "tokens":
        labels = torch.tensor([padded([e.label], IGNORE)[0] for e in batch])
    else:
        labels = torch.tensor([e.label for e in batch])
    inputs = {"input_ids": torch.tensor(ids), "token_type_ids": torch.tensor(segments),
              "attention_mask": torch.tensor(mask)}
    if kind != "choice":  # one row per example: [examples, 1, length] -> [examples, length]
        inputs = {key: value[:, 0] for key, value in inputs.items()}
    return {**inputs, "labels": labels}
