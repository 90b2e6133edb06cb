"""A tiny BERT and synthetic tasks of each kind that it learns in seconds from random weights: shared by the
fine-tuning tests."""
from __future__ import annotations

import json
import random
from pathlib import Path

from wiki2bert_core.wordpiece import SPECIAL_TOKENS, write_tokenizer_dir
from pretrain.finetune.task import Example, Task

WORDS = [f"w{i}" for i in range(30)]
NAMES = WORDS[:4]  # the words the token task tags as B-PER
# a word split into two sub-tokens, "ab" "##cd": only the first is labelled
TOKENS = [*SPECIAL_TOKENS, *WORDS, "ab", "##cd"]
# what the tests change from the recipes: a tiny model from random weights needs a larger lr and more steps
TEST_RECIPE = ["lr=3e-3", "epochs=5", "batch=16", "warmup=0.05"]
QUICK_RECIPE = [*TEST_RECIPE, "epochs=1"]  # for tests of what a run writes, not of what it learns


def write_tiny_model(directory: Path) -> Path:
    """A BERT with 2 layers of width 32 (random weights) and its tokenizer, as `pretrain export` writes one."""
    import torch
    import transformers

    directory.mkdir(parents=True)
    torch.manual_seed(1234)  # not a seed of the runs, whose random-init rows would otherwise be this model
    config = transformers.BertConfig(vocab_size=len(TOKENS), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    transformers.BertForPreTraining(config).save_pretrained(directory)
    write_tokenizer_dir(directory, TOKENS)
    return directory


def sentence(rng: random.Random, words: list[str], length=(4, 8)) -> list[str]:
    return [rng.choice(words) for _ in range(rng.randint(*length))]


def make_tasks(train: int = 240, dev: int = 100, seed: int = 0) -> list[Task]:
    """One task of each kind, balanced where there are classes:
    single: whether the sentence holds w0; pair: whether the second sentence holds w0 (the first may hold it too);
    choice: the choice that holds w0; tokens: the words of NAMES are B-PER, the rest (and "abcd") O. (A relation
    between the texts, such as "the choice repeats a word of the context", is beyond a tiny model trained from
    random weights in seconds.)"""
    rng = random.Random(seed)
    others = WORDS[1:]

    def single(i):
        words = sentence(rng, others)
        label = i % 2
        if label:
            words[rng.randrange(len(words))] = "w0"
        return Example(f"s{i}", (" ".join(words),), str(label))

    def pair(i):
        first, second = sentence(rng, others), sentence(rng, others)
        label = i % 2
        first[0] = "w0" if rng.random() < 0.5 else first[0]  # w0 in the first sentence tells nothing
        if label:
            second[rng.randrange(len(second))] = "w0"
        return Example(f"p{i}", (" ".join(first), " ".join(second)), "yes" if label else "no")

    def choice(i):
        right, wrong = sentence(rng, others, (1, 3)), sentence(rng, others, (1, 3))
        right[rng.randrange(len(right))] = "w0"
        label = i % 2
        choices = (" ".join(wrong), " ".join(right)) if label else (" ".join(right), " ".join(wrong))
        return Example(f"c{i}", (" ".join(sentence(rng, WORDS)),), str(label + 1), choices=choices)

    def tokens(i):
        words = tuple(sentence(rng, WORDS + ["abcd"], (5, 10)))
        return Example(f"t{i}", words=words, tags=tuple("B-PER" if w in NAMES else "O" for w in words))

    made = []
    for kind, make, labels, metrics in (("single", single, ("0", "1"), ("mcc", "accuracy")),
                                         ("pair", pair, ("no", "yes"), ("accuracy", "macro_f1")),
                                         ("choice", choice, ("1", "2"), ("accuracy",)),
                                         ("tokens", tokens, ("O", "B-PER", "I-PER"), ("entity_f1",))):
        examples = [make(i) for i in range(train + dev)]
        made.append(Task(kind, kind, labels, metrics, tuple(examples[:train]), tuple(examples[train:]),
                         Path(f"{kind}.json")))
    return made


def write_single_task(directory: Path, task: Task, test: tuple[Example, ...] = ()) -> Path:
    """`task` (kind single) as HuLU writes HuCOLA: train.json and dev.json, JSON arrays of {"id", "Sent", "label"};
    `test` as test.json, the same without labels."""
    directory.mkdir(parents=True)
    for split, examples in (("train", task.train), ("dev", task.dev)):
        rows = [{"id": e.id, "Sent": e.texts[0], "label": e.label} for e in examples]
        (directory / f"{split}.json").write_text(json.dumps(rows), encoding="utf-8")
    if test:
        rows = [{"id": e.id, "Sent": e.texts[0]} for e in test]
        (directory / "test.json").write_text(json.dumps(rows, indent=4), encoding="utf-8")
    return directory


def write_token_task(directory: Path, task: Task, test: tuple[Example, ...] = ()) -> Path:
    """`task` (kind tokens) as plain CoNLL files, word and tag a line: train.conll, dev.conll and, with `test`,
    test.conll with "_" for the hidden tags."""
    directory.mkdir(parents=True)
    for split, examples in (("train", task.train), ("dev", task.dev), ("test", test)):
        if examples:
            text = "".join("".join(f"{w} {t}\n" for w, t in zip(e.words, e.tags or ["_"] * len(e.words))) + "\n"
                           for e in examples)
            (directory / f"{split}.conll").write_text(text, encoding="utf-8")
    return directory
