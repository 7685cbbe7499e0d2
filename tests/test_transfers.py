"""swarmnode.model.transfers and the learner's per-row tensors: the values are exactly those of the plain calls."""

from __future__ import annotations

import torch

from swarmnode.learner.row_tensors import padded
from swarmnode.model.transfers import host_copies, readback, readback_with, to_device


def test_readback_gives_exactly_float_of_each_tensor():
    values = {
        "f32": torch.tensor(0.1, dtype=torch.float32),
        "f64": torch.tensor(1 / 3, dtype=torch.float64),
        "i64": torch.tensor(2**40 + 1),
        "bool": torch.tensor(False),
        "plain": 0.25,
        "nan": torch.tensor(float("nan")),
    }
    out = readback(values)
    assert list(out) == list(values)  # same keys, same order
    for k in ("f32", "f64", "i64", "bool"):
        assert out[k] == float(values[k]) and type(out[k]) is float, k
    assert out["plain"] == 0.25 and out["nan"] != out["nan"]


def test_readback_with_a_table_gives_the_same_figures_and_the_table_as_rows():
    values = {"a": torch.tensor(0.1, dtype=torch.float32), "b": 2.5, "c": torch.tensor(3)}
    table = torch.tensor([[1.0, -2.0], [0.25, 7.0], [3.0, 4.0]])
    figures, rows = readback_with(values, table)
    assert figures == readback(values) and list(figures) == ["a", "b", "c"]
    assert rows == [[1.0, -2.0], [0.25, 7.0], [3.0, 4.0]]
    assert readback_with(values, None) == (readback(values), None)
    assert readback_with(values, torch.zeros(0, 2)) == (readback(values), [])


def test_padded_matches_a_row_by_row_fill():
    rows = [[-0.5, -1.25, -3.0], [], [-0.1]]
    expected = torch.zeros(3, 4)
    for i, v in enumerate(rows):
        if v:
            expected[i, : len(v)] = torch.as_tensor(v, dtype=torch.float32)
    assert torch.equal(padded(rows, 4), expected)
    assert padded(rows, 2).shape == (3, 2)  # a row longer than the width is cut, not an error


def test_host_copies_are_independent_cast_copies():
    state = {"w": torch.randn(3, 2, dtype=torch.float32), "n": torch.tensor([1, 2])}
    copies = host_copies(state, lambda t: torch.bfloat16 if t.is_floating_point() else t.dtype)
    assert copies["w"].dtype == torch.bfloat16 and torch.equal(copies["w"], state["w"].to(torch.bfloat16))
    assert torch.equal(copies["n"], state["n"])
    state["w"].add_(1.0)  # the copy does not follow the original
    assert not torch.equal(copies["w"], state["w"].to(torch.bfloat16))


def test_to_device_on_the_host_is_the_tensor_itself():
    t = torch.arange(4)
    assert to_device(t, "cpu") is t
