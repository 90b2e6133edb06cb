"""Languages mixed by size^alpha, the one formula: the pipeline's vocabulary sample and shards of a run of several
languages, and a pretraining phase's own mixture over the same files, all use `language_shares`.

Language l of size n_l (its tokens, each document once) and weight w_l (1 unless set) makes

    share_l = w_l * n_l ** alpha / sum_k (w_k * n_k ** alpha)

of the mix: alpha 1 keeps the languages' natural proportions, alpha 0 gives every language the same share, and
between them small languages are upsampled and large ones subsampled (XLM-R's alpha 0.3, Conneau et al. 2020;
mmBERT anneals it from 0.7 to 0.3 over its phases). A weight 0 leaves a language out; a language of size 0 gets
no share.
"""
from __future__ import annotations

import math
from typing import Mapping

from wiki2bert_core.config import SettingError

DEFAULT_ALPHA = 0.3  # XLM-R's


def check_alpha(alpha: float, key: str = "alpha") -> None:
    """SettingError unless alpha is a finite number of at least 0."""
    if not (math.isfinite(alpha) and alpha >= 0):
        raise SettingError(key, f"must be a number of at least 0 (1: the languages' own sizes, 0: equal shares), "
                                f"got {alpha}")


def check_weights(weights: Mapping[str, float], key: str = "language_weights") -> None:
    """SettingError for a weight (of a language, or of a source: the shard stage's `weights`) that is not a finite
    number of at least 0."""
    for name, weight in weights.items():
        if not (math.isfinite(weight) and weight >= 0):
            raise SettingError(f"{key}.{name}", f"must be a number of at least 0, got {weight}")


def language_shares(sizes: Mapping[str, float], alpha: float,
                    weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each language's share of the mix (the module's formula), in the order of `sizes`; all 0 when no language has
    both a size and a weight."""
    weights = weights or {}
    scores = {language: weights.get(language, 1.0) * (size ** alpha if size > 0 else 0.0)
              for language, size in sizes.items()}
    total = sum(scores.values())
    return {language: score / total if total else 0.0 for language, score in scores.items()}


def rates(sizes: Mapping[str, float], shares: Mapping[str, float], total: float) -> dict[str, float]:
    """How many times each language's text is taken so that a mix of `total` holds `shares`: share * total / size
    (0 for a language of size 0)."""
    return {language: shares[language] * total / size if size > 0 else 0.0 for language, size in sizes.items()}
