"""The ``weibull`` latency model: a job's base latency is ``scale × Weibull(shape)``."""

import numpy as np


def draw(cfg, rng: np.random.Generator) -> float:
    return float(cfg.scale * rng.weibull(cfg.shape))
