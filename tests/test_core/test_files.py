"""wiki2bert_core/files.py: a directory put in place of another."""
from __future__ import annotations

from wiki2bert_core.files import replace_dir


def _directory(path, text):
    path.mkdir()
    (path / "file.txt").write_text(text)
    return path


def test_a_directory_replaces_the_one_in_its_place_and_leaves_nothing_beside_it(tmp_path):
    place = _directory(tmp_path / "out", "old")
    (place / "only_in_the_old.txt").write_text("old")
    replace_dir(_directory(tmp_path / ".out.tmp", "new"), place)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in place.iterdir()) == ["file.txt"] and (place / "file.txt").read_text() == "new"


def test_a_directory_goes_where_nothing_was(tmp_path):
    replace_dir(_directory(tmp_path / ".out.tmp", "new"), tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_link_in_the_place_is_replaced_and_what_it_named_is_left_alone(tmp_path):
    linked = _directory(tmp_path / "elsewhere", "kept")
    (tmp_path / "out").symlink_to(linked)
    replace_dir(_directory(tmp_path / ".out.tmp", "new"), tmp_path / "out")
    assert not (tmp_path / "out").is_symlink() and (tmp_path / "out" / "file.txt").read_text() == "new"
    assert (linked / "file.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "out"]
