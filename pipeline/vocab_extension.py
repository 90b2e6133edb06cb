"""Vocabulary extension (`vocab.extend_with: N`, with `--tokenizer`): up to N new vocabulary entries for the words of
the corpus the adopted tokenizer splits worst, added to its model's vocabulary (not as added tokens: the text is
encoded as before, and a new entry is masked and drawn as a replacement like any other), so that its encoding of those
words is one token each.

Which words: the tokenizer's own words (its normalizer and pre-tokenizer: `szeretem` for WordPiece, `▁szeretem` for
SentencePiece's Metaspace, `Ġszeretem` for byte-level BPE) by count x (pieces - 1), the tokens the corpus would save
if the word were one token, so a frequent word of two pieces and a rarer one of many compete on the same figure (the
tokens per word the stage reports). Words seen fewer than `vocab.min_frequency` times, words with an unknown piece
and the sentences the stage reports its figures on (its held-out sample) are left out. Learning a small tokenizer on
the corpus and adding its missing pieces would add pieces the original already covers as well (a piece of another
segmentation saves nothing) and pieces of no use once the whole words are in.

How each kind encodes them: WordPiece matches the longest vocabulary entry first, so the whole word is found;
Unigram gets the piece with the score of the word's current best segmentation plus EPSILON for each piece it saves,
so the word becomes the one piece (also against paths through other new pieces, which save fewer) and another
word's segmentation changes only where a path through new pieces was within a few EPSILON of its best; BPE gets
merges at the end of its list that build the word from its current pieces along the binary tree whose inner nodes
are most often in the vocabulary already (each new inner node an entry, counted in N: `Ġgyümölccsel` from `Ġgyümölcs`
and `csel`, if those are tokens, takes one), so the word's original merges all apply first and the new ones only
then (a later word's merges come after an earlier one's, which therefore always completes; a word whose own merges
would also apply elsewhere in it, `haha` as `ha ha`, is left out).

pretrain phase1 --init (pretrain/run/prepare.py, pretrain/model/hf_weights.py) initialises the embedding and decoder
rows of the new entries from the mean of the rows of the pieces the original tokenizer splits each into.
"""
from __future__ import annotations

import collections
import dataclasses
import json

from tokenizers import Tokenizer

from wiki2bert_core.errors import DataError

EPSILON = 1e-3  # what a new Unigram piece's score gains over the word's current segmentation, a piece it saves


@dataclasses.dataclass(frozen=True)
class NewToken:
    token: str  # as the model's vocabulary spells it
    pieces: tuple[str, ...]  # the original tokenizer's pieces of it
    count: int  # times the word was seen (0 for a BPE prefix that only builds a word)


class WordCounts:
    """How often each of the tokenizer's words occurs in the sentences given to `add`, but those of `held_out`."""

    def __init__(self, tokenizer: Tokenizer, where: str):
        if tokenizer.pre_tokenizer is None:
            raise DataError(f"{where}: the tokenizer has no pre-tokenizer, so its words are unknown and "
                            "vocab.extend_with cannot find words to add; leave vocab.extend_with at 0")
        self.normalizer, self.pre_tokenizer = tokenizer.normalizer, tokenizer.pre_tokenizer
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, sentences: list[str], held_out: set[str]) -> None:
        for sentence in sentences:
            if sentence not in held_out:
                text = self.normalizer.normalize_str(sentence) if self.normalizer else sentence
                self.counts.update(word for word, _ in self.pre_tokenizer.pre_tokenize_str(text))


def extend(tokenizer: Tokenizer, counts: collections.Counter[str], limit: int, min_frequency: int, unk_id: int,
           where: str) -> tuple[Tokenizer, list[NewToken]]:
    """The tokenizer with up to `limit` new entries (after every id it has) for the words of `counts` it splits
    worst (module docstring), and those entries in id order."""
    whole = json.loads(tokenizer.to_str())
    model = whole["model"]  # extended in place
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    candidates = []
    for word, count in counts.items():
        if count < min_frequency or word in vocab:
            continue
        pieces = tokenizer.model.tokenize(word)
        if len(pieces) > 1 and all(piece.id != unk_id for piece in pieces):
            candidates.append((count * (len(pieces) - 1), word, tuple(piece.value for piece in pieces), count))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    words = [NewToken(word, pieces, count) for _, word, pieces, count in candidates]
    if model["type"] == "BPE":
        new = _bpe_entries(model, words, vocab, limit)
    else:
        new = words[:limit]
        if model["type"] == "Unigram":
            _add_unigram_pieces(model, new, len(vocab), where)
        else:
            model["vocab"].update({entry.token: len(vocab) + i for i, entry in enumerate(new)})
    return Tokenizer.from_str(json.dumps(whole)), new


def _add_unigram_pieces(model: dict, new: list[NewToken], size: int, where: str) -> None:
    if len(model["vocab"]) != size:
        raise DataError(f"{where}: its Unigram model has {len(model['vocab'])} pieces, but the tokenizer {size} "
                        "tokens (added tokens after the pieces), so new pieces cannot take the next ids; leave "
                        "vocab.extend_with at 0")
    scores = dict(map(tuple, model["vocab"]))
    model["vocab"] += [[entry.token, sum(scores[p] for p in entry.pieces) + EPSILON * (len(entry.pieces) - 1)]
                       for entry in new]


def _bpe_entries(model: dict, words: list[NewToken], vocab: dict[str, int], limit: int) -> list[NewToken]:
    """The BPE model's merges and vocabulary extended for the words, in order, while their entries (the inner nodes of
    each word's merge tree that are not in the vocabulary yet, the word among them) fit in `limit`; returns the new
    entries."""
    merges = model["merges"]
    as_strings = bool(merges) and isinstance(merges[0], str)  # tokenizer.json before tokenizers 0.20: "a b"
    ranks = {tuple(m.split(" ", 1)) if as_strings else tuple(m): rank for rank, m in enumerate(merges)}
    prefix, known = model.get("continuing_subword_prefix") or "", set(vocab)
    new: list[NewToken] = []
    for word in words:
        current = _apply_merges(list(word.pieces), ranks, prefix)
        for tree in (_merge_tree(current, known, prefix), _merge_tree(current, set(), prefix)):  # then left to right
            entries = list(dict.fromkeys(_merged(a, b, prefix) for a, b in tree if _merged(a, b, prefix) not in known))
            added = list(dict.fromkeys(pair for pair in tree if pair not in ranks))
            ranks.update((pair, len(merges) + i) for i, pair in enumerate(added))
            if len(new) + len(entries) <= limit and _apply_merges(list(word.pieces), ranks, prefix) == [word.token]:
                break
            for pair in added:  # over the limit, or a merge of the tree applies elsewhere in the word too
                del ranks[pair]
        else:
            continue
        merges += [f"{a} {b}" if as_strings else [a, b] for a, b in added]
        for entry in entries:
            known.add(entry)
            model["vocab"][entry] = len(vocab) + len(new)
            new.append(word if entry == word.token else NewToken(entry, (), 0))
        if len(new) == limit:
            break
    return new


def _merge_tree(pieces: list[str], known: set[str], prefix: str) -> list[tuple[str, str]]:
    """The merges, children before parents, of the binary tree over `pieces` with the fewest inner nodes that are
    not in `known` (the root, their concatenation, is one); among equals, the one that merges from the left (with
    `known` empty: left to right, one piece at a time)."""
    text = {(i, i + 1): piece for i, piece in enumerate(pieces)}
    new_nodes, split = {(i, i + 1): 0 for i in range(len(pieces))}, {}
    for length in range(2, len(pieces) + 1):
        for i in range(len(pieces) - length + 1):
            j = i + length
            text[i, j] = _merged(text[i, j - 1], pieces[j - 1], prefix)
            split[i, j] = min(range(j - 1, i, -1), key=lambda m: new_nodes[i, m] + new_nodes[m, j])
            new_nodes[i, j] = new_nodes[i, split[i, j]] + new_nodes[split[i, j], j] + (text[i, j] not in known)
    merges: list[tuple[str, str]] = []

    def build(i: int, j: int) -> None:
        if j - i > 1:
            build(i, split[i, j])
            build(split[i, j], j)
            merges.append((text[i, split[i, j]], text[split[i, j], j]))
    build(0, len(pieces))
    return merges


def _merged(a: str, b: str, prefix: str) -> str:
    return a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)


def _apply_merges(pieces: list[str], ranks: dict[tuple[str, str], int], prefix: str) -> list[str]:
    """BPE's merging of `pieces`: the pair of the lowest rank first, leftmost among equals."""
    while len(pieces) > 1:
        found = min(((ranks[pair], i) for i, pair in enumerate(zip(pieces, pieces[1:])) if pair in ranks),
                    default=None)
        if found is None:
            break
        i = found[1]
        pieces[i:i + 2] = [_merged(pieces[i], pieces[i + 1], prefix)]
    return pieces
