"""A variant directory of several languages, as the hdf5 stage of `pipeline run --lang fi,hu` writes it, made up for
the pretraining tests of a phase's own mixture."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from wiki2bert_core.mixture import language_shares
from wiki2bert_core.variant_dir import LanguageShare, Mixture, VariantParams, write_variant_files

VOCAB_SIZE = 60
SIZES = {"fi": 3_000, "hu": 30_000}  # each language's tokens, each document once
FILES = {"fi": [15, 13], "hu": [40, 35, 38]}  # rows of each training file; the pipeline's alpha 0.3 mix
SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


def write_language_variant(variant: Path, vocab_dir: Path, write_hdf5: Callable, files=FILES) -> Path:
    """`variant` with training files of `files`' rows for each language (and a test file each), variant.json
    recording the languages' masked tokens and SIZES' mixture, and the vocabulary of `vocab_dir` (conftest's
    write_vocab_dir, write_hdf5)."""
    languages, seed = {}, 0
    for language, rows in files.items():
        masked = {"training": 0, "test": 0}
        for split, sizes in (("training", rows), ("test", [30 if language == "fi" else 50])):
            for i, n in enumerate(sizes):
                seed += 1
                arrays = write_hdf5(variant / split / f"{split}_{language}_{i:04d}.hdf5", n, seed=seed)
                masked[split] += int(np.count_nonzero(arrays["masked_lm_positions"]))
        languages[language] = {"training_instances": sum(rows), "training_masked_tokens": masked["training"],
                               "test_instances": 0, "test_masked_tokens": masked["test"]}
    shares = language_shares({k: v["training_masked_tokens"] for k, v in languages.items()}, 1.0)
    mixture = Mixture(0.3, {}, {lang: LanguageShare(SIZES[lang], 0, shares[lang]) for lang in SIZES})
    params = VariantParams(32, 5, 0.15, 5, 0.1, 12345, False, False, VOCAB_SIZE, SPECIAL_IDS, mixture=mixture)
    write_variant_files(variant, vocab_dir, params, {"languages": languages})
    return variant
