"""``hub.help`` gives every entry of the zoo a real docstring (what the model is, its inputs and
outputs or sizes, how pretrained weights are found), not ``None`` or a generated signature."""

from __future__ import annotations

import re

import pytest

from compiler import hub

REPO = "megengine/models"
ENTRIES = hub.list(REPO)


def test_the_zoo_has_its_entries() -> None:
    assert len(ENTRIES) > 60 and {"resnet18", "BertModel", "vit_b_32", "ConvNet"} <= set(ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_has_a_docstring(entry: str) -> None:
    doc = hub.help(REPO, entry)
    assert isinstance(doc, str)
    name = entry.rpartition(".")[2]
    assert not doc.startswith(f"{name}("), "a dataclass's generated signature is no documentation"
    assert len(doc.split()) >= 12, doc


@pytest.mark.parametrize("entry", [e for e in ENTRIES if re.search(r"res\d+|^resnet\d+$", e)])
def test_resnet_based_entries_name_their_depth(entry: str) -> None:
    depth = re.search(r"(\d+)", entry.rpartition("res")[2]).group(1)  # type: ignore[union-attr]
    assert f"ResNet-{depth}" in (hub.help(REPO, entry) or "")


@pytest.mark.parametrize("entry", [e for e in ENTRIES if re.fullmatch(r"\w+_L_\d+_H_\d+_A_\d+", e)])
def test_bert_entries_state_their_sizes(entry: str) -> None:
    layers, hidden, heads = re.fullmatch(r"\w+_L_(\d+)_H_(\d+)_A_(\d+)", entry).groups()  # type: ignore[union-attr]
    assert f"{layers} layers, hidden {hidden}, {heads} heads" in (hub.help(REPO, entry) or "")
