"""Start-up cost of a small run (issue 34 item 4): a 20-step ``asyncfl run`` against a bare
``python -c "import torch"``.

Both commands run as fresh processes, interleaved (torch, run, torch, run, …) so that a change in
the machine's load hits both alike, ``--repeat`` times each. Per command it prints the median and
the spread (min–max) of the wall time and of the CPU time (user + system of the child, which a
shared machine's load inflates far less than the wall time), then the overhead of the run over
importing torch: median(run) − median(torch), for both clocks. The run must still write its bias
report (``bias.json``) and its figure (``metrics.png``); the benchmark checks both exist after
every run.

    python -m benchmarks.startup [--repeat 7] [--scenario scenarios/quickstart.toml] [--steps 20] [--set KEY=VALUE ...]
                                 [--compare ROOT ...] [--bare-exit] [--bytecode cached|source]

``--set`` passes scenario overrides to every run, e.g. issue 34's 20-step run on the quadratic task
(docs/performance.md, "Start-up")::

    python -m benchmarks.startup --set 'task={name="quadratic", problem="random", dim=20, samples_per_client=50}' \
        --set client.lr=0.004

``--compare ROOT`` (repeatable) also times the same run from another checkout (its own
``PYTHONPATH``), in the same interleaving: a before/after comparison under the same load.
``--bare-exit`` also times ``python -c "import torch, os; os._exit(0)"``: importing torch without
the interpreter's teardown at exit (0.4 s of CPU on the VM of docs/performance.md), which
``asyncfl``'s commands skip (asyncfl/lifecycle.py), so that the overhead can be read against
either reference.

``--bytecode cached`` (the default) measures what an installed asyncfl costs: every command runs
with its compiled bytecode cached (in a temporary ``PYTHONPYCACHEPREFIX``, so no checkout is
written to), after one untimed round that fills the cache; torch's bytecode is cached in the same
way. ``--bytecode source`` runs with ``PYTHONDONTWRITEBYTECODE=1`` as a shell that sets it does,
so that each run compiles asyncfl's modules from source again (about 0.3–0.4 s of CPU on the
2-core VM of docs/performance.md) while torch's bytecode comes from site-packages.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], root: Path = ROOT, env: dict[str, str] | None = None) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of one run of ``cmd`` as a child process in ``root`` (on
    its ``PYTHONPATH``; the environment ``env``, default this one; fails loudly on a non-zero exit)."""
    env = dict(os.environ if env is None else env, PYTHONPATH=str(root))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def describe(label: str, values: list[float]) -> str:
    return f"{label} median {statistics.median(values):6.3f} s  (min {min(values):.3f}, max {max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs of each command (interleaved)")
    parser.add_argument("--scenario", default="scenarios/quickstart.toml")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a scenario override for every run (repeatable)")
    parser.add_argument("--compare", type=Path, action="append", default=[],
                        help="another checkout whose run is timed alongside (repeatable)")
    parser.add_argument("--bare-exit", action="store_true",
                        help="also time importing torch without the interpreter's teardown (os._exit)")
    parser.add_argument("--bytecode", choices=("cached", "source"), default="cached",
                        help="cached: compiled bytecode cached, as an installed package runs (default); "
                             "source: PYTHONDONTWRITEBYTECODE=1, asyncfl compiled from source on every run")
    args = parser.parse_args(argv)
    roots = {"run": ROOT, **{f"compare{i}": root.resolve() for i, root in enumerate(args.compare)}}
    py = sys.executable
    env_note = f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, {env_note} (start)")
    references = {"torch": [py, "-c", "import torch"],
                  **({"bare": [py, "-c", "import torch, os; os._exit(0)"]} if args.bare_exit else {})}
    samples: dict[str, list[tuple[float, float]]] = {**{name: [] for name in references}, **{name: [] for name in roots}}
    overrides = [a for kv in (*args.overrides, f"run.steps={args.steps}") for a in ("--set", kv)]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if args.bytecode == "cached":
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        print(f"bytecode: {args.bytecode}")
        for i in range(-1 if args.bytecode == "cached" else 0, args.repeat):  # round -1 fills the cache, untimed
            for name, cmd in references.items():
                sample = timed(cmd, env=env)
                if i >= 0:
                    samples[name].append(sample)
            for name, root in roots.items():
                out = Path(tmp) / f"{name}{i}"
                run_cmd = [py, "-m", "asyncfl", "run", args.scenario, *overrides, "--out", str(out), "--quiet"]
                sample = timed(run_cmd, root, env)
                if i >= 0:
                    samples[name].append(sample)
                missing = [f for f in ("bias.json", "metrics.png") if not (out / f).is_file()]
                if missing:
                    raise SystemExit(f"the run from {root} did not write {', '.join(missing)}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (end)")
    labels = {"torch": "python -c 'import torch'", "bare": "python -c 'import torch, os; os._exit(0)'",
              **{name: f"asyncfl run, {args.steps} steps ({root})" for name, root in roots.items()}}
    for name in samples:
        walls, cpus = [w for w, _ in samples[name]], [c for _, c in samples[name]]
        print(f"{labels[name]}:")
        print("  " + describe("wall", walls))
        print("  " + describe("CPU ", cpus))
    over = {"torch": "importing torch", "bare": "importing torch without the teardown"}
    for reference in references:
        for name in roots:
            for clock, index in (("wall", 0), ("CPU", 1)):
                run = statistics.median(s[index] for s in samples[name])
                base = statistics.median(s[index] for s in samples[reference])
                print(f"overhead over {over[reference]}, {labels[name]} ({clock}): {run - base:.3f} s"
                      f" (ratio {run / base:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
