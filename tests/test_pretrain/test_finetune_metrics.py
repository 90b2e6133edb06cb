"""The fine-tuning metrics (pretrain/finetune/metrics.py) equal scikit-learn's and seqeval's on fixtures, edge cases
included: a class never predicted, one class only, no entities at all, predictions that are not valid IOB2."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from seqeval import metrics as seqeval
from seqeval.metrics.sequence_labeling import get_entities
from sklearn import metrics as sklearn

from pretrain.finetune.metrics import METRICS, compute, entities

LABEL_CASES = {
    "binary": (["1", "0", "1", "1", "0", "1", "0", "0"], ["1", "0", "0", "1", "1", "1", "0", "1"]),
    "three classes, skewed": (["neg"] * 7 + ["neu"] * 5 + ["pos"] * 2,
                              ["neg"] * 6 + ["neu"] + ["neu"] * 3 + ["neg"] * 2 + ["neg", "neu"]),
    "a class never predicted": (["a", "b", "c", "a", "b", "c"], ["a", "b", "a", "a", "b", "b"]),
    "a class only predicted": (["a", "a", "b", "b"], ["a", "c", "b", "c"]),
    "all one class, predicted right": (["1"] * 6, ["1"] * 6),
    "gold all one class": (["1"] * 6, ["1", "0", "1", "1", "0", "1"]),
    "predictions all one class": (["1", "0", "1", "1", "0", "1"], ["1"] * 6),
    "all wrong": (["0", "1", "0", "1"], ["1", "0", "1", "0"]),
    "one example": (["x"], ["y"]),
}


def _random_labels(seed: int, n: int, classes: str) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    gold = [rng.choice(classes) for _ in range(n)]
    return gold, [g if rng.random() < 0.6 else rng.choice(classes) for g in gold]


LABEL_CASES |= {f"random {seed}": _random_labels(seed, 50 + seed, "abcde"[: 2 + seed % 4]) for seed in range(8)}


@pytest.mark.parametrize("case", LABEL_CASES)
def test_label_metrics_equal_scikit_learn(case):
    gold, predicted = LABEL_CASES[case]
    labels = sorted(set(gold) | set(predicted))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns where a figure is undefined (and gives 0)
        expected = {"accuracy": sklearn.accuracy_score(gold, predicted),
                    "mcc": sklearn.matthews_corrcoef(gold, predicted),
                    "macro_f1": sklearn.f1_score(gold, predicted, average="macro")}
        precision, recall, f1, support = sklearn.precision_recall_fscore_support(gold, predicted, labels=labels,
                                                                                zero_division=0)
    for i, label in enumerate(labels):
        expected |= {f"precision/{label}": precision[i], f"recall/{label}": recall[i], f"f1/{label}": f1[i],
                     f"support/{label}": support[i]}
    figures = compute(["accuracy", "mcc", "macro_f1", "per_class"], labels, gold, predicted)
    assert figures == pytest.approx(expected, abs=1e-12)


def test_edge_cases_have_the_figures_they_should():
    gold_one_class = compute(["mcc", "accuracy"], ["0", "1"], ["1"] * 6, ["1", "0", "1", "1", "0", "1"])
    assert gold_one_class == {"mcc": 0.0, "accuracy": pytest.approx(4 / 6)}
    never_predicted = compute(["per_class", "macro_f1"], ["a", "b", "c"], *LABEL_CASES["a class never predicted"])
    assert never_predicted["precision/c"] == never_predicted["recall/c"] == never_predicted["f1/c"] == 0.0
    assert never_predicted["support/c"] == 2.0
    # a label of the task absent from both sides gets zeros in per_class and is not averaged into macro-F1
    absent = compute(["per_class", "macro_f1"], ["a", "b", "z"], ["a", "b"], ["a", "b"])
    assert absent["f1/z"] == 0.0 and absent["macro_f1"] == 1.0
    assert compute(["mcc"], ["0", "1"], *LABEL_CASES["all wrong"]) == {"mcc": -1.0}


def test_token_tasks_score_each_word_for_the_label_metrics():
    gold = [["O", "B-PER", "I-PER"], ["B-LOC", "O"]]
    predicted = [["O", "B-PER", "O"], ["B-LOC", "B-LOC"]]
    flat_gold, flat_predicted = sum(gold, []), sum(predicted, [])
    figures = compute(["accuracy", "macro_f1"], [], gold, predicted)
    assert figures == pytest.approx({"accuracy": sklearn.accuracy_score(flat_gold, flat_predicted),
                                     "macro_f1": sklearn.f1_score(flat_gold, flat_predicted, average="macro")})


SEQUENCE_CASES = {
    "exact and partial spans": ([["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]],
                                [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]),
    "wrong type, same span": ([["B-PER", "I-PER", "O", "B-LOC"]], [["B-ORG", "I-ORG", "O", "B-LOC"]]),
    "adjacent entities": ([["B-PER", "B-PER", "I-PER", "B-LOC", "I-LOC"]],
                          [["B-PER", "I-PER", "I-PER", "B-LOC", "B-LOC"]]),
    "predictions not IOB2 (I- after O, type change)": (
        [["O", "B-PER", "I-PER", "O", "B-ORG", "I-ORG"]], [["O", "I-PER", "I-PER", "O", "B-ORG", "I-LOC"]]),
    "entity at the end of one sentence and the start of the next": ([["O", "B-PER"], ["I-PER", "O"]],
                                                                    [["O", "B-PER"], ["B-PER", "O"]]),
    "no entities predicted": ([["B-PER", "O"], ["O", "B-LOC"]], [["O", "O"], ["O", "O"]]),
    "no gold entities": ([["O", "O"], ["O"]], [["B-PER", "O"], ["O"]]),
    "no entities anywhere": ([["O", "O"], ["O"]], [["O", "O"], ["O"]]),
    "types without a prefix body": ([["B-", "I-", "O"]], [["B-", "O", "O"]]),
}


def _random_tags(seed: int) -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(seed)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(30)]
    return gold, [[t if rng.random() < 0.7 else rng.choice(tags) for t in s] for s in gold]


SEQUENCE_CASES |= {f"random {seed}": _random_tags(seed) for seed in range(10)}


@pytest.mark.parametrize("case", SEQUENCE_CASES)
def test_entity_metrics_equal_seqeval_defaults(case):
    gold, predicted = SEQUENCE_CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns where a figure is undefined (and gives 0)
        expected = {"entity_f1": seqeval.f1_score(gold, predicted),
                    "entity_precision": seqeval.precision_score(gold, predicted),
                    "entity_recall": seqeval.recall_score(gold, predicted)}
        report = seqeval.classification_report(gold, predicted, output_dict=True)
    for type_, row in report.items():
        if not type_.endswith(" avg"):
            expected |= {f"entity_precision/{type_}": row["precision"], f"entity_recall/{type_}": row["recall"],
                         f"entity_f1/{type_}": row["f1-score"], f"entity_support/{type_}": row["support"]}
    figures = compute(["entity_f1", "entity_precision", "entity_recall", "entity_per_type"], [], gold, predicted)
    assert figures == pytest.approx(expected, abs=1e-12)
    for tags in gold + predicted:
        assert entities(tags) == [(t, s, e) for t, s, e in get_entities(tags)]


def test_empty_entity_sets_score_zero_as_seqeval_does():
    assert compute(["entity_f1", "entity_precision", "entity_recall"], [], [["O"]], [["O"]]) == \
        {"entity_f1": 0.0, "entity_precision": 0.0, "entity_recall": 0.0}


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="2 gold labels but 1 predictions"):
        compute(["accuracy"], [], ["a", "b"], ["a"])
    with pytest.raises(ValueError, match="3 gold tags has 2 predicted"):
        compute(["accuracy"], [], [["O", "O", "O"]], [["O", "O"]])
    with pytest.raises(ValueError, match="tag sequences"):
        compute(["entity_f1"], [], ["O"], ["O"])
    with pytest.raises(ValueError, match="no labels"):
        compute(["accuracy"], [], [], [])


def test_every_metric_gives_floats():
    gold, predicted = SEQUENCE_CASES["exact and partial spans"]
    for name in METRICS:
        figures = compute([name], ["O", "B-MISC", "I-MISC", "B-PER", "I-PER"], gold, predicted)
        assert figures and all(type(v) is float and np.isfinite(v) for v in figures.values()), name
