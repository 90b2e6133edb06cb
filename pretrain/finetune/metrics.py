"""The figures a fine-tuned model is judged by on a dev split: accuracy, Matthews correlation, macro-F1, per-class
precision/recall/F1, and entity-level exact-span F1 over IOB2 tags.

Written on numpy (scikit-learn pulls scipy; seqeval is unmaintained) and checked against both in
tests/test_pretrain/test_finetune_metrics.py: each function gives the figure of the library call named in its docstring.
Gold and predicted are one label per example, or, for token tasks, one tag sequence per sentence: the label metrics
then count words (token accuracy, per-tag F1) and the entity metrics count entities."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

Labels = Sequence[str] | Sequence[Sequence[str]]


def _flat(gold: Labels, predicted: Labels) -> tuple[np.ndarray, np.ndarray]:
    """One label per example, or per word of tag sequences; the two must line up."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    if len(gold) and not isinstance(gold[0], str):
        for g, p in zip(gold, predicted):
            if len(g) != len(p):
                raise ValueError(f"a sentence of {len(g)} gold tags has {len(p)} predicted tags")
        gold = [tag for tags in gold for tag in tags]
        predicted = [tag for tags in predicted for tag in tags]
    if not len(gold):
        raise ValueError("no labels to score")
    return np.asarray(gold, dtype=object), np.asarray(predicted, dtype=object)


def _counts(gold: np.ndarray, predicted: np.ndarray, labels: Sequence[str]) -> tuple[np.ndarray, ...]:
    """Per label: true positives, predicted count, gold count."""
    labels = np.asarray(labels, dtype=object)[:, None]
    hits = gold == predicted
    return (((predicted == labels) & hits).sum(1), (predicted == labels).sum(1), (gold == labels).sum(1))


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den is 0 (scikit-learn's and seqeval's zero_division)."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def accuracy(gold: Labels, predicted: Labels, labels: Sequence[str] = ()) -> float:
    """The share of examples (tokens: words) labelled right: sklearn.metrics.accuracy_score."""
    g, p = _flat(gold, predicted)
    return float((g == p).mean())


def mcc(gold: Labels, predicted: Labels, labels: Sequence[str] = ()) -> float:
    """Matthews correlation, multi-class form; 0 when gold or predictions hold one class only:
    sklearn.metrics.matthews_corrcoef."""
    g, p = _flat(gold, predicted)
    classes = sorted(set(g) | set(p))
    true_positives, predicted_count, gold_count = (c.astype(np.float64) for c in _counts(g, p, classes))
    n = float(len(g))
    covariance = true_positives.sum() * n - gold_count @ predicted_count
    spread = (n * n - predicted_count @ predicted_count) * (n * n - gold_count @ gold_count)
    return float(covariance / np.sqrt(spread)) if spread else 0.0


def macro_f1(gold: Labels, predicted: Labels, labels: Sequence[str] = ()) -> float:
    """The unweighted mean of the F1 of each label that occurs in gold or predictions (a class never predicted
    counts 0): sklearn.metrics.f1_score(average="macro")."""
    g, p = _flat(gold, predicted)
    true_positives, predicted_count, gold_count = _counts(g, p, sorted(set(g) | set(p)))
    return float(_ratio(2 * true_positives, predicted_count + gold_count).mean())


def per_class(gold: Labels, predicted: Labels, labels: Sequence[str]) -> dict[str, float]:
    """precision/<label>, recall/<label>, f1/<label> and support/<label> (its gold count) for every label of the
    task, 0 where undefined: sklearn.metrics.precision_recall_fscore_support(labels=labels, zero_division=0)."""
    g, p = _flat(gold, predicted)
    true_positives, predicted_count, gold_count = _counts(g, p, labels)
    figures = {"precision": _ratio(true_positives, predicted_count), "recall": _ratio(true_positives, gold_count),
               "f1": _ratio(2 * true_positives, predicted_count + gold_count), "support": gold_count}
    return {f"{name}/{label}": float(values[i]) for name, values in figures.items() for i, label in enumerate(labels)}


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The (type, first word, last word) chunks of one sentence's tags, read as conlleval and seqeval's default mode
    read them (seqeval.metrics.sequence_labeling.get_entities): B-X starts a chunk, so does an I-X after O or after
    another type (a prediction need not be valid IOB2); O ends one."""
    chunks = []
    start, previous_prefix, previous_type = 0, "O", ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, type_ = ("O", "") if tag == "O" else (tag[0], tag[2:] or "_")
        inside = previous_prefix != "O" and prefix == "I" and type_ == previous_type
        if previous_prefix != "O" and not inside:
            chunks.append((previous_type, start, i - 1))
        if prefix != "O" and not inside:
            start = i
        previous_prefix, previous_type = prefix, type_
    return chunks


def _entity_sets(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> tuple[set, set]:
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    if len(gold) and isinstance(gold[0], str):
        raise ValueError("entity metrics need tag sequences (one per sentence), not one label per example")
    return ({(s, *chunk) for s, tags in enumerate(gold) for chunk in entities(tags)},
            {(s, *chunk) for s, tags in enumerate(predicted) for chunk in entities(tags)})


def _precision_recall_f1(right: int, predicted: int, gold: int) -> tuple[float, float, float]:
    precision, recall = float(_ratio(right, predicted)), float(_ratio(right, gold))
    return precision, recall, float(_ratio(2 * precision * recall, precision + recall))


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> tuple[float, float, float]:
    """Micro precision, recall and F1 over exact entity spans (type and both ends right); 0 when undefined, also
    when neither side has an entity: seqeval.metrics precision_score / recall_score / f1_score with their
    defaults (mode=None, average="micro")."""
    gold_set, predicted_set = _entity_sets(gold, predicted)
    return _precision_recall_f1(len(gold_set & predicted_set), len(predicted_set), len(gold_set))


def entity_per_type(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                    labels: Sequence[str] = ()) -> dict[str, float]:
    """entity_precision/<type>, entity_recall/<type>, entity_f1/<type>, entity_support/<type> for every entity
    type in gold or predictions: seqeval.metrics.classification_report(output_dict=True)."""
    gold_set, predicted_set = _entity_sets(gold, predicted)
    figures = {}
    for type_ in sorted({e[1] for e in gold_set | predicted_set}):
        g = {e for e in gold_set if e[1] == type_}
        p = {e for e in predicted_set if e[1] == type_}
        precision, recall, f1 = _precision_recall_f1(len(g & p), len(p), len(g))
        figures |= {f"entity_precision/{type_}": precision, f"entity_recall/{type_}": recall,
                    f"entity_f1/{type_}": f1, f"entity_support/{type_}": float(len(g))}
    return figures


METRICS: dict[str, Callable[..., float | dict[str, float]]] = {
    "accuracy": accuracy,
    "mcc": mcc,
    "macro_f1": macro_f1,
    "per_class": per_class,
    "entity_f1": lambda gold, predicted, labels=(): entity_scores(gold, predicted)[2],
    "entity_precision": lambda gold, predicted, labels=(): entity_scores(gold, predicted)[0],
    "entity_recall": lambda gold, predicted, labels=(): entity_scores(gold, predicted)[1],
    "entity_per_type": entity_per_type,
}
SEVERAL_FIGURES = ("per_class", "entity_per_type")  # give a figure per class or type: never a task's main metric
ENTITY_METRICS = ("entity_f1", "entity_precision", "entity_recall", "entity_per_type")  # need IOB2 tag sequences


def compute(names: Sequence[str], labels: Sequence[str], gold: Labels, predicted: Labels) -> dict[str, float]:
    """The named metrics of METRICS on one split, as one flat mapping (a per-class metric gives one key a class).
    labels: the task's label set (Task.labels); gold, predicted: one label per example, or a tag sequence per
    sentence for token tasks."""
    figures: dict[str, float] = {}
    for name in names:
        value = METRICS[name](gold, predicted, labels)
        figures |= value if isinstance(value, dict) else {name: value}
    return figures
