"""The table of docs/privacy.md §13: ε for the same σ, k, t and T under the three sampling
assumptions — Poisson at the same expected rate q = k/t over T steps (assumed), the participation
cap's k·⌈T/t⌉ releases composed without amplification (guaranteed, unamplified), and random
allocation of k of every t steps over ⌈T/t⌉ windows (guaranteed if the allotment is secret,
amplified; pld-accounting's upper and lower bounds).

    PYTHONPATH=. python analysis/privacy_allocation_table.py      (≈ 1–3 min on 2 cores)
"""

from __future__ import annotations

from asyncfl.privacy import accounting, allocation
from asyncfl.privacy.accountants import Releases

DELTA = 1e-6
SETTINGS = ((1.0, 1, 10, 30), (2.0, 1, 10, 100), (2.0, 2, 10, 100), (4.0, 1, 4, 40))


def row(sigma: float, k: int, t: int, steps: int) -> str:
    windows = -(-steps // t)
    poisson = accounting.epsilon_of(Releases(steps, k / t), sigma, DELTA)
    cap = accounting.epsilon_of(Releases(k * windows), sigma, DELTA)
    alloc = allocation.allocation_epsilon(Releases(k, window=t, windows=windows), sigma, DELTA, lower=True)
    return (f"| {sigma:g} | {k} | {t} | {steps} | {poisson:.3f} | {cap:.3f} ({k * windows} releases) | "
            f"{alloc.upper:.3f} | {alloc.lower:.3f} |")


def main() -> None:
    print("| σ | k | t | T | Poisson, q = k/t (assumed) | cap, k·⌈T/t⌉ unamplified (guaranteed) "
          "| random allocation, upper (guaranteed) | random allocation, lower |")
    print("|---|---|---|---|---|---|---|---|")
    for setting in SETTINGS:
        print(row(*setting), flush=True)


if __name__ == "__main__":
    main()
