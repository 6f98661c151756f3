"""The fast finite screen equals ``torch.isfinite(x).all()`` on every kind of entry."""

from __future__ import annotations

import torch

from asyncfl.sim.engine import screen
from asyncfl.tensor_checks import all_finite, finite_rows


def test_finite_rows_equals_isfinite_all_on_extreme_and_special_values():
    g = torch.Generator().manual_seed(0)
    specials = [float("inf"), float("-inf"), float("nan")]
    extremes = [3.4e38, -3.4e38, 1e-45, -0.0, 0.0]  # float32 max, smallest subnormal, signed zero
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(200, 37, generator=g, dtype=dtype) * 1e3
        rows = torch.randperm(200, generator=g)
        for i, r in enumerate(rows[:60].tolist()):  # 60 rows get one special value each
            x[r, i % 37] = specials[i % 3]
        for i, r in enumerate(rows[60:120].tolist()):  # 60 rows get one huge or tiny finite value
            x[r, (5 * i) % 37] = extremes[i % 5]
        want = torch.isfinite(x).all(dim=1)
        assert int((~want).sum()) == 60
        assert torch.equal(finite_rows(x), want)
        assert [all_finite(row) for row in x] == want.tolist()
    assert all_finite(torch.empty(0)) and not all_finite(torch.tensor([[1.0], [float("nan")]]))


def test_screen_names_the_first_failing_check():
    ok, big, bad = torch.ones(4), torch.full((4,), 10.0), torch.tensor([1.0, float("inf"), 0.0, 0.0])
    assert screen([ok, big, bad], max_norm=5.0) == ["", "norm", "non-finite"]  # ‖big‖ = 20 > 5
    assert screen([ok, big, bad], max_norm=None) == ["", "", "non-finite"]
    assert screen([ok, torch.ones(2, 2) * 3], max_norm=5.0) == ["", "norm"]  # shapes differ: one by one, ‖·‖ = 6
    assert screen([], max_norm=1.0) == []
    assert screen(torch.stack([ok, big, bad]), max_norm=5.0) == ["", "norm", "non-finite"]  # rows of one block
