"""The web rule set per language: FineWeb-2's figures in the profiles (checked against config files the tests write
with the same figures), filter.thresholds_from, generic thresholds with a warning, C4's line rules for English
only, and a changed threshold re-decided from the stored scores."""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import yaml

from pipeline.cli import _say_generic_web_thresholds
from pipeline.config import load_pipeline_config
from pipeline.runner import run_stage
from pipeline.stages import InputLabel
from pipeline.text_files import DocumentRecord, PARAGRAPHS, records_path, write_document, write_record
from wiki2bert_core.errors import ConfigError
from wiki2bert_core.files import read_json
from web_pages import DROPPED, PAGE, flat

STAGES_YAML = Path(__file__).resolve().parents[2] / "stages.yaml"
FINEWEB2 = {  # FineWeb-2's published figures (configs/<name>.yml, huggingface/fineweb-2 at d0defb2), as such a file
    "hun_Latn": {"dup_line_frac": 0.322, "top_n_grams": [[2, 0.226], [3, 0.198], [4, 0.172]],
                 "dup_n_grams": [[5, 0.169], [6, 0.159], [7, 0.148], [8, 0.136], [9, 0.124], [10, 0.112]],
                 "line_punct_thr": 0.067, "new_line_ratio": 0.231, "min_avg_word_length": 3,
                 "max_avg_word_length": 15, "max_non_alpha_words_ratio": 0.766, "language_score": 0.744,
                 "stopwords": ["a", "az", "és", "is", "egy", "volt", "hogy", "nem", "meg", "de", "magyar", "első",
                               "el", "között"]},
    "ell_Grek": {"dup_line_frac": 0.31, "top_n_grams": [[2, 0.194], [3, 0.175], [4, 0.156]],
                 "dup_n_grams": [[5, 0.174], [6, 0.163], [7, 0.153], [8, 0.142], [9, 0.13], [10, 0.119]],
                 "line_punct_thr": 0.167, "new_line_ratio": 0.116, "min_avg_word_length": 3,
                 "max_avg_word_length": 11, "max_non_alpha_words_ratio": 0.809, "language_score": 0.826,
                 "stopwords": ["του", "και", "το", "της", "η", "την", "από", "ο", "με", "τον", "να", "που", "των",
                               "στην", "για", "στο", "σε", "είναι", "τη", "τα", "οι"]},
    "jpn_Jpan": {"dup_line_frac": 0.328, "top_n_grams": [[2, 0.239], [3, 0.196], [4, 0.172]],
                 "dup_n_grams": [[5, 0.243], [6, 0.225], [7, 0.207], [8, 0.19], [9, 0.175], [10, 0.159]],
                 "line_punct_thr": 0.096, "new_line_ratio": 0.13, "min_avg_word_length": 1,
                 "max_avg_word_length": 6, "max_non_alpha_words_ratio": 0.759, "language_score": 0.886,
                 "stopwords": ["の", "に", "を", "は", "た", "て", "が", "と", "で", "年", "し", "・", "月", "れ", "さ"]},
}
THRESHOLDS = ("max_duplicate_line_share", "max_top_ngram_share", "max_duplicate_ngram_share",
              "min_line_punctuation_share", "max_newline_ratio", "min_mean_word_length", "max_mean_word_length",
              "min_alpha_word_share")


@pytest.fixture
def configs(tmp_path) -> Path:
    for name, figures in FINEWEB2.items():
        (tmp_path / f"{name}.yml").write_text(yaml.safe_dump(figures, allow_unicode=True), encoding="utf-8")
    return tmp_path


def web_thresholds(lang: str, overrides=()) -> dict:
    config = load_pipeline_config(STAGES_YAML, lang, list(overrides)).stage_configs["filter"]
    return {**{name: getattr(config.rule_sets["web"], name) for name in THRESHOLDS}, "stop_words": config.stop_words}


@pytest.mark.parametrize("lang", ["hu", "el", "ja"])
def test_profile_thresholds_are_fineweb2s_figures(configs, lang):
    name = {"hu": "hun_Latn", "el": "ell_Grek", "ja": "jpn_Jpan"}[lang]
    from_file = web_thresholds("ru", [f"filter.thresholds_from={configs / name}.yml"])
    profile = web_thresholds(lang)
    if lang == "ja":  # its words are letters here: no word-length bounds, its own one-letter stop words
        for name in ("min_mean_word_length", "max_mean_word_length", "stop_words"):
            from_file.pop(name), profile.pop(name)
    assert profile == from_file
    assert from_file != web_thresholds("ru")


def test_thresholds_from_a_folder_picks_the_language_and_set_still_wins(configs):
    thresholds = web_thresholds("el", [f"filter.thresholds_from={configs}",
                                       "filter.rule_sets.web.max_newline_ratio=0.5"])
    assert thresholds["max_duplicate_line_share"] == 0.31 and thresholds["max_newline_ratio"] == 0.5
    with pytest.raises(ConfigError, match=r"filter\.thresholds_from: .*: no FineWeb-2 config of language 'fi'"):
        web_thresholds("fi", [f"filter.thresholds_from={configs}"])
    (configs / "bad.yml").write_text("just: text\n")
    with pytest.raises(ConfigError, match=r"bad\.yml: not a FineWeb-2 filter config"):
        web_thresholds("fi", [f"filter.thresholds_from={configs / 'bad.yml'}"])


def test_a_language_without_figures_warns_of_generic_thresholds(tmp_path, caplog):
    values = {"corpus": {"sources": {"web": {"path": str(tmp_path)}}}}
    for lang, warned in (("ro", True), ("el", False)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            _say_generic_web_thresholds(load_pipeline_config(STAGES_YAML, lang, values=values),
                                        logging.getLogger("test"))
        assert ("no FineWeb-2 thresholds" in caplog.text) == warned


def test_c4_line_rules_are_off_outside_english_unless_set():
    def c4(lang, overrides=()):
        web = load_pipeline_config(STAGES_YAML, lang, list(overrides)).stage_configs["filter"].rule_sets["web"]
        return [getattr(web, f.name) for f in dataclasses.fields(web) if f.name.startswith("drop_")]

    assert c4("en") == [True] * 5
    for lang in ("hu", "el", "fi", "ro"):
        assert c4(lang) == [False] * 5
    assert c4("hu", ["filter.rule_sets.web.drop_lorem_ipsum=true"]) == [False, True, False, False, False]


def write_pages(directory: Path, pages: list) -> None:
    directory.mkdir(parents=True)
    text_path = directory / "part-00000.txt"
    with open(text_path, "w", encoding="utf-8") as f, open(records_path(text_path), "w", encoding="utf-8") as r:
        for n, page in enumerate(pages):
            sentences, paragraphs = flat(page)
            write_document(f, sentences)
            write_record(r, DocumentRecord("web", str(n), f"page {n}", {PARAGRAPHS: paragraphs}))


def run_filter(lang_dir: Path, overrides=()) -> dict:
    pcfg = load_pipeline_config(STAGES_YAML, "hu", ["filter.langid=none", *overrides])
    upstream = {InputLabel("sentences"): {"stage": "sentences", "config_hash": "x", "outputs": {}}}
    run_stage(pcfg, lang_dir, "filter", upstream, 1, True,
              logging.getLogger("test"))
    return {p.name: p.read_bytes() for p in sorted((lang_dir / "filter").glob("part-*"))}


def test_a_changed_threshold_is_decided_from_the_stored_scores_as_a_full_run_decides(tmp_path):
    pages = [PAGE, *DROPPED.values()]
    for name in ("again", "fresh"):
        write_pages(tmp_path / name / "sentences", pages)
    first = run_filter(tmp_path / "again")
    changed = ["filter.rule_sets.web.min_doc_words=10", "filter.rule_sets.web.min_alpha_word_share=0.5"]
    again = run_filter(tmp_path / "again", changed)
    assert read_json(tmp_path / "again" / "filter" / "report.json")["scores"] == "reused"
    fresh = run_filter(tmp_path / "fresh", changed)
    assert read_json(tmp_path / "fresh" / "filter" / "report.json")["scores"] == "measured"
    assert again == fresh and again != first
    run_filter(tmp_path / "again", [*changed, "filter.rule_sets.web.max_symbol_ratio=null"])  # a rule turned off
    assert read_json(tmp_path / "again" / "filter" / "report.json")["scores"] == "measured"
    run_filter(tmp_path / "again", changed)
    (tmp_path / "again" / "filter" / "scores" / "part-00000.npz").write_bytes(b"damaged")
    assert run_filter(tmp_path / "again", changed[:1]) == run_filter(tmp_path / "fresh", changed[:1])
    assert read_json(tmp_path / "again" / "filter" / "report.json")["scores"] == "measured"  # not the damaged ones


@pytest.mark.slow
def test_report_draws_each_rules_scores_with_its_threshold(tmp_path):
    from pipeline.runner import read_manifest
    from pipeline.tools.report import _filter_scores

    write_pages(tmp_path / "hu" / "sentences", [PAGE, *DROPPED.values()])
    run_filter(tmp_path / "hu")
    section = _filter_scores(tmp_path / "hu", read_manifest(tmp_path / "hu" / "filter"), tmp_path)
    assert "<img src='filter_scores_web.png'" in section
    assert (tmp_path / "filter_scores_web.png").read_bytes().startswith(b"\x89PNG")
