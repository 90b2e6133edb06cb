"""What a fine-tuning task is once read, whatever its file format: the contract between the readers (tasks.py) and
the fine-tuning runs."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Literal, Sequence

# single: one sentence -> label; pair: two sentences -> label; choice: a context and candidate answers -> which one;
# tokens: a label per word (named entities, part of speech)
TaskKind = Literal["single", "pair", "choice", "tokens"]
TASK_KINDS = ("single", "pair", "choice", "tokens")


@dataclasses.dataclass(frozen=True)
class Example:
    id: str  # the example's id in its file, or file:line where it has none (JSON arrays: file[index]; tokens: the
    #          sentence's first line; the file relative to the task's directory)
    texts: tuple[str, ...] = ()  # single: (sentence,); pair: (first, second); choice: (context,) (HuCoPA: the
    #                              premise and the question word, "cause" or "effect", joined by a space)
    # single, pair, choice: one of Task.labels (choice: the label of the right choice); None in the test split
    label: str | None = None
    choices: tuple[str, ...] = ()  # choice: the candidates, in the order of Task.labels
    words: tuple[str, ...] = ()  # tokens: the sentence's words
    tags: tuple[str, ...] = ()  # tokens: one of Task.labels per word (the test split: none)


@dataclasses.dataclass(frozen=True)
class TestFile:
    """A file of the test split (labels hidden, as HuLU publishes them), kept to be written again in its own format
    with the predicted labels filled in: a file ready to submit."""
    name: str  # its path relative to the task's directory: the name the filled-in file is written under
    examples: int  # how many of Task.test are its, in order
    fill: Callable[[Sequence], str]  # its text with these predictions (a label per example; tokens: a tag list)


@dataclasses.dataclass(frozen=True)
class Task:
    name: str  # for tables and output paths (the file's or directory's stem unless the task file names it)
    kind: TaskKind
    labels: tuple[str, ...]  # the label set (tokens: the tag set, e.g. IOB2 tags), in a fixed order
    metrics: tuple[str, ...]  # the figures it is judged by, names of metrics.METRICS; the first is the main one
    train: tuple[Example, ...]
    dev: tuple[Example, ...]
    source: Path  # the file or directory it was read from
    test: tuple[Example, ...] = ()  # the test split (files or a directory named *test*), without labels
    test_files: tuple[TestFile, ...] = ()  # the files of `test`, in order

    @property
    def main_metric(self) -> str:
        return self.metrics[0]


def majority_label(task: Task) -> str:
    """The most frequent label of the training split (tokens: the most frequent tag); ties go to the first in
    Task.labels."""
    counts = dict.fromkeys(task.labels, 0)
    for example in task.train:
        for label in (example.tags if task.kind == "tokens" else (example.label,)):
            counts[label] += 1
    return max(task.labels, key=lambda label: counts[label])


def gold_labels(task: Task) -> list:
    return [list(e.tags) if task.kind == "tokens" else e.label for e in task.dev]


def majority_predictions(task: Task) -> list:
    label = majority_label(task)
    return [[label] * len(e.tags) if task.kind == "tokens" else label for e in task.dev]
