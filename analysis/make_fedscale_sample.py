"""Generate the small FedScale-format sample shipped in ``asyncfl/data/`` (issue 9 item 2).

``python -m analysis.make_fedscale_sample [OUT_DIR]`` writes

* ``fedscale_sample_devices.pkl``: ``{client_id: {"computation": ms per sample,
  "communication": kbit/s}}`` for 24 devices (ids 1..24, as in FedScale's files);
  computation ~ LogNormal(ln 20, 0.6) ms/sample, communication ~ LogNormal(ln 2000, 1.0) kbit/s;
* ``fedscale_sample_availability.pkl``: ``{client_id: {"active": [...], "inactive": [...],
  "finish_time": 3600.0, "duration": ..., "model": "sample-device"}}``: alternating online
  sessions ~ U[60, 600] s and offline gaps ~ U[30, 900] s over one hour, repeated (FedScale's
  ``cur_time % finish_time``).

Values are plain Python ``int``/``float``/``str`` in ``dict``/``list`` (no numpy scalars), so the
restricted unpickler of ``asyncfl.clients.fedscale`` reads them; the output is a pure function of SEED.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

SEED = 20240609
DEVICES = 24
FINISH = 3600.0


def devices(rng: np.random.Generator) -> dict[int, dict[str, float]]:
    comp = np.exp(np.log(20.0) + 0.6 * rng.standard_normal(DEVICES))
    comm = np.exp(np.log(2000.0) + 1.0 * rng.standard_normal(DEVICES))
    return {i + 1: {"computation": round(float(comp[i]), 3), "communication": round(float(comm[i]), 3)} for i in range(DEVICES)}


def availability(rng: np.random.Generator) -> dict[int, dict[str, object]]:
    out: dict[int, dict[str, object]] = {}
    for i in range(DEVICES):
        t = float(rng.uniform(0.0, 600.0))  # the first session starts somewhere in the first 10 minutes
        active, inactive = [], []
        while True:
            end = t + float(rng.uniform(60.0, 600.0))
            if end > FINISH:
                break
            active.append(round(t, 1))
            inactive.append(round(end, 1))
            t = end + float(rng.uniform(30.0, 900.0))
        out[i + 1] = {"active": active, "inactive": inactive, "finish_time": FINISH,
                      "duration": FINISH, "model": "sample-device"}
    return out


def main(out_dir: str | Path = Path(__file__).resolve().parents[1] / "asyncfl" / "data") -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for name, data in (("fedscale_sample_devices.pkl", devices(rng)), ("fedscale_sample_availability.pkl", availability(rng))):
        (out / name).write_bytes(pickle.dumps(data, protocol=4))
        print(out / name)


if __name__ == "__main__":
    main(*sys.argv[1:])
