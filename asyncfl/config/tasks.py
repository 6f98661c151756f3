"""The ``[task]`` section's variants, one per task that ships (docs/tasks.md).

Each variant accepts only its own keys; they are registered, with their builders
(``asyncfl.tasks.*``), in :data:`asyncfl.config.registries.TASKS`. Each also knows the sizes of
the task it describes before it is built (:class:`TaskSection`: the model's ``d``, samples per
client, bytes of data), which the memory estimate (:mod:`asyncfl.config.memory`) and the work
bound of a scenario use; ``tests/test_hostile.py`` checks them against built tasks. Torch-free.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from asyncfl.config.base import NonNegFloat, PosFloat, Section

#: Python and torch bookkeeping per client of a task (a ClientData and two tensors), measured
#: (about 1.5 kB a client on CPython 3.11 and torch 2.x, rounded up)
PER_CLIENT_OVERHEAD = 2048
#: synthetic task: the cap of the lognormal sample count and the training fraction (docs/tasks.md)
SYNTHETIC_MAX_SAMPLES = 5000
SYNTHETIC_TRAIN_FRACTION = 0.9
#: gaussian-mlp task: size of the test set
GAUSSIAN_TEST_SAMPLES = 2000
#: digits task: scikit-learn's bundled 8×8 digits
DIGITS_SAMPLES, DIGITS_FEATURES, DIGITS_CLASSES = 1797, 64, 10
#: mnist1d task: signal length and classes
MNIST1D_LENGTH, MNIST1D_CLASSES = 40, 10
MNIST1D_TRAIN, MNIST1D_TEST = 4000, 1000  # the canonical split of make_dataset()
#: mnist1d task: make_dataset()'s number of signals and its training fraction
MNIST1D_CANONICAL_SAMPLES, MNIST1D_TRAIN_FRACTION = 5000, 0.8


def _mlp_params(sizes: list[int]) -> int:
    """Parameters of ``Linear(s0, s1) − … − Linear(s_{L−1}, s_L)`` with biases."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


class TaskSection(Section):
    """The sizes of a task, known before it is built (the memory estimate of
    :mod:`asyncfl.config.memory` and the work bound of the scenario use them; docs/tasks.md).

    ``model_params()`` is the model's ``d``; ``itemsize`` the bytes of one parameter;
    ``mean_samples_per_client(N)`` the mean training samples per client; ``data_bytes(N)`` the
    bytes of the built task's data (clients' and test tensors) and ``build_bytes(N)`` the peak
    while building it, both including :data:`PER_CLIENT_OVERHEAD`; ``size_keys`` the keys that
    drive them (named when a scenario does not fit in memory).

    A task that cannot know a size before it is built (a user's data set on disk) keeps the
    default 0: the estimate then leaves that part out, and says nothing about it."""

    itemsize: ClassVar[int] = 4  # float32 (a class attribute: not a scenario key)

    def model_params(self) -> int:
        return 0

    def mean_samples_per_client(self, clients: int) -> float:
        return 0.0

    def sample_bytes(self) -> int:
        """Bytes of one sample: features in the task's dtype and the target."""
        return 0

    def test_samples(self, clients: int) -> float:
        return 0.0

    def data_bytes(self, clients: int) -> int:
        train = clients * self.mean_samples_per_client(clients)
        return int((train + self.test_samples(clients)) * self.sample_bytes()) + clients * PER_CLIENT_OVERHEAD

    def build_bytes(self, clients: int) -> int:
        return self.data_bytes(clients)

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients",)


# ---------------------------------------------------------------------------------------------
# [task]  (tag: name)
class QuadraticTask(TaskSection):
    """Least squares ``f_k(θ) = ½‖A_k θ − b_k‖²``; ``seed-1d`` is the seed's 2-client example."""

    name: Literal["quadratic"] = "quadratic"
    problem: Literal["seed-1d", "random"] = "random"
    dim: Annotated[int, Field(ge=1, le=10_000)] = 100
    samples_per_client: Annotated[int, Field(ge=1, le=10**6)] = 500
    noise: NonNegFloat = 1.0
    heterogeneity: NonNegFloat = 1.0  # spread of the clients' true models around a common one

    itemsize: ClassVar[int] = 8  # float64

    def model_params(self) -> int:
        return 1 if self.problem == "seed-1d" else self.dim

    def mean_samples_per_client(self, clients: int) -> float:
        return 2.0 if self.problem == "seed-1d" else float(self.samples_per_client)

    def sample_bytes(self) -> int:
        return (self.model_params() + 1) * 8  # a row of A_k and an entry of b_k

    def test_samples(self, clients: int) -> float:
        return 4.0 if self.problem == "seed-1d" else float(self.samples_per_client)

    def build_bytes(self, clients: int) -> int:
        return self.data_bytes(clients) + clients * self.model_params() * 8  # the client models θ_k

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients", "task.samples_per_client", "task.dim")


class SyntheticTask(TaskSection):
    """FedProx Synthetic(α, β) (docs/tasks.md); ``l2`` adds (l2/2)‖θ‖² to every client objective."""

    name: Literal["synthetic"] = "synthetic"
    alpha: NonNegFloat = 1.0
    beta: NonNegFloat = 1.0
    model: Literal["logreg", "mlp"] = "logreg"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 32
    dim: Annotated[int, Field(ge=1, le=100_000)] = 60
    classes: Annotated[int, Field(ge=2, le=10_000)] = 10
    l2: NonNegFloat = 0.0

    def model_params(self) -> int:
        return _mlp_params([self.dim, self.classes] if self.model == "logreg" else [self.dim, self.hidden, self.classes])

    def device_samples(self) -> float:
        """``E[n_k]``, ``n_k = min(⌊e^Z⌋ + 50, M)``, ``Z ~ N(4, 2²)``, ``M`` = the cap: with
        ``c = M − 50``, ``E[n_k] = E[e^Z; e^Z < c] − ½ P(e^Z < c) + 50 P(e^Z < c) + M P(e^Z ≥ c)``
        (the floor taken as −½ on average), ``E[e^Z; e^Z < c] = e^{μ+σ²/2} Φ((ln c − μ − σ²)/σ)``."""
        mu, sigma, cap = 4.0, 2.0, SYNTHETIC_MAX_SAMPLES
        c = cap - 50
        below = _normal_cdf((math.log(c) - mu) / sigma)
        partial = math.exp(mu + sigma**2 / 2) * _normal_cdf((math.log(c) - mu - sigma**2) / sigma)
        return partial + 49.5 * below + cap * (1.0 - below)

    def mean_samples_per_client(self, clients: int) -> float:
        return SYNTHETIC_TRAIN_FRACTION * self.device_samples()

    def sample_bytes(self) -> int:
        return self.dim * 4 + 8

    def test_samples(self, clients: int) -> float:
        return clients * (1.0 - SYNTHETIC_TRAIN_FRACTION) * self.device_samples()

    def build_bytes(self, clients: int) -> int:
        # every device's samples, then the clients' copies of their training part, then the test set
        devices = clients * self.device_samples() * self.sample_bytes()
        generators = clients * (self.dim * self.classes + self.dim + self.classes) * 8
        return self.data_bytes(clients) + int(devices) + generators

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients", "task.dim")


class DigitsTask(TaskSection):
    """scikit-learn's bundled 8×8 digits, split non-IID by Dirichlet(``dirichlet_alpha``)."""

    name: Literal["digits"] = "digits"
    dirichlet_alpha: PosFloat = 0.3
    model: Literal["mlp", "cnn", "logreg"] = "mlp"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 64
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.2

    def model_params(self) -> int:
        if self.model == "logreg":
            return _mlp_params([DIGITS_FEATURES, DIGITS_CLASSES])
        if self.model == "mlp":
            return _mlp_params([DIGITS_FEATURES, self.hidden, DIGITS_CLASSES])
        return (9 * 8 + 8) + _mlp_params([8 * 4 * 4, DIGITS_CLASSES])  # Conv2d(1, 8, 3), Linear(128, 10)

    def mean_samples_per_client(self, clients: int) -> float:
        return DIGITS_SAMPLES * (1.0 - self.test_fraction) / clients

    def sample_bytes(self) -> int:
        return DIGITS_FEATURES * 4 + 8

    def test_samples(self, clients: int) -> float:
        return DIGITS_SAMPLES * self.test_fraction

    def build_bytes(self, clients: int) -> int:
        return self.data_bytes(clients) + DIGITS_SAMPLES * (DIGITS_FEATURES * 12 + 8)  # scikit-learn's float64 copy

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients", "task.hidden")


class GaussianMLPTask(TaskSection):
    """Gaussian inputs, labels = argmax of a fixed random linear map, a one-hidden-layer MLP.
    ``label_alpha`` (unset: IID clients) skews every client's labels: its class proportions are
    drawn from Dir(label_alpha · 1), and the test set is class-balanced (docs/tasks.md §5)."""

    name: Literal["gaussian-mlp"] = "gaussian-mlp"
    dim: Annotated[int, Field(ge=1, le=100_000)] = 32
    classes: Annotated[int, Field(ge=2, le=10_000)] = 10
    samples_per_client: Annotated[int, Field(ge=1, le=10**6)] = 50
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 64
    label_alpha: PosFloat | None = None

    def model_params(self) -> int:
        return _mlp_params([self.dim, self.hidden, self.classes])

    def mean_samples_per_client(self, clients: int) -> float:
        return float(self.samples_per_client)

    def sample_bytes(self) -> int:
        return self.dim * 4 + 8

    def test_samples(self, clients: int) -> float:
        return float(GAUSSIAN_TEST_SAMPLES)

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients", "task.samples_per_client", "task.dim")


class MNIST1DTask(TaskSection):
    """The canonical MNIST-1D (``mnist1d.data.make_dataset()``, generated offline): its 4000
    training signals split non-IID by Dirichlet(``dirichlet_alpha``), its 1000 test signals the
    test set (docs/tasks.md §6). ``samples`` (unset: the canonical 5000) asks ``make_dataset``
    for more signals from the same templates and seed, for populations beyond 4000 clients."""

    name: Literal["mnist1d"] = "mnist1d"
    dirichlet_alpha: PosFloat = 0.3
    model: Literal["mlp", "cnn", "logreg"] = "mlp"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 100
    samples: Annotated[int, Field(ge=100, le=2_000_000)] | None = None

    @property
    def train_test(self) -> tuple[int, int]:
        """(training, test) signals: 4000/1000 canonically, else make_dataset's 80/20 cut."""
        if self.samples is None:
            return MNIST1D_TRAIN, MNIST1D_TEST
        train = int(self.samples * MNIST1D_TRAIN_FRACTION)
        return train, self.samples - train

    def model_params(self) -> int:
        if self.model == "logreg":
            return _mlp_params([MNIST1D_LENGTH, MNIST1D_CLASSES])
        if self.model == "mlp":
            return _mlp_params([MNIST1D_LENGTH, self.hidden, self.hidden, MNIST1D_CLASSES])
        # Conv1d(1, 16, 5), Conv1d(16, 16, 5), Linear(16 · LENGTH/4, 10)
        return (5 * 16 + 16) + (16 * 16 * 5 + 16) + _mlp_params([16 * (MNIST1D_LENGTH // 4), MNIST1D_CLASSES])

    def mean_samples_per_client(self, clients: int) -> float:
        return self.train_test[0] / clients

    def sample_bytes(self) -> int:
        return MNIST1D_LENGTH * 4 + 8

    def test_samples(self, clients: int) -> float:
        return float(self.train_test[1])

    def build_bytes(self, clients: int) -> int:
        # make_dataset's float64 signals (train and test), kept cached once per process
        return self.data_bytes(clients) + sum(self.train_test) * MNIST1D_LENGTH * 8 * 3

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients", "task.samples", "task.model", "task.hidden")


TaskConfig = QuadraticTask | SyntheticTask | DigitsTask | GaussianMLPTask | MNIST1DTask
