"""wiki2bert_core.config.layered: layers merged key by key (mappings nested, dotted keys nested), each value
type-checked, every error naming the layer that set the key."""
from __future__ import annotations

import dataclasses

import pytest

from wiki2bert_core.config import (SettingError, changeable, changeable_fields, check_minimum, config_lines,
                                  layered)
from wiki2bert_core.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Item:
    size: int = 1


@dataclasses.dataclass(frozen=True)
class Toy:
    name: str = "toy"  # what it is called
    sizes: dict[str, int] = dataclasses.field(default_factory=dict)  # named sizes
    items: list[Item] = dataclasses.field(default_factory=list)
    retries: int = changeable(3)  # attempts

    def __post_init__(self):
        if self.name == "bad":
            raise SettingError("name", "not a good name")


def test_later_layers_win_and_mappings_merge_key_by_key():
    base = {"sizes": {"a": 1, "b": 2}, "items": [{"size": 5}]}
    toy = layered(Toy, [(base, "base.yaml"), ({"sizes": {"b": 3}, "items": [{}]}, "mine.yaml"),
                        ({"name": "x"}, "--set name=x")])
    assert toy == Toy(name="x", sizes={"a": 1, "b": 3}, items=[Item()])  # a list is replaced whole
    assert base == {"sizes": {"a": 1, "b": 2}, "items": [{"size": 5}]}  # the layers are left as they were
    assert layered(Toy, []) == Toy()


def test_dotted_keys_are_nested():
    toy = layered(Toy, [({"sizes": {"a": 1}}, "base.yaml"), ({"sizes.b": 2}, "--set sizes.b=2"),
                        ({"sizes.a": 7, "sizes.c": 3}, "--set")])
    assert toy.sizes == {"a": 7, "b": 2, "c": 3}


@pytest.mark.parametrize("layers, message", [
    ([({"sizes": {"a": "x"}}, "base.yaml"), ({"sizes.b": 2}, "--set sizes.b=2")],
     "base.yaml.sizes.a: expected an integer, got str 'x'"),
    ([({"sizes": {"a": 1}}, "base.yaml"), ({"sizes.b": 2.5}, "--set sizes.b=2.5: toy")],
     "--set sizes.b=2.5: toy.sizes.b: expected an integer, got float 2.5"),
    ([({"nmae": "x"}, "mine.yaml: toy")], "mine.yaml: toy.nmae: unknown key (known: items, name, retries, sizes)"),
    ([({"items": [{"size": 1}, {"sise": 2}]}, "mine.yaml")], "mine.yaml.items[1].sise: unknown key"),
    ([({"sizes": 3}, "a.yaml"), ({"name": "y"}, "b.yaml")], "a.yaml.sizes: expected a mapping, got int 3"),
    ([({"name": "x"}, "a.yaml"), ({"name": "bad"}, "b.yaml")], "b.yaml.name: not a good name"),  # __post_init__
])
def test_errors_name_the_layer_that_set_the_key(layers, message):
    with pytest.raises(ConfigError) as e:
        layered(Toy, layers)
    assert str(e.value).startswith(message), str(e.value)


def test_a_default_that_does_not_fit_is_named_as_such():
    @dataclasses.dataclass
    class Strict:
        n: int = 0

        def __post_init__(self):
            if self.n < 1:
                raise SettingError("n", "must be at least 1")

    with pytest.raises(ConfigError, match=r"^Strict defaults.n: must be at least 1$"):
        layered(Strict, [])


def test_a_count_below_its_minimum_is_named_with_the_layer_that_set_it():
    @dataclasses.dataclass
    class Counts:
        parts: int = 1
        seed: int = 0

        def __post_init__(self):
            check_minimum(self, 1, "parts")
            check_minimum(self, 0, "seed")

    with pytest.raises(ConfigError, match=r"^--set parts=0: x\.parts: must be at least 1, got 0$"):
        layered(Counts, [({"parts": 0}, "--set parts=0: x")])
    with pytest.raises(ConfigError, match=r"^a\.yaml: x\.seed: must not be negative, got -2$"):
        layered(Counts, [({"seed": -2}, "a.yaml: x")])
    assert layered(Counts, [({"parts": 3, "seed": 0}, "t")]) == Counts(3, 0)


def test_changeable_fields_are_marked_on_their_declaration_and_in_config_lines():
    assert changeable_fields(Toy) == ("retries",)
    assert config_lines(Toy, {"name": "ö", "retries": 3}, "toy.", "runtime") == [
        'toy.name: "ö"  # what it is called', "toy.retries: 3  # attempts [runtime]"]
