"""FineWeb-2's per-language filter configs (`configs/<iso 639-3>_<script>.yml` of huggingface/fineweb-2) as a layer
of the filter's settings (`filter.thresholds_from`): the `web` rule set's thresholds and the stop words.

A config's keys and the settings they set (what each measures: rules.py):
    dup_line_frac              rule_sets.web.max_duplicate_line_share
    top_n_grams                rule_sets.web.max_top_ngram_share ([[n, share], ...])
    dup_n_grams                rule_sets.web.max_duplicate_ngram_share
    line_punct_thr             rule_sets.web.min_line_punctuation_share
    new_line_ratio             rule_sets.web.max_newline_ratio
    min_avg_word_length        rule_sets.web.min_mean_word_length
    max_avg_word_length        rule_sets.web.max_mean_word_length
    max_non_alpha_words_ratio  rule_sets.web.min_alpha_word_share (the share of words with a letter, at least)
    stopwords                  stop_words
Its `language_score` is GlotLID's probability, on another scale than our identifier's: it is not read
(docs/pipeline.md, "Language score").
"""
from __future__ import annotations

from pathlib import Path

import yaml

from wiki2bert_core.errors import ConfigError

# our language code -> FineWeb-2's config name, for a folder of configs (a file is read whatever its name)
FINEWEB2_NAMES = {
    "hu": "hun_Latn", "el": "ell_Grek", "fi": "fin_Latn", "et": "ekk_Latn", "ja": "jpn_Jpan", "uk": "ukr_Cyrl",
    "vi": "vie_Latn", "hy": "hye_Armn", "ru": "rus_Cyrl", "de": "deu_Latn", "fr": "fra_Latn", "es": "spa_Latn",
    "it": "ita_Latn", "pt": "por_Latn", "nl": "nld_Latn", "pl": "pol_Latn", "cs": "ces_Latn", "sk": "slk_Latn",
    "sv": "swe_Latn", "da": "dan_Latn", "nb": "nob_Latn", "no": "nob_Latn", "ro": "ron_Latn", "bg": "bul_Cyrl",
    "hr": "hrv_Latn", "sr": "srp_Cyrl", "sl": "slv_Latn", "lt": "lit_Latn", "lv": "lvs_Latn", "tr": "tur_Latn",
    "ar": "arb_Arab", "fa": "pes_Arab", "he": "heb_Hebr", "hi": "hin_Deva", "bn": "ben_Beng", "th": "tha_Thai",
    "ko": "kor_Hang", "zh": "cmn_Hani", "id": "ind_Latn", "ms": "zsm_Latn", "ca": "cat_Latn", "eu": "eus_Latn",
    "ka": "kat_Geor", "is": "isl_Latn", "ga": "gle_Latn", "cy": "cym_Latn", "sw": "swh_Latn",
}
RULE_KEYS = {  # FineWeb-2's key -> the web rule set's field
    "dup_line_frac": "max_duplicate_line_share", "top_n_grams": "max_top_ngram_share",
    "dup_n_grams": "max_duplicate_ngram_share", "line_punct_thr": "min_line_punctuation_share",
    "new_line_ratio": "max_newline_ratio", "min_avg_word_length": "min_mean_word_length",
    "max_avg_word_length": "max_mean_word_length", "max_non_alpha_words_ratio": "min_alpha_word_share",
}


def config_file(path: Path, language: str) -> Path:
    """The FineWeb-2 config of `language` that `path` (a file, or a folder of them) gives; ConfigError if none."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise ConfigError(f"filter.thresholds_from: {path}: no such file or folder")
    name = FINEWEB2_NAMES.get(language)
    found = [path / f"{name}.yml"] if name else sorted(path.glob(f"{language}_*.yml"))
    if not found or not found[0].is_file():
        raise ConfigError(f"filter.thresholds_from: {path}: no FineWeb-2 config of language {language!r} in it "
                          f"(looked for {name + '.yml' if name else language + '_<script>.yml'}; name the file)")
    return found[0]


def threshold_layer(path: Path, language: str) -> tuple[dict, str]:
    """(the filter settings FineWeb-2's config of `language` at `path` gives, where they came from)."""
    file = config_file(Path(path), language)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"filter.thresholds_from: {file}: not a readable YAML file ({e})") from None
    if not isinstance(raw, dict) or not RULE_KEYS.keys() & raw.keys():
        raise ConfigError(f"filter.thresholds_from: {file}: not a FineWeb-2 filter config (none of "
                          f"{', '.join(RULE_KEYS)})")
    web = {}
    for key, field in RULE_KEYS.items():
        if key in raw:
            value = raw[key]
            if key.endswith("n_grams"):
                if not (isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value)):
                    raise ConfigError(f"filter.thresholds_from: {file}: {key}: expected [[n, share], ...]")
                value = {int(n): share for n, share in value}
            web[field] = value
    layer = {"rule_sets": {"web": web}}
    if isinstance(raw.get("stopwords"), list):
        layer["stop_words"] = [str(w) for w in raw["stopwords"]]
    return layer, f"filter.thresholds_from {file}"
