"""Reading fine-tuning tasks (pretrain/finetune/tasks.py): each format and kind recognised from the data, the task
file, the splits (by name, by directory, held out), the default metrics, and one line naming the file for each kind
of bad input. The fixtures are written here; the last test reads the real tasks when ../shared/data/finetune exists."""
from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from pretrain.finetune.metrics import METRICS
from pretrain.finetune.task import Example
from pretrain.finetune.tasks import load_task
from wiki2bert_core.errors import ConfigError, DataError

NERKOR_COLUMNS = "# global.columns = FORM LEMMA UPOS XPOS FEATS CONLL:NER EMMORPH:LEMMA"


def write_json(path: Path, records: list[dict], bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("\ufeff" if bom else "") + json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def write_conllup(path: Path, sentences: list[list[tuple[str, str, str]]], comments: bool = True) -> Path:
    """NerKor-like CoNLL-U Plus: (word, UPOS, NER tag) per token."""
    lines = [NERKOR_COLUMNS]
    for n, sentence in enumerate(sentences):
        if comments:
            lines.append(f"# sent_id = {n}")
        lines += [f"{w}\t{w.lower()}\t{pos}\t[/N]\t_\t{ner}\t{w.lower()}" for w, pos, ner in sentence] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


SENTENCE_A = [("Péter", "PROPN", "B-PER"), ("Kovács", "PROPN", "I-PER"), ("Budapesten", "PROPN", "B-LOC"),
              ("él", "VERB", "O"), (".", "PUNCT", "O")]
SENTENCE_B = [("#FreeRazan", "NOUN", "O"), ("az", "DET", "O"), ("ENSZ", "PROPN", "B-ORG"), ("-", "PUNCT", "O"),
              ("ben", "NOUN", "O")]


def cola(directory: Path) -> Path:
    write_json(directory / "cola_train.json", [{"id": str(i), "Sent": f"mondat {i}", "label": str(i % 2)}
                                               for i in range(10)])
    write_json(directory / "cola_dev.json", [{"id": "0", "Sent": "egy", "label": "1"},
                                             {"id": "1", "Sent": "kettő", "label": "0"}])
    return directory


def test_hulu_single_sentence_task_from_a_directory(tmp_path):
    task = load_task(cola(tmp_path / "HuCOLA"))
    assert (task.name, task.kind, task.labels) == ("HuCOLA", "single", ("0", "1"))
    assert task.metrics[0] == "mcc" and set(task.metrics) == {"mcc", "accuracy", "macro_f1", "per_class"}
    assert task.train[3] == Example(id="3", texts=("mondat 3",), label="1")
    assert [e.label for e in task.dev] == ["1", "0"] and len(task.train) == 10
    assert task.source == tmp_path / "HuCOLA"


def test_three_labels_get_accuracy_first_and_per_class_figures(tmp_path):
    labels = ["negative", "neutral", "positive"]
    write_json(tmp_path / "sst_train.json", [{"id": str(i), "Sent": "s", "label": labels[i % 3]} for i in range(9)])
    write_json(tmp_path / "sst_dev.json", [{"id": "0", "Sent": "s", "label": "positive"}])
    task = load_task(tmp_path)
    assert task.labels == tuple(labels) and task.metrics == ("accuracy", "macro_f1", "per_class")


def test_hulu_pair_task_with_a_byte_order_mark(tmp_path):
    records = [{"id": str(i), "premise": f"p{i}", "hypothesis": f"h{i}", "label": lab}
               for i, lab in enumerate(["entailment", "contradiction", "neutral"] * 3)]
    write_json(tmp_path / "hucb_train.json", records, bom=True)
    write_json(tmp_path / "hucb_dev.json", records[:4], bom=True)
    task = load_task(tmp_path)
    assert task.kind == "pair" and task.train[1].texts == ("p1", "h1") and task.train[1].label == "contradiction"
    assert task.labels == ("contradiction", "entailment", "neutral") and task.metrics[:2] == ("accuracy", "macro_f1")


def copa(directory: Path) -> Path:
    records = [{"id": str(i), "question": ("cause", "effect")[i % 2], "premise": f"Premissza {i}.",
                "choice1": f"egyik {i}", "choice2": f"másik {i}", "label": str(1 + i % 2)} for i in range(6)]
    write_json(directory / "train.json", records)
    write_json(directory / "val.json", records[:2])
    return directory


def test_hulu_choice_task_joins_premise_and_question_into_the_context(tmp_path):
    task = load_task(copa(tmp_path / "HuCoPA"))
    assert (task.kind, task.labels, task.metrics) == ("choice", ("1", "2"), ("accuracy",))
    assert task.train[1] == Example(id="1", texts=("Premissza 1. effect",), label="2",
                                    choices=("egyik 1", "másik 1"))
    assert len(task.dev) == 2


def test_choice_labels_counted_from_zero(tmp_path):
    records = [{"premise": "p", "choice1": "a", "choice2": "b", "choice3": "c", "label": i % 3} for i in range(6)]
    write_json(tmp_path / "train.json", records)
    write_json(tmp_path / "dev.json", records[:3])
    task = load_task(tmp_path)
    assert task.labels == ("0", "1", "2") and task.train[0].choices == ("a", "b", "c")
    assert task.train[4].id == "train.json[4]"  # no id field: the file and the element's index


def test_choice_labels_are_the_choices_numbers_even_where_one_is_never_the_answer(tmp_path):
    records = [{"premise": "p", "choice1": "a", "choice2": "b", "choice3": "c", "label": "1"}]
    write_json(tmp_path / "train.json", records * 3)
    write_json(tmp_path / "dev.json", records)
    assert load_task(tmp_path).labels == ("1", "2", "3")
    write_json(tmp_path / "train.json", [{**records[0], "label": "b"}])
    write_json(tmp_path / "dev.json", [{**records[0], "label": "b"}])
    with pytest.raises(DataError, match=r"train.json: choice labels b are not the numbers of the 3 choices"):
        load_task(tmp_path)
    (tmp_path / "task.yaml").write_text("labels: [a, b, c]\n")
    assert load_task(tmp_path).labels == ("a", "b", "c")
    (tmp_path / "task.yaml").write_text("labels: [a, b]\n")
    with pytest.raises(DataError, match=r"train.json\[0\]: 3 choices where the task has 2 \(a, b\)"):
        load_task(tmp_path)


def nerkor(directory: Path) -> Path:
    write_conllup(directory / "train" / "b.conllup", [SENTENCE_B])
    write_conllup(directory / "train" / "a.conllup", [SENTENCE_A, SENTENCE_B])
    write_conllup(directory / "devel" / "c.conllup", [SENTENCE_A])
    (directory / "README.md").write_text("not data")
    return directory


def test_conllu_plus_directories_read_every_file_sorted_with_the_ner_column(tmp_path):
    task = load_task(nerkor(tmp_path / "news"))
    assert task.kind == "tokens" and task.metrics[0] == "entity_f1" and "accuracy" in task.metrics
    assert task.labels == ("O", "B-LOC", "B-ORG", "B-PER", "I-PER")  # O first, then by type
    assert [e.id for e in task.train] == ["train/a.conllup:3", "train/a.conllup:10", "train/b.conllup:3"]
    assert task.train[0].words == ("Péter", "Kovács", "Budapesten", "él", ".")
    assert task.train[0].tags == ("B-PER", "I-PER", "B-LOC", "O", "O")
    assert task.train[1].words[0] == "#FreeRazan"  # a token line starting with #, not a comment
    assert len(task.dev) == 1


def test_task_file_names_another_column_and_the_metrics(tmp_path):
    nerkor(tmp_path)
    (tmp_path / "task.yaml").write_text("name: upos\ncolumn: UPOS\n")
    task = load_task(tmp_path)
    assert (task.name, task.metrics) == ("upos", ("accuracy", "macro_f1", "per_class"))
    assert task.train[0].tags == ("PROPN", "PROPN", "PROPN", "VERB", "PUNCT")
    assert set(task.labels) == {"PROPN", "VERB", "PUNCT", "NOUN", "DET"}


def test_plain_conllu_without_a_header_has_the_ten_columns_and_skips_multiword_tokens(tmp_path):
    rows = ["# text = Vámonos al mar", "1-2\tVámonos\t_\t_\t_\t_\t_\t_\t_\t_",
            "1\tVamos\tir\tVERB\t_\t_\t0\troot\t_\t_", "2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_",
            "3\tal\tal\tADP\t_\t_\t4\tcase\t_\t_", "4\tmar\tmar\tNOUN\t_\t_\t1\tobl\t_\t_", ""]
    (tmp_path / "es-ud-train.conllu").write_text("\n".join(rows), encoding="utf-8")
    (tmp_path / "es-ud-dev.conllu").write_text("\n".join(rows), encoding="utf-8")
    task = load_task(tmp_path)
    assert task.train[0].words == ("Vamos", "nos", "al", "mar")
    assert task.train[0].tags == ("VERB", "PRON", "ADP", "NOUN")  # no NER column: UPOS
    assert task.metrics[0] == "accuracy"


def test_plain_conll_columns_word_first_label_last_or_named_by_number(tmp_path):
    text = ("-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\n\n"
            "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n")
    (tmp_path / "train.conll").write_text(text)
    (tmp_path / "dev.conll").write_text(text)
    task = load_task(tmp_path)
    assert [e.tags for e in task.train] == [("B-ORG", "O", "B-MISC"), ("B-PER", "I-PER")]
    assert task.train[1].words == ("Peter", "Blackburn") and task.train[1].id == "train.conll:7"
    (tmp_path / "task.yaml").write_text("column: 1\n")
    assert load_task(tmp_path).train[0].tags == ("NNP", "VBZ", "JJ")


def test_json_lines_and_csv_with_named_columns(tmp_path):
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    (jsonl / "train.jsonl").write_text("\n".join(json.dumps({"sentence1": f"a{i}", "sentence2": f"b{i}",
                                                             "label": i % 2}) for i in range(6)) + "\n")
    (jsonl / "validation.jsonl").write_text(json.dumps({"sentence1": "x", "sentence2": "y", "label": 1}) + "\n")
    task = load_task(jsonl)
    assert task.kind == "pair" and task.labels == ("0", "1") and task.dev[0].texts == ("x", "y")
    assert task.train[2].id == "train.jsonl:3"

    table = tmp_path / "csv"
    table.mkdir()
    (table / "reviews_train.csv").write_text('review,stars\n"jó, nagyon",5\nrossz,1\nközepes,3\n', encoding="utf-8")
    (table / "reviews_dev.csv").write_text("review,stars\nszép,5\n", encoding="utf-8")
    (table / "task.yaml").write_text("text_fields: [review]\nlabel_field: stars\nmetrics: [macro_f1, accuracy]\n")
    task = load_task(table / "task.yaml")
    assert (task.name, task.kind, task.labels, task.metrics) == ("csv", "single", ("1", "3", "5"),
                                                                  ("macro_f1", "accuracy"))
    assert task.train[0].texts == ("jó, nagyon",) and task.train[0].id == "reviews_train.csv:2"


def test_a_test_split_is_read_without_labels_and_filled_in_in_its_own_format(tmp_path):
    """HuLU publishes its test splits as the train and dev files without labels: the test files are read (ids and
    texts) and written again with the predicted labels, ready to submit."""
    hulu = cola(tmp_path / "HuCOLA")
    records = [{"id": "t0", "Sent": "három"}, {"id": "t1", "Sent": "négy", "label": ""}]  # hidden, or blank
    write_json(hulu / "cola_test.json", records)
    task = load_task(hulu)
    assert task.test == (Example(id="t0", texts=("három",)), Example(id="t1", texts=("négy",)))
    [test_file] = task.test_files
    assert (test_file.name, test_file.examples) == ("cola_test.json", 2)
    filled = test_file.fill(["1", "0"])
    assert json.loads(filled) == [{"id": "t0", "Sent": "három", "label": "1"},
                                  {"id": "t1", "Sent": "négy", "label": "0"}]
    assert filled.startswith('[\n    {\n        "id": "t0"')  # indented as HuLU's files are

    # JSON Lines whose training labels are numbers: numbers again; CSV: the label column added
    lines = tmp_path / "jsonl"
    lines.mkdir()
    (lines / "train.jsonl").write_text("".join(json.dumps({"text": f"a{i}", "label": i % 2}) + "\n" for i in range(4)))
    (lines / "dev.jsonl").write_text(json.dumps({"text": "b", "label": 1}) + "\n")
    (lines / "test.jsonl").write_text(json.dumps({"text": "c", "id": 7}) + "\n")
    assert load_task(lines).test_files[0].fill(["1"]) == '{"text": "c", "id": 7, "label": 1}\n'
    table = tmp_path / "csv"
    table.mkdir()
    (table / "train.csv").write_text("text,label\na,x\nb,y\n")
    (table / "dev.csv").write_text("text,label\na,x\n")
    (table / "test.csv").write_text('text\n"c, d"\n')
    assert load_task(table).test_files[0].fill(["y"]) == 'text,label\n"c, d",y\n'

    # CoNLL-U Plus: line for line, the tag column replaced (comments and the other columns kept)
    news = nerkor(tmp_path / "news")
    write_conllup(news / "test" / "d.conllup", [[(w, pos, "_") for w, pos, _ in SENTENCE_B]])
    task = load_task(news)
    assert task.test[0] == Example(id="test/d.conllup:3", words=tuple(w for w, _, _ in SENTENCE_B))
    tags = ["O", "O", "B-ORG", "O", "O"]
    assert task.test_files[0].name == "test/d.conllup"
    expected = write_conllup(tmp_path / "expected.conllup",
                             [[(w, pos, tag) for (w, pos, _), tag in zip(SENTENCE_B, tags)]])
    assert task.test_files[0].fill([tags]) == expected.read_text()
    with pytest.raises(ValueError):  # one prediction a word
        task.test_files[0].fill([tags[:4]])


def test_an_empty_word_and_a_tag_column_that_is_the_word_column_are_refused(tmp_path):
    nerkor(tmp_path)
    text = (tmp_path / "devel" / "c.conllup").read_text()
    (tmp_path / "devel" / "c.conllup").write_text(text.replace("Kovács\t", "\t", 1))
    with pytest.raises(DataError, match=r"devel/c.conllup:4: the word \(column 0\) is empty; every token needs"):
        load_task(tmp_path)
    (tmp_path / "train.conll").write_text("a\nb\n")
    (tmp_path / "dev.conll").write_text("a\n")
    with pytest.raises(DataError, match=r"train.conll: the tag column is the word column \(0, of 1\)"):
        load_task(tmp_path / "train.conll", held_out_fraction=0.5)


def test_lines_end_at_newlines_only(tmp_path):
    """U+2028 and U+0085 are text inside a JSON string or a word (str.splitlines would end a line there); a quoted
    CSV field may hold a newline."""
    (tmp_path / "train.jsonl").write_text(json.dumps({"text": "a\u2028b\x85c", "label": "x"}, ensure_ascii=False)
                                          + "\n" + json.dumps({"text": "d", "label": "y"}) + "\n", encoding="utf-8")
    (tmp_path / "dev.csv").write_text('text,label\n"two\nlines",x\nplain,y\n', encoding="utf-8")
    task = load_task(tmp_path)
    assert [e.texts for e in task.train] == [("a\u2028b\x85c",), ("d",)]
    assert [e.texts for e in task.dev] == [("two\nlines",), ("plain",)] and task.dev[1].id == "dev.csv:4"

    words = tmp_path / "words"
    words.mkdir()
    for split in ("train", "dev"):
        (words / f"{split}.conll").write_text("Foo\u2028bar B-ORG\nnyt O\n", encoding="utf-8")
    assert load_task(words).train[0].words == ("Foo\u2028bar", "nyt")


def test_task_file_names_the_split_files_and_the_label_order(tmp_path):
    cola(tmp_path / "data")
    (tmp_path / "mine.yaml").write_text("name: acceptability\ntrain: data/cola_train.json\n"
                                        "dev: [data/cola_dev.json]\nlabels: ['1', '0']\n")
    task = load_task(tmp_path / "mine.yaml")
    assert (task.name, task.labels, len(task.train), len(task.dev)) == ("acceptability", ("1", "0"), 10, 2)


def test_held_out_fraction_is_stratified_deterministic_and_keeps_file_order(tmp_path):
    records = [{"id": str(i), "Sent": f"s{i}", "label": "rare" if i in (3, 17, 25, 33) else ("a", "b")[i % 2]}
               for i in range(40)]
    data = write_json(tmp_path / "all.json", records)
    with pytest.raises(ConfigError, match="no dev split.*held_out_fraction"):
        load_task(data)
    task = load_task(data, held_out_fraction=0.25, seed=1)
    assert len(task.dev) == 10 and len(task.train) == 30
    assert Counter(e.label for e in task.dev) == {"a": 5, "b": 4, "rare": 1}
    assert {e.id for e in task.train} | {e.id for e in task.dev} == {str(i) for i in range(40)}
    assert [int(e.id) for e in task.dev] == sorted(int(e.id) for e in task.dev)
    assert load_task(data, held_out_fraction=0.25, seed=1) == task
    assert load_task(data, held_out_fraction=0.25, seed=2).dev != task.dev
    (tmp_path / "task.yaml").write_text("train: all.json\nheld_out_fraction: 0.25\n")
    assert load_task(tmp_path, seed=1).dev == task.dev
    with pytest.raises(ConfigError, match=r"all.json: held_out_fraction=0.01 of 40 examples leaves no dev example"):
        load_task(data, held_out_fraction=0.01)


def test_held_out_sentences_of_a_token_task(tmp_path):
    write_conllup(tmp_path / "ner.conllup", [SENTENCE_A, SENTENCE_B] * 10)
    task = load_task(tmp_path / "ner.conllup", held_out_fraction=0.1)
    assert (len(task.train), len(task.dev)) == (18, 2)


def test_a_task_with_a_dev_split_ignores_the_fraction_and_a_fraction_must_be_a_share(tmp_path):
    assert load_task(cola(tmp_path), held_out_fraction=0.1) == load_task(tmp_path)
    with pytest.raises(ConfigError, match="held_out_fraction must be between 0 and 1"):
        load_task(tmp_path / "cola_train.json", held_out_fraction=1.0)


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("broken, pattern", [
    ("missing field", r"cola_train.json\[1\]: no field 'label' \(the label; fields: id, Sent\)"),
    ("dev label unseen", r"cola_dev.json\[0\]: label '2' never occurs in the training split \(.*cola_train.json\)"),
    ("empty file", r"cola_dev.json: empty file"),
    ("truncated JSON", r"cola_train.json: line \d+ column \d+: not valid JSON .*the file ends early \(truncated\?\)"),
    ("not UTF-8", r"cola_train.json: not UTF-8 \(byte 38\)"),  # where the \xe1 is
    ("text not a string", r"cola_train.json\[0\]: field 'Sent' \(the text\) is null, not a string"),
    ("no examples", r"cola_dev.json: no examples"),
    ("empty texts", r"cola_train.json\[0\]: field 'Sent' \(the text\) is empty; every example needs its text"),
    ("a blank text", r"cola_dev.json\[1\]: field 'Sent' \(the text\) is empty; every example needs its text"),
])
def test_bad_sentence_data_is_one_line_naming_the_file(tmp_path, broken, pattern):
    cola(tmp_path)
    train, dev = tmp_path / "cola_train.json", tmp_path / "cola_dev.json"
    records = json.loads(train.read_text())
    if broken == "missing field":
        del records[1]["label"]
        write_json(train, records)
    elif broken == "dev label unseen":
        write_json(dev, [{"id": "0", "Sent": "x", "label": "2"}])
    elif broken == "empty file":
        dev.write_text("")
    elif broken == "truncated JSON":
        train.write_text(train.read_text()[:-40])
    elif broken == "not UTF-8":
        train.write_bytes(train.read_bytes().replace("mondat 0".encode(), b"mond\xe1t 0"))
    elif broken == "text not a string":
        records[0]["Sent"] = None
        write_json(train, records)
    elif broken == "no examples":
        write_json(dev, [])
    elif broken == "empty texts":  # once trained and scored without a word (MCC 0)
        write_json(train, [{**record, "Sent": ""} for record in records])
    elif broken == "a blank text":
        write_json(dev, [{"id": "0", "Sent": "egy", "label": "1"}, {"id": "1", "Sent": " \t", "label": "0"}])
    with pytest.raises(DataError) as error:
        load_task(tmp_path)
    assert re.search(pattern, _one_line(error)), str(error.value)


def test_bad_token_data_is_one_line_naming_the_file(tmp_path):
    nerkor(tmp_path)
    (tmp_path / "task.yaml").write_text("column: NER_TAG\n")
    with pytest.raises(DataError) as error:
        load_task(tmp_path)
    assert re.search(r"train/a.conllup: column: no column 'NER_TAG' \(columns: FORM LEMMA UPOS XPOS FEATS "
                     r"CONLL:NER EMMORPH:LEMMA\)", _one_line(error))

    (tmp_path / "task.yaml").write_text("column: 9\n")
    with pytest.raises(DataError, match=r"a.conllup: column: 9: there is no such column \(the file has 7"):
        load_task(tmp_path)

    (tmp_path / "task.yaml").write_text("column: UPOS\nmetrics: [entity_f1]\n")
    with pytest.raises(DataError) as error:
        load_task(tmp_path)
    assert re.search(r"train/a.conllup:3: tag 'PROPN' is not IOB2", _one_line(error))

    (tmp_path / "task.yaml").unlink()
    text = (tmp_path / "devel" / "c.conllup").read_text()
    (tmp_path / "devel" / "c.conllup").write_text(text.rstrip("\n").rsplit("\t", 3)[0])  # cut in the last line
    with pytest.raises(DataError) as error:
        load_task(tmp_path)
    assert re.search(r"devel/c.conllup:7: 4 columns where the header names 7 \(the file ends early: truncated\?\)",
                     _one_line(error))


def test_iob1_tags_are_refused_saying_what_was_found_and_stray_ones_are_read_with_a_warning(tmp_path, caplog):
    iob1 = [("Péter", "PROPN", "I-PER"), ("Kovács", "PROPN", "I-PER"), ("és", "CCONJ", "O"),
            ("Anna", "PROPN", "I-PER"), ("Kiss", "PROPN", "B-PER")]  # IOB1: B- only between two adjacent entities
    write_conllup(tmp_path / "train.conllup", [iob1, iob1])
    write_conllup(tmp_path / "dev.conllup", [iob1])
    with pytest.raises(DataError) as error:
        load_task(tmp_path)
    assert re.search(r"train.conllup:3: 'I-PER' after 'O': not IOB2 tags: 4 entities start with I- and 2 with B- "
                     r"\(IOB1 or IO tags\?\); the entity metrics need IOB2", _one_line(error)), str(error.value)
    (tmp_path / "task.yaml").write_text("metrics: [accuracy]\n")  # token accuracy needs no IOB2
    assert load_task(tmp_path).metrics == ("accuracy",)

    (tmp_path / "task.yaml").unlink()
    stray = [("a", "X", "O"), ("Duna", "PROPN", "I-LOC")]
    write_conllup(tmp_path / "train.conllup", [SENTENCE_A, SENTENCE_B, stray])
    write_conllup(tmp_path / "dev.conllup", [SENTENCE_A])
    with caplog.at_level(logging.WARNING, logger="wiki2bert"):
        task = load_task(tmp_path)
    assert task.metrics[0] == "entity_f1"
    assert re.search(r"1 of 4 entities start with I- instead of B- \(first: .*train.conllup:18: 'I-LOC' after 'O'\)",
                     caplog.text), caplog.text


def test_task_file_mistakes_are_config_errors_naming_the_file(tmp_path):
    cola(tmp_path)
    for text, pattern in [("metric: [mcc]\n", r"task.yaml.metric: unknown key"),
                          ("metrics: [f2]\n", r"metrics: f2: known metrics are accuracy, mcc"),
                          ("metrics: [per_class, accuracy]\n", r"main\) metric must be one figure"),
                          ("metrics: [entity_f1]\n", r"entity metrics need a token task, this one is single"),
                          ("kind: triple\n", r"task.yaml.kind: 'triple' is not one of"),
                          ("train: nothing.json\n", r"train: .*nothing.json does not exist"),
                          ("kind: tokens\n", r"cola_train.json: a tokens task cannot be read from json data"),
                          ("labels: ['1']\n", None)]:
        (tmp_path / "task.yaml").write_text(text)
        if pattern is None:
            with pytest.raises(DataError, match=r"labels '0' are not in the task file's labels \(1\)"):
                load_task(tmp_path)
            continue
        with pytest.raises(ConfigError) as error:
            load_task(tmp_path)
        assert re.search(pattern, _one_line(error)), str(error.value)


def test_paths_that_name_no_task(tmp_path):
    with pytest.raises(ConfigError, match="no such task file or directory"):
        load_task(tmp_path / "missing")
    write_json(tmp_path / "x_train.json", [{"Sent": "a", "label": "1"}])
    write_json(tmp_path / "y_train.json", [{"Sent": "a", "label": "1"}])
    with pytest.raises(ConfigError, match=r"2 train splits .*name the one to use"):
        load_task(tmp_path)
    (tmp_path / "y_train.json").unlink()
    write_json(tmp_path / "x_dev.json", [{"foo": "a", "label": "1"}])
    write_json(tmp_path / "x_train.json", [{"foo": "a", "label": "1"}])
    with pytest.raises(ConfigError, match=r"x_train.json\[0\]: cannot tell the task kind from the fields \(foo, lab"):
        load_task(tmp_path)


# beside the checkout, as ../shared/data/finetune; WIKI2BERT_FINETUNE_DATA names it elsewhere (a git worktree)
REAL = Path(os.environ.get("WIKI2BERT_FINETUNE_DATA",
                           Path(__file__).resolve().parents[1].parent / "shared" / "data" / "finetune"))


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/finetune is not here")
@pytest.mark.parametrize("directory, kind, sizes, dev_labels, main_metric", [
    ("hulu/HuCOLA", "single", (7274, 910), {"1": 714, "0": 196}, "mcc"),
    ("hulu/HuSST", "single", (9328, 1165), {"negative": 697, "neutral": 435, "positive": 33}, "accuracy"),
    ("hulu/HuCB", "pair", (250, 103), {"entailment": 41, "contradiction": 36, "neutral": 26}, "accuracy"),
    ("hulu/HuCoPA", "choice", (400, 100), {"1": 49, "2": 51}, "accuracy"),
    ("nerkor/news", "tokens", None, None, "entity_f1"),
])
def test_the_real_tasks_read_with_the_counts_of_their_readme(directory, kind, sizes, dev_labels, main_metric):
    task = load_task(REAL / directory)
    assert (task.kind, task.main_metric) == (kind, main_metric)
    if kind == "tokens":
        files = {split: {e.id.split(":")[0] for e in examples} for split, examples in (("train", task.train),
                                                                                        ("dev", task.dev))}
        assert (len(files["train"]), len(files["dev"])) == (66, 8)
        assert set(task.labels) == {"O"} | {f"{p}-{t}" for p in "BI" for t in ("PER", "LOC", "ORG", "MISC")}
        assert all(m in METRICS for m in task.metrics)
        return
    assert (len(task.train), len(task.dev)) == sizes
    assert Counter(e.label for e in task.dev) == dev_labels
