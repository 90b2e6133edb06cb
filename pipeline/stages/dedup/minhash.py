"""MinHash signatures of a batch of documents, vectorised with numpy: text -> tokens -> hashed n-gram shingles ->
`bands * rows` minimum hashes -> one key per band.

- Normalisation (for shingles only): casefolded; punctuation, symbols and control characters are separators; a
  number (digits, with a decimal part after `.` or `,`) becomes `0`, as datatrove's `simplify_text` does.
- Tokens: runs of the other characters. In `characters` mode each letter of a script written without spaces
  (`pipeline.words`: Han, kana, Thai, ...) is a token of its own, so an n-gram is n such letters; the rest of the
  text still splits into words.
- A token's hash is the word hash of its code points (`pipeline.words.word_hashes`: a polynomial mod 2^64, as the
  filter's), summed per token with `np.add.reduceat` over the whole batch at once and then mixed (murmur3's
  fmix64); a shingle's hash mixes the hashes of its n tokens, each times its own odd constant. So every character
  is touched by a handful of array operations, never by Python, where datatrove calls xxhash once per shingle from
  Python.
- The k-th of the `bands * rows` hash functions is h_k(x) = a_k * x + b_k (mod 2^64), a_k odd: multiply-shift,
  Dietzfelbinger's universal family, on shingle hashes that are already mixed. Its minimum over a document's
  shingles (taken on all 64 bits; the top 32 are kept) is one signature value. That is one multiply, one add and
  one minimum a (shingle, function), with no modulo, where datatrove's (a x + b) mod (2^61 - 1) pays a 64-bit
  division for each; the minimum runs over all the batch's shingles at once (`np.minimum.reduceat`).
- A document with fewer tokens than n has one shingle of all its tokens; one without tokens has no signature.
- Band keys: each band's `rows` values hashed to 64 bits (with the band's number). Two documents land in the same
  bucket of a band when their keys are equal: all `rows` values agree (or, at 2^-64 a pair, a key collision, which
  the confirmation by estimated Jaccard rejects).
The hash constants come from blake2b of the seed, so signatures are the same on every machine and numpy version.
"""
from __future__ import annotations

import hashlib

import numpy as np

from pipeline.words import DECIMAL, TOKEN, UNSPACED, character_flags, word_hashes

DECIMAL_MARKS = (ord("."), ord(","))  # between two digits: part of the number
ZERO = ord("0")
SIGNATURE_CHUNK = 4096  # shingles hashed by all functions at once: (chunk x bands*rows) uint64 = 3.5 MiB at 112
U64 = np.uint64
FMIX_1, FMIX_2 = U64(0xFF51AFD7ED558CCD), U64(0xC4CEB9FE1A85EC53)


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser: every input bit flips each output bit with probability ~1/2."""
    x = x ^ (x >> U64(33))
    x *= FMIX_1
    x ^= x >> U64(33)
    x *= FMIX_2
    x ^= x >> U64(33)
    return x


def seeded_constants(seed: int, what: str, count: int, odd: bool = False) -> np.ndarray:
    """`count` uint64 constants derived from (seed, what) by blake2b: the same on every machine."""
    values = [int.from_bytes(hashlib.blake2b(f"{seed}:{what}:{i}".encode(), digest_size=8).digest(), "little")
              for i in range(count)]
    array = np.array(values, dtype=U64)
    return array | U64(1) if odd else array


class Shingler:
    """The shingles, signatures and band keys of documents under one setting; one per worker process."""

    def __init__(self, ngram: int, bands: int, rows: int, seed: int, characters: bool):
        self.ngram, self.bands, self.rows, self.characters = ngram, bands, rows, characters
        self.token_mult = seeded_constants(seed, "ngram", ngram, odd=True)
        self.a = seeded_constants(seed, "a", bands * rows, odd=True)
        self.b = seeded_constants(seed, "b", bands * rows)
        self.band_salt = seeded_constants(seed, "band", bands)
        self.row_mult = U64(seeded_constants(seed, "row", 1, odd=True)[0])

    def tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(hash of every token of the batch, in order; the document each belongs to)."""
        joined = "\n".join(texts).casefold()  # "\n": a separator, so no token spans two documents
        codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        flags = character_flags()[codes]
        digit = (flags & DECIMAL).astype(bool)
        if digit.any():  # 3.14 and 3,14 are one number
            digit[1:-1] |= np.isin(codes[1:-1], DECIMAL_MARKS) & digit[:-2] & digit[2:]
        in_token = (flags & TOKEN).astype(bool) | digit
        start = in_token.copy()
        start[1:] &= ~in_token[:-1]
        if self.characters:
            unspaced = (flags & UNSPACED).astype(bool)
            start[1:] |= in_token[1:] & (unspaced[1:] | unspaced[:-1])
        keep = in_token.copy()
        keep[1:] &= ~(digit[1:] & digit[:-1])  # a number is one character, 0
        starts = np.flatnonzero(start)
        if not len(starts):
            return np.zeros(0, dtype=U64), np.zeros(0, dtype=np.int64)
        kept = np.flatnonzero(keep)
        values = np.where(digit[kept], ZERO, codes[kept]).astype(U64)
        first = np.searchsorted(kept, starts)  # each token's first kept character (a start is kept)
        hashes = word_hashes(values, first)
        # casefolding can lengthen a text (ß -> ss): documents are told apart by their separators
        documents = np.searchsorted(np.flatnonzero(codes == ord("\n")), starts)
        return fmix64(hashes), documents

    def shingles(self, token_hashes: np.ndarray, token_docs: np.ndarray, documents: int
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(hash of every shingle, the document each belongs to, ascending): every run of `ngram` consecutive tokens
        of one document, or all of a shorter document's tokens."""
        n = self.ngram
        counts = np.bincount(token_docs, minlength=documents)
        first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        position = np.arange(len(token_hashes)) - first[token_docs]
        parts, docs = [], []
        if len(token_hashes) >= n:
            windows = np.lib.stride_tricks.sliding_window_view(token_hashes, n)
            whole = np.flatnonzero(token_docs[n - 1:] == token_docs[:len(token_docs) - n + 1])
            parts.append(fmix64((windows[whole] * self.token_mult).sum(axis=1, dtype=U64)))
            docs.append(token_docs[whole])
        short = np.flatnonzero((counts > 0) & (counts < n))
        if len(short):
            member = np.isin(token_docs, short)
            weighted = token_hashes[member] * self.token_mult[position[member]]
            parts.append(fmix64(np.add.reduceat(weighted, np.searchsorted(token_docs[member], short))))
            docs.append(short)
        if not parts:
            return np.zeros(0, dtype=U64), np.zeros(0, dtype=np.int64)
        hashes, docs_of = np.concatenate(parts), np.concatenate(docs)
        order = np.argsort(docs_of, kind="stable")
        return hashes[order], docs_of[order]

    def signatures(self, shingles: np.ndarray, shingle_docs: np.ndarray, documents: int) -> np.ndarray:
        """(documents, bands * rows) uint32: the top 32 bits of each hash function's minimum over the document's
        shingles (all ones for a document without shingles)."""
        best = np.full((documents, len(self.a)), np.iinfo(U64).max, dtype=U64)
        for lo in range(0, len(shingles), SIGNATURE_CHUNK):
            chunk, docs = shingles[lo:lo + SIGNATURE_CHUNK], shingle_docs[lo:lo + SIGNATURE_CHUNK]
            hashed = chunk[:, None] * self.a
            hashed += self.b
            runs = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
            rows = docs[runs]  # distinct within a chunk
            best[rows] = np.minimum(best[rows], np.minimum.reduceat(hashed, runs, axis=0))
        return (best >> U64(32)).astype(np.uint32)

    def token_counts(self, texts: list[str]) -> np.ndarray:
        """Tokens per document: the words (and letters of unspaced scripts, in characters mode) shingles are made of."""
        return np.bincount(self.tokens(texts)[1], minlength=len(texts))

    def batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(signatures, tokens per document) of a batch of documents (texts without "\\n"); a document without
        tokens has no shingles."""
        token_hashes, token_docs = self.tokens(texts)
        shingles, shingle_docs = self.shingles(token_hashes, token_docs, len(texts))
        return (self.signatures(shingles, shingle_docs, len(texts)),
                np.bincount(token_docs, minlength=len(texts)))

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        """(documents, bands) uint64 keys, the lowest bit 0 (1 marks the exact-text keys of the same buckets)."""
        values = signatures.reshape(len(signatures), self.bands, self.rows).astype(U64)
        keys = np.broadcast_to(self.band_salt, values.shape[:2]).copy()
        for row in range(self.rows):
            keys = fmix64((keys ^ values[:, :, row]) * self.row_mult)
        return keys & ~U64(1)


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The share of equal signature values: MinHash's estimate of the Jaccard similarity of the shingle sets."""
    return (a == b).mean(axis=-1)


def exact_key(text: str) -> int:
    """The key of a document's text up to whitespace and case, lowest bit 1 (band keys have it 0)."""
    normalised = " ".join(text.split()).casefold()
    digest = hashlib.blake2b(normalised.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") | 1
