"""The ``weibull`` latency model: a job's base latency is ``scale × Weibull(shape)``."""

import numpy as np


def draw(cfg, rng: np.random.Generator) -> float:
    return float(cfg.scale * rng.weibull(cfg.shape))


def build(cfg, ctx):
    """The component's builder (``build(cfg, ctx)``, mode ``draw``): the draw bound to its config."""
    return lambda rng: draw(cfg, rng)
