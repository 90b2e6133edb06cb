"""Stage `filter`: each TurkuNLP rule triggered by a crafted document (and in order), each web rule by a crafted page
(and a clean page kept), rule sets by source, long documents cut into pieces (or dropped, TurkuNLP's behaviour, byte
for byte as before), language identification, report.json, determinism across workers, bad
input."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import DEFAULT_CONFIG_PATH, load_pipeline_config
from wiki2bert_core.errors import ConfigError, DataError
from pipeline.text_files import (PARAGRAPHS, WIKIPEDIA_SOURCE, DocumentRecord, iter_documents, iter_records,
                                 records_path, write_document, write_record)
from pipeline.runner import run_stage
from pipeline.stages import InputLabel
from pipeline.stages.filter.rules import CODE, REASONS, DocumentChecker, RuleSet, piece_starts
from pipeline.stages.filter.stage import WEB_RULES, FilterConfig, run
from pipeline.words import UNSPACED_LETTER, count_words
from unspaced_text import GARBAGE_JA, GARBAGE_REASONS, GARBAGE_ZH, JA, ZH, unspaced
from web_pages import DROPPED, DROPPED_LINES, NAVIGATION, PAGE, flat

HU = "abcdefghijklmnopqrstuvwxyzáéíóöúüőű"
GOOD = [  # 5 sentences, 58 words of plain Hungarian prose
    "A kis falu a folyó partján fekszik, és sok régi ház található benne.",
    "A lakosok többsége a mezőgazdaságból él, de egyre többen dolgoznak a közeli városban.",
    "A templomot a tizennyolcadik században építették, és azóta többször felújították.",
    "Nyáron sok turista érkezik, akik a környék erdeiben és a hegyekben kirándulnak.",
    "Az iskolában körülbelül száz gyerek tanul, a tanárok nagy része helyi lakos.",
]
ENGLISH = [
    "The small village lies on the bank of the river, and many old houses can be found there.",
    "Most of the people living there work in farming, but more of them commute to the nearby town.",
    "The church was built in the eighteenth century and has been restored several times since then.",
    "In summer many tourists arrive to walk in the forests and the hills around the village.",
]


def tokens(sentences: list[str]) -> int:
    return sum(len(s.split()) for s in sentences)


def suffixed(suffix: str) -> list[str]:
    return [s[:-1] + suffix for s in GOOD]


# reason -> a document that passes every earlier check and fails this one
CRAFTED = {
    "avg_words": ["Igen."] * 10,
    "min_sentences": GOOD[:2],
    "max_sentences": ["Ez egy rövid magyar mondat."] * 1001,
    "min_tokens": ["Ez egy nagyon jó mondat.", "Az is egy másik mondat.", "Ez lesz majd a harmadik mondat."],
    "max_tokens": [GOOD[1]] * 900,
    "no_word_ratio": GOOD + ["12 34 56 78.", "90 12 34 56."],
    "punct_ratio": suffixed(" (!), [?]; ..."),
    "upper_ratio": suffixed(" NATO ENSZ USA."),
    "digit_ratio": suffixed(" 1234567890."),
    "foreign_ratio": suffixed(" ñandú çççç."),
    "min_words": ["Ez itt egy kicsit hosszabb mondat.", "A második mondat is ilyen hosszú.",
                  "Harmadik mondat lesz ez itt.", "Negyedik mondat is van itt."],
    "language": ENGLISH,
}


TURKU = RuleSet()  # TurkuNLP's rules: the `wikipedia` set


def turku_checker(**settings) -> DocumentChecker:
    """A checker with TurkuNLP's behaviour: long documents dropped."""
    return DocumentChecker(FilterConfig(**{"word_chars": HU, "long_documents": "drop", **settings}), "hu",
                           check_language=True)


def reason(checker: DocumentChecker, sentences: list[str], rules: RuleSet = TURKU) -> int:
    return checker.judge(sentences, rules).code


@pytest.fixture(scope="module")
def checker():
    return turku_checker()


def test_good_document_passes(checker):
    assert reason(checker, GOOD) == 0


@pytest.mark.parametrize("rule", list(CRAFTED))
def test_each_rule_is_the_reason_of_its_crafted_document(checker, rule):
    assert REASONS[reason(checker, CRAFTED[rule]) - 1] == rule


def test_first_failing_check_is_the_reason(checker):
    # too few sentences and too many digits: min_sentences comes first
    assert REASONS[reason(checker, CRAFTED["digit_ratio"][:2]) - 1] == "min_sentences"


def test_null_threshold_turns_a_check_off(checker):
    assert reason(checker, CRAFTED["digit_ratio"], RuleSet(max_digit_ratio=None)) == 0


def test_without_word_chars_any_letter_makes_a_word_and_foreign_check_is_off():
    checker = DocumentChecker(FilterConfig(), "hu", check_language=False)
    assert reason(checker, CRAFTED["foreign_ratio"]) == 0
    assert reason(checker, ["Привет, это довольно длинное предложение на русском языке здесь."] * 5) == 0


def test_langdetect_is_one_config_value_away():
    checker = turku_checker(langid="langdetect")
    assert reason(checker, GOOD) == 0
    assert REASONS[reason(checker, ENGLISH) - 1] == "language"


# --- languages written without spaces ------------------------------------------------------------------------------

STAGES_YAML = Path(__file__).resolve().parents[2] / "stages.yaml"


def profile_reason(lang: str):
    """reason(sentences) by the Wikipedia rules of `lang`'s profile."""
    config = load_pipeline_config(STAGES_YAML, lang).stage_configs["filter"]
    checker = DocumentChecker(config, lang, check_language=True)
    return lambda sentences: checker.judge(sentences, config.rule_sets["wikipedia"]).code


def reason_name(code: int) -> str:
    return "kept" if code == 0 else REASONS[code - 1]


@pytest.mark.parametrize("lang,documents", [("ja", JA), ("zh", ZH)])
def test_unspaced_prose_is_kept_with_its_profile(lang, documents):
    reason_of = profile_reason(lang)
    assert {title: reason_name(reason_of(unspaced(s))) for title, s in documents.items()} == {
        title: "kept" for title in documents}


@pytest.mark.parametrize("lang,documents", [("ja", GARBAGE_JA), ("zh", GARBAGE_ZH)])
def test_unspaced_garbage_is_still_dropped_with_its_profile(lang, documents):
    reason_of = profile_reason(lang)
    assert {title: reason_name(reason_of(s if title in ("English", "日本語") else unspaced(s)))
            for title, s in documents.items()} == {title: GARBAGE_REASONS[title] for title in documents}


WEB_GARBAGE_REASONS = {  # lists repeat their letters, tables of dates have lines without 。, the other language has
    # too few letters of the script or none of the stop words
    "都道府県の一覧": "line_punctuation", "省份列表": "line_punctuation", "年表": "line_punctuation",
    "小さな記事": "top_ngram", "小条目": "top_ngram", "統計": "duplicate_lines", "统计": "duplicate_lines",
    "English": "doc_words", "日本語": "stop_words"}


@pytest.mark.parametrize("lang,prose,garbage", [("ja", JA, GARBAGE_JA), ("zh", ZH, GARBAGE_ZH)])
def test_unspaced_prose_is_kept_and_garbage_dropped_by_the_web_set_of_its_profile(lang, prose, garbage):
    """The web rules see each letter as a word: n-grams of letters, one-letter stop words."""
    config = load_pipeline_config(STAGES_YAML, lang).stage_configs["filter"]
    checker = DocumentChecker(config, lang, check_language=True)
    verdicts = {title: reason_name(checker.judge(s if title in ("English", "日本語") else unspaced(s),
                                                 config.rule_sets["web"]).code)
                for title, s in {**prose, **garbage}.items()}
    assert verdicts == {**{title: "kept" for title in prose}, **{title: WEB_GARBAGE_REASONS[title] for title in garbage}}


@pytest.mark.parametrize("lang,documents", [("ja", JA), ("zh", ZH)])
def test_profile_chars_per_word_is_the_word_length_of_a_hand_segmentation(lang, documents):
    chars_per_word = load_pipeline_config(STAGES_YAML, lang).stage_configs["filter"].chars_per_word
    words = [w for sentences in documents.values() for s in sentences for w in s.split() if UNSPACED_LETTER.search(w)]
    assert chars_per_word == pytest.approx(sum(len(UNSPACED_LETTER.findall(w)) for w in words) / len(words), abs=0.05)


def test_counting_unspaced_scripts_leaves_spaced_text_decisions_alone(checker):
    """With chars_per_word set, text without letters of unspaced scripts is counted exactly as TurkuNLP counts it."""
    unspaced_checker = turku_checker(chars_per_word=1.7)
    for document in [GOOD, ENGLISH, *CRAFTED.values()]:
        assert reason(unspaced_checker, document) == reason(checker, document)


def test_chars_per_word_must_be_positive():
    with pytest.raises(ConfigError, match=r"--set filter.chars_per_word=0: filter\.chars_per_word: must be positive"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["filter.chars_per_word=0"])


@pytest.mark.parametrize("lang,documents", [("ja", JA), ("zh", ZH)])
def test_unspaced_words_are_counted_as_a_segmenter_counts_them(lang, documents):
    """Punctuation marks beside letters of unspaced scripts (、。「」) are no words: the count is the hand
    segmentation's words, punctuation left out, within 2% (each mark counted as a word, it was 1.13x)."""
    chars_per_word = load_pipeline_config(STAGES_YAML, lang).stage_configs["filter"].chars_per_word
    segmented = [s for sentences in documents.values() for s in sentences]
    words = sum(1 for s in segmented for w in s.split() if any(c.isalnum() for c in w))
    assert sum(count_words(s, chars_per_word) for s in unspaced(segmented)) == pytest.approx(words, rel=0.02)


# --- web rules ---------------------------------------------------------------------------------------------------

HU_STOP_WORDS = load_pipeline_config(STAGES_YAML, "hu").stage_configs["filter"].stop_words
RULE_OFF = {  # rule -> the setting of the web set that turns it off
    "duplicate_paragraphs": {"max_duplicate_paragraph_share": None},
    "duplicate_paragraph_chars": {"max_duplicate_paragraph_char_share": None},
    "duplicate_lines": {"max_duplicate_line_share": None},
    "duplicate_line_chars": {"max_duplicate_line_char_share": None},
    "top_ngram": {"max_top_ngram_share": {}},
    "duplicate_ngrams": {"max_duplicate_ngram_share": {}},
    "no_terminal_punctuation": {"drop_lines_without_terminal_punctuation": False},
    "lorem_ipsum": {"drop_lorem_ipsum": False},
    "javascript": {"drop_javascript_lines": False},
    "curly_bracket": {"drop_curly_bracket": False},
    "policy": {"drop_policy_lines": False},
    "line_punctuation": {"min_line_punctuation_share": None},
    "newline_ratio": {"max_newline_ratio": None},
    "doc_words": {"min_doc_words": None},
    "mean_word_length": {"min_mean_word_length": None},
    "symbol_ratio": {"max_symbol_ratio": None},
    "bullet_lines": {"max_bullet_line_share": None},
    "ellipsis_lines": {"max_ellipsis_line_share": None},
    "alpha_words": {"min_alpha_word_share": None},
    "stop_words": {"min_stop_words": None},
    "language_score": {"min_language_score": None},
}
ALSO = {  # a rule's crafted page -> the earlier rule it trips too, off for the test
    "no_terminal_punctuation": {"min_line_punctuation_share": None},
    "ellipsis_lines": {"drop_lines_without_terminal_punctuation": False},
}
C4_LINE_RULES = {"drop_lines_without_terminal_punctuation": True, "drop_lorem_ipsum": True,
                 "drop_javascript_lines": True, "drop_curly_bracket": True, "drop_policy_lines": True}
C4_WEB = {"wikipedia": RuleSet(), "web": dataclasses.replace(WEB_RULES, **C4_LINE_RULES)}  # the web set as in English
EVERY_RULE = {  # Gopher's paragraph rules and C4's line rules, off in the Hungarian profile, on for these tests
    "max_duplicate_paragraph_share": 0.3, "max_duplicate_paragraph_char_share": 0.2,
    "max_duplicate_line_char_share": 0.2, "drop_lines_without_terminal_punctuation": True, "drop_lorem_ipsum": True,
    "drop_javascript_lines": True, "drop_curly_bracket": True, "drop_policy_lines": True}


@pytest.fixture(scope="module")
def web():
    """(checker, rules) of the Hungarian profile's web set with every rule on."""
    config = load_pipeline_config(STAGES_YAML, "hu").stage_configs["filter"]
    return DocumentChecker(config, "hu", check_language=True), dataclasses.replace(config.rule_sets["web"],
                                                                                   **EVERY_RULE)


def judge_page(web, page, **changes):
    checker, rules = web
    sentences, paragraphs = flat(page)
    return checker.judge(sentences, dataclasses.replace(rules, **changes), paragraphs)


def test_every_web_rule_has_a_crafted_page_and_a_switch():
    assert set(DROPPED) | set(DROPPED_LINES) == set(RULE_OFF)
    assert set(RULE_OFF) == set(REASONS[:REASONS.index("avg_words")]) | set(
        REASONS[REASONS.index("doc_words"):]) - {"language"}


def test_clean_web_page_is_kept_whole(web):
    verdict = judge_page(web, PAGE)
    assert (verdict.code, verdict.sentence_codes, verdict.starts) == (0, None, [0])


@pytest.mark.parametrize("rule", list(DROPPED))
def test_each_web_rule_drops_its_crafted_page_and_only_it(web, rule):
    assert reason_name(judge_page(web, DROPPED[rule], **ALSO.get(rule, {})).code) == rule
    assert reason_name(judge_page(web, DROPPED[rule], **ALSO.get(rule, {}), **RULE_OFF[rule]).code) != rule


@pytest.mark.parametrize("rule", list(DROPPED_LINES))
def test_each_line_rule_drops_its_line_and_keeps_the_page(web, rule):
    page, line = DROPPED_LINES[rule]
    verdict = judge_page(web, page)
    assert verdict.code == 0
    assert {i: reason_name(c) for i, c in enumerate(verdict.sentence_codes) if c} == {line: rule}
    assert judge_page(web, page, **RULE_OFF[rule]).sentence_codes is None


def test_document_without_paragraphs_has_a_line_a_sentence(web):
    """The dump's documents carry no PARAGRAPHS: the line rules see each sentence as a line."""
    checker, rules = web
    sentences, _ = flat([NAVIGATION] + PAGE)
    verdict = checker.judge(sentences, rules)
    assert verdict.code == 0 and [reason_name(c) for c in verdict.sentence_codes[:2]] == [
        "no_terminal_punctuation", "kept"]


def test_web_thresholds_are_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"filter\.rule_sets\.web\.max_top_ngram_share\.1: n must be"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["filter.rule_sets.web.max_top_ngram_share.1=0.5"])
    with pytest.raises(ConfigError, match=r"filter\.rule_sets\.web\.max_duplicate_line_share: 1\.5 is not between"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["filter.rule_sets.web.max_duplicate_line_share=1.5"])


# --- long documents ----------------------------------------------------------------------------------------------

SUBJECTS = ["A falu lakói", "A városi tanács", "A helyi iskola", "A templom papja", "Egy idegen kereskedő",
            "A malom gazdája", "A vasutasok", "A tanító felesége"]
VERBS = ["új hidat építettek", "nagy ünnepséget tartottak", "levelet írtak a királynak", "kertet ültettek",
         "könyvtárat nyitottak", "vásárt rendeztek", "utat javítottak", "kórust alapítottak"]
PLACES = ["a folyó partján", "a főtéren", "a hegy lábánál", "az erdő szélén", "a piac mellett", "a régi kútnál"]


def long_article(sentences: int) -> list[str]:
    """Hungarian prose of distinct sentences, 14 to 16 words each, as long as asked."""
    return [f"A {1000 + i}. évben {SUBJECTS[i % 8].lower()} {VERBS[i // 8 % 8]} {PLACES[i // 64 % 6]}, "
            f"és erről sokáig beszéltek a környéken élők." for i in range(sentences)]


def parity_parts() -> list[list[tuple[str, list[str]]]]:
    """corpus() and documents over TurkuNLP's caps: what the TurkuNLP setting must filter as before."""
    return corpus() + [[("Hosszú cikk", long_article(830)), ("Sok mondat", CRAFTED["max_sentences"]),
                        ("Sok szó", CRAFTED["max_tokens"]), ("Falu 4", variant(4))]]


def test_turkunlp_setting_writes_what_the_filter_wrote_before_pieces_existed(tmp_path, make_ctx):
    """long_documents: drop gives the bytes of the filter at commit c78ed30 (before rule sets and pieces; exact
    duplicates already the dedup stage's), long documents dropped whole; the default cuts them instead."""
    before = "b48912ee824453a11cd9ca86722e1a1556a08033d4c2c5f668ef0b15e9533821"
    sentences_dir = write_parts(tmp_path / "sentences", parity_parts())
    digests = {}
    for mode in ("drop", "split"):
        ctx = make_ctx(tmp_path, sentences_dir, name=mode)
        run(FilterConfig(word_chars=HU, long_documents=mode), ctx)
        digest = hashlib.sha256()
        for path in sorted(ctx.out_dir.glob("part-*")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        digests[mode] = digest.hexdigest()
    assert digests["drop"] == before
    assert digests["split"] != before


def test_a_15000_word_article_is_kept_whole_as_pieces_under_the_caps(tmp_path, make_ctx):
    article = long_article(830)
    assert sum(map(len, (s.split() for s in article))) > 15000
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[("Hosszú cikk", article), ("Falu", GOOD)]]))
    counts = run(FilterConfig(word_chars=HU), ctx)
    assert counts["documents_kept"] == 2 and counts["documents_written"] == 3
    pieces = list(iter_documents(ctx.out_dir / "part-00000.txt"))
    assert [s for piece in pieces[:2] for s in piece] == article and pieces[2] == GOOD
    assert all(sum(len(s.split()) for s in piece) <= 10000 for piece in pieces)
    records = list(iter_records(ctx.out_dir / "part-00000.txt"))
    assert [(r.source, r.id, r.title, r.extra) for r in records] == [
        ("wikipedia", "0", "Hosszú cikk", {"piece": 1}), ("wikipedia", "0", "Hosszú cikk", {"piece": 2}),
        ("wikipedia", "1", "Falu", {})]
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["long_documents"] == {"mode": "split", "documents_cut": 1, "pieces": 2}
    assert report["sentences"] == {"in": 835, "kept": 835, "dropped": 0}


def test_drop_setting_drops_the_long_article(tmp_path, make_ctx):
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[("Hosszú cikk", long_article(830)),
                                                                    ("Falu", GOOD)]]))
    counts = run(FilterConfig(word_chars=HU, long_documents="drop"), ctx)
    assert counts["documents_written"] == 1 and counts["dropped_max_tokens"] == 1


def test_pieces_are_even_and_under_both_caps():
    assert piece_starts(np.full(25, 10.0), 100, None) == [0, 8, 17]  # 3 pieces of 80-90 tokens, not 100 + 100 + 50
    assert piece_starts(np.full(2500, 1.0), None, 1000) == [0, 833, 1667]
    assert piece_starts(np.full(10, 10.0), 100, 1000) == [0]
    uneven = np.array([90.0, 5, 5, 90, 5, 5])
    starts = piece_starts(uneven, 100, None)
    bounds = starts + [len(uneven)]
    assert all(uneven[a:b].sum() <= 100 for a, b in zip(bounds, bounds[1:])) and len(starts) == 2


def test_a_sentence_over_the_token_cap_alone_is_dropped_and_the_rest_kept(tmp_path, make_ctx):
    giant = " ".join(["szó"] * 10001) + "."
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[("Falu", GOOD[:2] + [giant] + GOOD[2:])]]))
    run(FilterConfig(word_chars=HU), ctx)
    assert list(iter_documents(ctx.out_dir / "part-00000.txt")) == [GOOD]
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in report["dropped"]["max_tokens"].items() if k != "examples"} == {
        "documents": 0, "sentences": 1, "tokens": 10001}


# --- the stage ----------------------------------------------------------------------------------

def write_parts(directory: Path, parts: list[list[tuple]], titles: bool = True) -> Path:
    """The sentences stage's output: document text and its records (titles left empty where `titles` is false). A
    document is (title, sentences) from the dump, or (title, sentences, source, PARAGRAPHS)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, docs in enumerate(parts):
        text_path = directory / f"part-{i:05d}.txt"
        with open(text_path, "w", encoding="utf-8") as f, open(records_path(text_path), "w", encoding="utf-8") as r:
            for n, (title, sentences, *where) in enumerate(docs):
                source, paragraphs = where or (WIKIPEDIA_SOURCE, None)
                write_document(f, sentences)
                write_record(r, DocumentRecord(source, str(n), title if titles else "",
                                               {} if paragraphs is None else {PARAGRAPHS: paragraphs}))
    return directory


def web_document(title: str, page, source: str = "web") -> tuple:
    sentences, paragraphs = flat(page)
    return title, sentences, source, paragraphs


@pytest.fixture(scope="session")
def make_ctx(stage_context):
    def make_ctx(tmp_path: Path, sentences_dir: Path, workers: int = 1, lang: str = "hu", name: str = "out"):
        return stage_context(tmp_path, {"sentences": sentences_dir}, name, lang, workers)
    return make_ctx


def variant(i: int) -> list[str]:
    return [s.replace("kis falu", f"{i}. falu") for s in GOOD]


def corpus() -> list[list[tuple[str, list[str]]]]:
    return [
        [("Falu", GOOD), ("Rövid", CRAFTED["min_sentences"]), ("Angol", ENGLISH), ("Falu 1", variant(1))],
        [("Számok", CRAFTED["digit_ratio"]), ("Falu másolat", [s.upper().lower() for s in GOOD]),
         ("Falu 2", variant(2)), ("Falu 1 újra", ["  " + s for s in variant(1)])],
        [],
        [("Falu 3", variant(3)), ("Falu másolat 2", GOOD), ("Igen", CRAFTED["avg_words"]), ("Falu 3 újra", variant(3))],
    ]


def test_stage_keeps_good_documents_and_their_copies_and_reports(tmp_path, make_ctx):
    """Copies stay: duplicates are the dedup stage's."""
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", corpus()))
    counts = run(FilterConfig(word_chars=HU), ctx)
    assert counts == {"documents_in": 12, "documents_kept": 8, "documents_written": 8, "sentences_kept": 40,
                      "dropped_avg_words": 1, "dropped_min_sentences": 1, "dropped_digit_ratio": 1,
                      "dropped_language": 1, "sources": {"wikipedia": {"documents_kept": 8, "documents_written": 8}}}
    kept = [doc for i in range(4) for doc in iter_documents(ctx.out_dir / f"part-{i:05d}.txt")]
    assert kept == [GOOD, variant(1), [s.upper().lower() for s in GOOD], variant(2), variant(1), variant(3), GOOD,
                    variant(3)]
    assert (ctx.out_dir / "part-00002.txt").read_text() == ""
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["documents"] == {"in": 12, "kept": 8, "dropped": 4, "written": 8}
    assert report["sentences"] == {"in": 20 + 2 + 4 + 5 + 20 + 10, "kept": 40, "dropped": 21}
    all_tokens = sum(tokens(doc) for part in corpus() for _, doc in part)
    assert report["tokens"] == {"in": all_tokens, "kept": sum(tokens(d) for d in kept),
                                "dropped": all_tokens - sum(tokens(d) for d in kept)}
    assert list(report["dropped"]) == ["avg_words", "min_sentences", "digit_ratio", "language"]
    [example] = report["dropped"]["language"]["examples"]
    assert example["document"] == "Angol"
    assert example["text"].startswith(ENGLISH[0][:100]) and example["text"].endswith(ENGLISH[-1][-50:])
    assert report["language_check"] == "py3langid: hu"
    assert report["sources"] == {"wikipedia": {"rule_set": "wikipedia", **{
        key: value for key, value in report.items() if key in ("documents", "sentences", "tokens", "dropped")}}}
    assert report["long_documents"] == {"mode": "split", "documents_cut": 0, "pieces": 0}


def test_examples_are_limited_and_name_untitled_documents_by_source_and_id(tmp_path, make_ctx):
    docs = [(f"Rövid {i}", CRAFTED["min_sentences"]) for i in range(4)] + [("Falu", GOOD)]
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [docs], titles=False))
    run(FilterConfig(word_chars=HU, examples=2), ctx)
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["dropped"]["min_sentences"] == {
        "documents": 4, "sentences": 8, "tokens": 4 * tokens(GOOD[:2]),
        "examples": [{"document": f"wikipedia {i}", "text": " ".join(GOOD[:2])} for i in range(2)]}


def test_output_identical_for_one_and_two_workers(tmp_path, make_ctx):
    """Web pages (lines dropped) and a long article (cut into pieces) included."""
    parts = corpus() + [[web_document("Pékség", [NAVIGATION] + PAGE), ("Hosszú cikk", long_article(830))],
                        [web_document(rule, page) for rule, page in DROPPED.items()]]
    sentences_dir = write_parts(tmp_path / "sentences", parts)
    outputs = []
    for workers in (1, 2):
        ctx = make_ctx(tmp_path, sentences_dir, workers=workers, name=f"out{workers}")
        run(FilterConfig(word_chars=HU, stop_words=HU_STOP_WORDS, rule_sets=C4_WEB), ctx)
        outputs.append({str(p.relative_to(ctx.out_dir)): p.read_bytes() for p in sorted(ctx.out_dir.rglob("*"))
                        if p.is_file()})
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0]["report.json"])["long_documents"]["documents_cut"] == 1


def test_langid_none_keeps_other_languages(tmp_path, make_ctx):
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", corpus()))
    assert run(FilterConfig(word_chars=HU, langid="none"), ctx)["documents_kept"] == 9
    assert json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))["language_check"] == "off"


def test_language_unknown_to_identifier_skips_the_check_with_a_note(tmp_path, caplog, make_ctx):
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[("Falu", GOOD), ("Angol", ENGLISH)]]), lang="fat")
    with caplog.at_level(logging.WARNING, logger="wiki2bert"):
        counts = run(FilterConfig(), ctx)
    assert counts["documents_kept"] == 2
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["language_check"].startswith("skipped: py3langid does not know the language code 'fat'")
    assert caplog.text.count("does not know the language code 'fat'") == 1


def test_non_utf8_part_names_file_and_line(tmp_path, make_ctx):
    sentences_dir = write_parts(tmp_path / "sentences", [[("Falu", GOOD)]])
    with open(sentences_dir / "part-00000.txt", "ab") as f:
        f.write(b"J\xf3 mondat.\n\n")
    with pytest.raises(DataError, match=r"part-00000\.txt: line 7: not UTF-8"):
        run(FilterConfig(word_chars=HU), make_ctx(tmp_path, sentences_dir))


@pytest.mark.parametrize("parts", [[], [[]]], ids=["no-parts", "empty-part"])
def test_empty_input_is_an_error(tmp_path, parts, make_ctx):
    with pytest.raises(DataError, match="sentences"):
        run(FilterConfig(), make_ctx(tmp_path, write_parts(tmp_path / "sentences", parts)))


def test_everything_dropped_is_an_error_with_the_reasons(tmp_path, make_ctx):
    sentences_dir = write_parts(tmp_path / "sentences", [[("Angol", ENGLISH), ("Rövid", GOOD[:2])]])
    with pytest.raises(DataError, match=r"^filter: all 2 documents of language hu were dropped \(min_sentences 1, "
                                        r"language 1\): check --lang"):
        run(FilterConfig(word_chars=HU), make_ctx(tmp_path, sentences_dir))


def test_runs_in_the_chain_with_the_hungarian_profile(tmp_path):
    lang_dir = tmp_path / "hu"
    write_parts(lang_dir / "sentences", [[("Falu", GOOD), ("Angol", ENGLISH), ("Idegen", CRAFTED["foreign_ratio"])]])
    pcfg = load_pipeline_config(Path(__file__).resolve().parents[2] / "stages.yaml", "hu")
    manifest = run_stage(pcfg, lang_dir, "filter", {InputLabel("sentences"): {"stage": "sentences", "config_hash": "x",
                                                                              "outputs": {}}}, 2, True, logging.getLogger("wiki2bert"))
    assert manifest["config"]["word_chars"] == HU
    assert manifest["counts"] == {"documents_in": 3, "documents_kept": 1, "documents_written": 1, "sentences_kept": 5,
                                  "dropped_foreign_ratio": 1, "dropped_language": 1,
                                  "sources": {"wikipedia": {"documents_kept": 1, "documents_written": 1}}}
    assert set(manifest["outputs"]) == {"part-00000.txt", "part-00000.docs.jsonl", "report.json",
                                        "scores/part-00000.npz", "scores/key.json"}


# --- sources and rule sets ---------------------------------------------------------------------------------------

def test_each_source_gets_its_rule_set_and_the_report_shows_each(tmp_path, make_ctx):
    page = [NAVIGATION] + PAGE
    parts = [[("Pékség", flat(page)[0]), web_document("Pékség", page), web_document("Olcsó", DROPPED["top_ngram"]),
              web_document("Hírek", DROPPED["lorem_ipsum"], source="hirek")]]
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", parts))
    counts = run(FilterConfig(word_chars=HU, stop_words=HU_STOP_WORDS, rule_sets=C4_WEB), ctx)
    kept = list(iter_documents(ctx.out_dir / "part-00000.txt"))
    assert kept == [flat(page)[0], flat(PAGE)[0]]  # the dump's rules keep the navigation line, C4's drop it
    assert counts["sources"] == {"wikipedia": {"documents_kept": 1, "documents_written": 1},  # for pipeline status
                                 "web": {"documents_kept": 1, "documents_written": 1},
                                 "hirek": {"documents_kept": 0, "documents_written": 0}}
    assert [r.extra for r in iter_records(ctx.out_dir / "part-00000.txt")] == [{}, {}]  # PARAGRAPHS left out
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert {name: source["rule_set"] for name, source in report["sources"].items()} == {
        "wikipedia": "wikipedia", "web": "web", "hirek": "web"}
    web = report["sources"]["web"]
    assert web["documents"] == {"in": 2, "kept": 1, "dropped": 1, "written": 1}
    assert set(web["dropped"]) == {"top_ngram", "no_terminal_punctuation"}
    assert web["dropped"]["no_terminal_punctuation"] == {
        "documents": 0, "sentences": 1, "tokens": 7,
        "examples": [{"document": "Pékség", "text": NAVIGATION[0][0]}]}
    assert web["tokens"]["dropped"] == 7 + sum(map(tokens, flat(DROPPED["top_ngram"])[:1]))
    assert list(report["sources"]["hirek"]["dropped"]) == ["lorem_ipsum"]
    assert report["dropped"]["no_terminal_punctuation"]["sentences"] == 1


def test_rules_setting_picks_the_rule_set_of_a_source(tmp_path, make_ctx):
    page = [NAVIGATION] + PAGE
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[web_document("Pékség", page, WIKIPEDIA_SOURCE)]]))
    run(FilterConfig(word_chars=HU, stop_words=HU_STOP_WORDS, rules={"default": "web"}, rule_sets=C4_WEB), ctx)
    assert list(iter_documents(ctx.out_dir / "part-00000.txt")) == [flat(PAGE)[0]]


def test_unknown_rule_set_is_refused():
    with pytest.raises(ConfigError, match=r"--set filter\.rules\.web=forum: filter\.rules\.web: unknown rule set "
                                          r"'forum' \(known: published, web, wikipedia\)"):
        load_pipeline_config(DEFAULT_CONFIG_PATH, "hu", ["filter.rules.web=forum"])
    with pytest.raises(ConfigError, match=r"rules: needs a \"default\" entry"):
        FilterConfig(rules={"wikipedia": "wikipedia"})


def test_paragraphs_that_do_not_match_their_document_name_the_records_line(tmp_path, make_ctx):
    title, sentences, source, _ = web_document("Pékség", PAGE)
    sentences_dir = write_parts(tmp_path / "sentences", [[("Falu", GOOD), (title, sentences, source, [[1, 2]])]])
    with pytest.raises(DataError, match=r"part-00000\.docs\.jsonl: line 2: 'paragraphs' does not describe the 10 "):
        run(FilterConfig(word_chars=HU), make_ctx(tmp_path, sentences_dir))


def test_without_stop_words_the_stop_word_rule_is_skipped_with_a_note(tmp_path, make_ctx, caplog):
    ctx = make_ctx(tmp_path, write_parts(tmp_path / "sentences", [[web_document("Bögre", DROPPED["stop_words"])]]))
    with caplog.at_level(logging.WARNING, logger="wiki2bert"):
        assert run(FilterConfig(word_chars=HU), ctx)["documents_kept"] == 1
    report = json.loads((ctx.out_dir / "report.json").read_text(encoding="utf-8"))
    assert report["stop_word_check"].startswith("skipped: no stop words")
    assert "no stop words" in caplog.text


@pytest.mark.slow
def test_the_main_process_keeps_only_the_reports_examples_whatever_the_parts(tmp_path, make_ctx):
    """Every part's examples were held until the stage's end: 160 MiB of the main process at 1 GB (4,000 parts)."""
    dropped = [(f"English {i}", ENGLISH) for i in range(5)] + [(f"Számok {i}", CRAFTED["digit_ratio"])
                                                              for i in range(5)]
    peaks = {}
    for parts in (2, 30, 300):  # the first loads the language model
        ctx = make_ctx(tmp_path, write_parts(tmp_path / f"sentences{parts}", [[("Falu", GOOD), *dropped]] * parts),
                       name=f"out{parts}")
        tracemalloc.start()
        try:
            run(FilterConfig(word_chars=HU), ctx)
            peaks[parts] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peaks[300] - peaks[30] < 270 * 2_000, peaks  # the parts' names and codes; 5.8 KB a part before, 0.6 after
