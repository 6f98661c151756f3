"""Claim 3's width rule (plan.toml, design 5; docs/confirm.md §3.2): how wide a range of a tuned
setting — the learning rate η, or momentum's β — works about as well as the best one, read from
the tuning runs alone.

For each setting ``x`` of a cell (``log₂ η``, or ``log₂ 1/(1 − β)``, the momentum's horizon in
octaves) the seeds give a mean final accuracy ``a(x)`` and a restricted mean steps to the target
``R(x)`` (``min(T̂, h)``, an unreached run counting ``h``). With ``a* = max a`` and ``R* = min R``
over the cell, ``x`` qualifies when

    a(x) ≥ (1 − 0.05) · a*    and    R(x) ≤ 1.2 · R*,

and the width is ``max x − min x`` over the qualifying settings (none qualifies where the most
accurate settings are slower than 1.2 × the fastest: no width, "not estimable"). A setting whose run failed on any
seed (diverged, or not run) has no ``a`` and never qualifies. A qualifying setting at either end
of the grid makes the width a lower bound (a wider grid could widen it).

MA's width against momentum's: the claim holds when MA's exceeds momentum's by more than
``MARGIN`` (one octave), is reversed when it is smaller by more than that, else not resolved; a
cell where either rule's best mean final accuracy is below ``FLOOR`` (within 0.1 of chance) is
excluded — a floor, not a width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

#: plan.toml, design 5: within 5 % (relative) of the best mean final accuracy …
WITHIN_ACCURACY = 0.05
#: … and within 1.2× of the best restricted mean steps
WITHIN_RMST = 1.2
#: one octave
MARGIN = 1.0
#: chance (0.1 for 10 classes) + 0.1
FLOOR = 0.2


@dataclass(frozen=True)
class Setting:
    """One setting of a cell: its position ``x`` (octaves), the value it is (η or β), its mean
    final accuracy (NaN when a run failed or was not measured) and restricted mean steps."""

    x: float
    value: float
    accuracy: float
    rmst: float


@dataclass(frozen=True)
class Width:
    """The width rule applied to one cell's settings (module docstring)."""

    span: float
    lower_bound: bool
    qualifying: tuple[float, ...]  # the values (η or β) that qualify
    best_accuracy: float
    best_rmst: float
    settings: tuple[Setting, ...]

    def text(self) -> str:
        if not self.qualifying:
            return "—"
        return f"{'≥ ' if self.lower_bound else ''}{self.span:.2f} ({', '.join(f'{v:g}' for v in self.qualifying)})"


def width(settings: Sequence[Setting]) -> Width:
    """The width of a cell (module docstring); no setting measured: span NaN."""
    settings = tuple(sorted(settings, key=lambda s: s.x))
    ok = [s for s in settings if math.isfinite(s.accuracy) and math.isfinite(s.rmst)]
    if not ok:
        return Width(math.nan, False, (), math.nan, math.nan, settings)
    best_acc = max(s.accuracy for s in ok)
    best_rmst = min(s.rmst for s in ok)
    q = [s for s in ok if s.accuracy >= (1 - WITHIN_ACCURACY) * best_acc and s.rmst <= WITHIN_RMST * best_rmst]
    if not q:  # the most accurate settings are slow and the fast ones inaccurate: no width
        return Width(math.nan, False, (), best_acc, best_rmst, settings)
    at_edge = q[0].x == settings[0].x or q[-1].x == settings[-1].x
    return Width(q[-1].x - q[0].x, at_edge, tuple(s.value for s in q), best_acc, best_rmst, settings)


def width_verdict(rule: Width, base: Width, margin: float = MARGIN, floor: float = FLOOR) -> str:
    """The plan's verdict on ``rule``'s width against ``base``'s (module docstring)."""
    if not (rule.settings and base.settings) or math.isnan(rule.best_accuracy) or math.isnan(base.best_accuracy):
        return "not tested"
    if not (rule.qualifying and base.qualifying):
        return "not estimable (no setting within both bounds of the best: the most accurate ones are slow)"
    if rule.best_accuracy < floor or base.best_accuracy < floor:
        return "excluded (a best mean final accuracy within 0.1 of chance: a floor, not a width)"
    diff = rule.span - base.span
    if diff > margin:
        return ("not resolved (momentum's width reaches its grid's edge: a wider grid could close the gap)"
                if base.lower_bound else "holds")
    if diff < -margin:
        return "not resolved (MA's width reaches its grid's edge)" if rule.lower_bound else "reversed"
    return "not resolved"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values and all(math.isfinite(v) for v in values) else math.nan


def setting_of(rows: Iterable[dict[str, Any]], x: float, value: float) -> Setting:
    """A setting from its tuning runs (``tuning.csv`` rows of one rate): the mean final accuracy
    of completed runs (NaN if any run did not complete) and the restricted mean steps to the
    target (NaN if any run's crossing is not measured)."""
    rows = list(rows)
    acc = [float(r["final_accuracy"]) if r["status"] == "completed" else math.nan for r in rows]
    rmst = []
    for r in rows:
        h = float(r["horizon"])
        if r["status"] not in ("completed", "stopped"):
            rmst.append(math.nan)
        else:
            rmst.append(min(float(r["cross_point"]), h) if r["reached"] else h)
    return Setting(x, value, _mean(acc), _mean(rmst))


def chosen_rows(rows: list[dict[str, Any]], task: str, privacy: str, K: int, method: str) -> list[dict[str, Any]]:
    """The tuning runs of one tuned cell at the rate its tuning chose (``chosen = 1``)."""
    return [r for r in rows if (r["task"], r["privacy"], r["K"], r["method"]) == (task, privacy, K, method) and r["chosen"]]


def lr_settings(rows: Iterable[dict[str, Any]], task: str, privacy: str, K: int, method: str) -> list[Setting]:
    """The learning-rate settings of one tuned cell (``x = log₂ η``)."""
    by: dict[float, list[dict[str, Any]]] = {}
    for r in rows:
        if (r["task"], r["privacy"], r["K"], r["method"]) == (task, privacy, K, method):
            by.setdefault(float(r["lr"]), []).append(r)
    return [setting_of(rs, math.log2(lr), lr) for lr, rs in sorted(by.items())]


def beta_settings(rows: Iterable[dict[str, Any]], beta_tasks: dict[str, float], privacy: str, K: int,
                  method: str) -> list[Setting]:
    """The β settings of a method (``x = log₂ 1/(1 − β)``): at each β's task, the runs at the rate
    its tuning chose (``chosen = 1``); a β whose tuning chose nothing has no setting values."""
    rows = list(rows)
    out = []
    for task, beta in beta_tasks.items():
        chosen = chosen_rows(rows, task, privacy, K, method)
        x = math.log2(1 / (1 - beta))
        out.append(setting_of(chosen, x, beta) if chosen else Setting(x, beta, math.nan, math.nan))
    return out


def tuned_variant(rows: Iterable[dict[str, Any]], tasks: Sequence[str], privacy: str, K: int, method: str) -> str | None:
    """Of ``tasks`` (variants of one task), the one where ``method``'s chosen rate has the smallest
    restricted mean steps on the tuning seeds (ties: the larger mean final accuracy, then the
    earlier task); ``None`` when none has a chosen rate measured (docs/confirm.md §2)."""
    best: tuple[float, float, int] | None = None
    pick = None
    rows = list(rows)
    for i, task in enumerate(tasks):
        chosen = chosen_rows(rows, task, privacy, K, method)
        if not chosen:
            continue
        s = setting_of(chosen, 0.0, 0.0)
        if not math.isfinite(s.rmst):
            continue
        key = (s.rmst, -s.accuracy if math.isfinite(s.accuracy) else math.inf, i)
        if best is None or key < best:
            best, pick = key, task
    return pick
