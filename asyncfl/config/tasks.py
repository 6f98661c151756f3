"""The ``[task]`` section's variants, one per task that ships (docs/tasks.md).

Each variant accepts only its own keys; they are registered, with their builders
(``asyncfl.tasks.*``), in :data:`asyncfl.config.registries.TASKS`. Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from asyncfl.config.base import NonNegFloat, PosFloat, Section


# ---------------------------------------------------------------------------------------------
# [task]  (tag: name)
class QuadraticTask(Section):
    """Least squares ``f_k(θ) = ½‖A_k θ − b_k‖²``; ``seed-1d`` is the seed's 2-client example."""

    name: Literal["quadratic"] = "quadratic"
    problem: Literal["seed-1d", "random"] = "random"
    dim: Annotated[int, Field(ge=1, le=10_000)] = 100
    samples_per_client: Annotated[int, Field(ge=1, le=10**6)] = 500
    noise: NonNegFloat = 1.0
    heterogeneity: NonNegFloat = 1.0  # spread of the clients' true models around a common one


class SyntheticTask(Section):
    """FedProx Synthetic(α, β) (docs/tasks.md); ``l2`` adds (l2/2)‖θ‖² to every client objective."""

    name: Literal["synthetic"] = "synthetic"
    alpha: NonNegFloat = 1.0
    beta: NonNegFloat = 1.0
    model: Literal["logreg", "mlp"] = "logreg"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 32
    dim: Annotated[int, Field(ge=1, le=100_000)] = 60
    classes: Annotated[int, Field(ge=2, le=10_000)] = 10
    l2: NonNegFloat = 0.0


class DigitsTask(Section):
    """scikit-learn's bundled 8×8 digits, split non-IID by Dirichlet(``dirichlet_alpha``)."""

    name: Literal["digits"] = "digits"
    dirichlet_alpha: PosFloat = 0.3
    model: Literal["mlp", "cnn", "logreg"] = "mlp"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 64
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2


class GaussianMLPTask(Section):
    """Gaussian inputs, labels = argmax of a fixed random linear map, a one-hidden-layer MLP."""

    name: Literal["gaussian-mlp"] = "gaussian-mlp"
    dim: Annotated[int, Field(ge=1, le=100_000)] = 32
    classes: Annotated[int, Field(ge=2, le=10_000)] = 10
    samples_per_client: Annotated[int, Field(ge=1, le=10**6)] = 50
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 64


class MNIST1DTask(Section):
    """The canonical MNIST-1D (``mnist1d.data.make_dataset()``, generated offline): its 4000
    training signals split non-IID by Dirichlet(``dirichlet_alpha``), its 1000 test signals the
    test set (docs/tasks.md §6)."""

    name: Literal["mnist1d"] = "mnist1d"
    dirichlet_alpha: PosFloat = 0.3
    model: Literal["mlp", "cnn", "logreg"] = "mlp"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 100


TaskConfig = QuadraticTask | SyntheticTask | DigitsTask | GaussianMLPTask | MNIST1DTask
