"""A synthetic twin of LEAF FEMNIST, generated offline (docs/tasks.md §18).

Shaped like FEMNIST — 28×28 grey images (784 float32 pixels in ``[0, 1]``, ink 1 on background 0),
62 classes, ``task.users`` writers (3,550 as in LEAF) with FEMNIST's per-writer sample counts, LEAF's
90/10 sample split — with a generative model a CNN can learn but not trivially. Everything below
depends on ``task.data_seed`` only (numpy generators seeded by ``SeedSequence([data_seed, part,
…])``); the run's seed only picks the ``population.clients`` writers (:mod:`asyncfl.datasets.users`)
and the initial model, and only the chosen writers are generated.

* **Counts**: writer ``w`` holds ``n_w = max(10, round(e^{m + s Z_w}))``, ``Z_w ~ N(0, 1)``, with
  ``s² = ln(1 + (σ/μ)²)`` and ``m = ln μ − s²/2`` so that ``e^{m+sZ}`` has FEMNIST's mean
  ``μ = 226.83`` and standard deviation ``σ = 88.94`` samples per writer.
* **Classes**: a sample's label is drawn from a fixed mix — digits (10 classes) 42 %, upper-case
  (26) 27 %, lower-case (26) 31 %, uniform within a group.
* **Prototypes**: class ``c`` is ``P_c(p) = max_j exp(−‖p − q_j‖² / (2·1.2²))`` over 120 points ``q_j``
  on 4 random quadratic Bézier strokes (control points uniform in ``[5, 23]²`` pixels).
* **Writer style** (scaled by ``task.style``): rotation ``N(0, (10° s)²)``, log-scale
  ``N(0, (0.1 s)²)``, shear ``N(0, (0.15 s)²)``, shift ``N(0, (1.5 px · s)²)`` per axis, stroke
  gamma ``e^{N(0, (0.3 s)²)}`` and ink ``U(0.7, 1)``.
* **Sample**: the prototype of its label warped by the writer's affine map composed with a jitter
  of its own (rotation ``N(0, 5°²)``, shift ``N(0, 1 px²)``) by bilinear resampling
  (``torch.nn.functional.grid_sample``), then ``ink · v^γ`` plus noise ``N(0, noise²)``, clipped
  to ``[0, 1]``.

Model: LEAF's FEMNIST CNN (or the 2NN MLP), as the femnist task.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import FEMNIST_CLASSES, FEMNIST_MEAN, FEMNIST_STD, IMAGE_SIDE, LEAF_TRAIN_FRACTION, FEMNISTTwinTask
from asyncfl.datasets.users import UserSelection
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task
from asyncfl.tasks.models import image_model

MIN_SAMPLES = 10
GROUPS = ((10, 0.42), (26, 0.27), (26, 0.31))  # (classes, share of samples): digits, upper, lower case
STROKES, POINTS_PER_STROKE, STROKE_SIGMA = 4, 30, 1.2
_COUNTS, _PROTOTYPES, _WRITER = 0, 1, 2  # the parts of the data seed's streams


def class_frequencies() -> np.ndarray:
    """The 62 label probabilities of :data:`GROUPS`."""
    return np.concatenate([np.full(n, share / n) for n, share in GROUPS])


def writer_counts(users: int, data_seed: int) -> np.ndarray:
    """``n_w`` for every writer (module doc)."""
    s2 = math.log(1 + (FEMNIST_STD / FEMNIST_MEAN) ** 2)
    m = math.log(FEMNIST_MEAN) - s2 / 2
    z = np.random.default_rng(np.random.SeedSequence([data_seed, _COUNTS])).standard_normal(users)
    return np.maximum(MIN_SAMPLES, np.rint(np.exp(m + math.sqrt(s2) * z))).astype(np.int64)


def prototypes(data_seed: int) -> np.ndarray:
    """``(62, 28, 28)`` float32 class prototypes (module doc)."""
    rng = np.random.default_rng(np.random.SeedSequence([data_seed, _PROTOTYPES]))
    grid = np.stack(np.meshgrid(np.arange(IMAGE_SIDE), np.arange(IMAGE_SIDE), indexing="ij"), -1).reshape(-1, 1, 2)
    t = np.linspace(0, 1, POINTS_PER_STROKE)[:, None]
    out = np.empty((FEMNIST_CLASSES, IMAGE_SIDE * IMAGE_SIDE))
    for c in range(FEMNIST_CLASSES):
        ctrl = rng.uniform(5, IMAGE_SIDE - 5, size=(STROKES, 3, 2))
        pts = np.concatenate([(1 - t) ** 2 * a + 2 * t * (1 - t) * b + t ** 2 * e for a, b, e in ctrl])  # (120, 2)
        d2 = ((grid - pts[None]) ** 2).sum(-1)
        out[c] = np.exp(-d2.min(axis=1) / (2 * STROKE_SIGMA ** 2))
    return out.reshape(FEMNIST_CLASSES, IMAGE_SIDE, IMAGE_SIDE).astype(np.float32)


def _affine(rot: np.ndarray, log_scale: np.ndarray, shear: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``(n, 3, 3)`` homogeneous maps ``shift ∘ rotation ∘ shear ∘ scale`` in grid_sample's
    normalised coordinates (a pixel is ``2/28`` wide)."""
    n = len(rot)
    c, s, k = np.cos(rot), np.sin(rot), np.exp(log_scale)
    A = np.zeros((n, 3, 3))
    A[:, 0, 0], A[:, 0, 1] = c * k, (c * shear - s) * k
    A[:, 1, 0], A[:, 1, 1] = s * k, (s * shear + c) * k
    A[:, :2, 2] = shift * (2.0 / IMAGE_SIDE)
    A[:, 2, 2] = 1.0
    return A


def writer_samples(protos: torch.Tensor, n: int, data_seed: int, writer: int, style: float, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of writer ``writer``: ``n`` images ``(n, 784)`` float32 and labels (module doc)."""
    rng = np.random.default_rng(np.random.SeedSequence([data_seed, _WRITER, writer]))
    deg = math.pi / 180
    W = _affine(rng.normal(0, 10 * deg * style, 1), rng.normal(0, 0.1 * style, 1), rng.normal(0, 0.15 * style, 1),
                rng.normal(0, 1.5 * style, (1, 2)))[0]
    gamma, ink = math.exp(rng.normal(0, 0.3 * style)), rng.uniform(0.7, 1.0)
    y = rng.choice(FEMNIST_CLASSES, size=n, p=class_frequencies())
    J = _affine(rng.normal(0, 5 * deg, n), np.zeros(n), np.zeros(n), rng.normal(0, 1.0, (n, 2)))
    theta = torch.from_numpy((W[None] @ J)[:, :2, :].astype(np.float32))
    grid = F.affine_grid(theta, [n, 1, IMAGE_SIDE, IMAGE_SIDE], align_corners=False)
    v = F.grid_sample(protos[torch.from_numpy(y)].unsqueeze(1), grid, align_corners=False).reshape(n, -1).numpy()
    x = ink * np.clip(v, 0, 1) ** gamma + rng.normal(0, noise, v.shape)
    return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int64)


def twin_writers(cfg: FEMNISTTwinTask, num_clients: int, seed: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray]]:
    """``(clients, test)``: the chosen writers' training samples (LEAF's 90 %: the first
    ``⌊0.9 n_w⌋``) and the rest of their samples pooled as the test set."""
    if num_clients > cfg.users:
        raise ScenarioError([f"population.clients = {num_clients}: the twin has task.users = {cfg.users} writers"])
    counts = writer_counts(cfg.users, cfg.data_seed)
    selection = UserSelection(num_clients, seed)
    for w in range(cfg.users):
        selection.offer(f"w{w:06d}", lambda w=w: w)
    protos = torch.from_numpy(prototypes(cfg.data_seed))
    clients, tests = [], []
    for _, w in selection.chosen():
        x, y = writer_samples(protos, int(counts[w]), cfg.data_seed, w, cfg.style, cfg.noise)
        cut = int(LEAF_TRAIN_FRACTION["femnist"] * len(y))
        clients.append((x[:cut], y[:cut]))
        tests.append((x[cut:], y[cut:]))
    return clients, (np.concatenate([x for x, _ in tests]), np.concatenate([y for _, y in tests]))


def build_femnist_twin(cfg: FEMNISTTwinTask, ctx: BuildContext) -> Task:
    """Build the femnist-twin task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    _, torch_seed = task_streams(seed)
    clients, test = twin_writers(cfg, num_clients, seed)
    side = IMAGE_SIDE
    return classification_task("femnist-twin", clients, test,
                               lambda: image_model(cfg.model, side * side, FEMNIST_CLASSES, cfg.hidden, side),
                               torch_seed, FEMNIST_CLASSES, batched=cfg.model == "mlp")
