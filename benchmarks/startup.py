"""Start-up cost of a small run (issue 34 item 4): a 20-step ``asyncfl run`` against a bare
``python -c "import torch"``.

Both commands run as fresh processes, interleaved (torch, run, torch, run, …) so that a change in
the machine's load hits both alike, ``--repeat`` times each. Per command it prints the median and
the spread (min–max) of the wall time and of the CPU time (user + system of the child, which a
shared machine's load inflates far less than the wall time), then the overhead of the run over
importing torch: median(run) − median(torch), for both clocks. The run must still write its bias
report (``bias.json``) and its figure (``metrics.png``); the benchmark checks both exist after
every run.

    python -m benchmarks.startup [--repeat 7] [--scenario scenarios/quickstart.toml] [--steps 20] [--compare ROOT]
                                 [--bytecode cached|source]

``--compare ROOT`` also times the same run from another checkout (its own ``PYTHONPATH``), in the
same interleaving: a before/after comparison under the same load.

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
    parser.add_argument("--compare", type=Path, help="another checkout whose run is timed alongside")
    parser.add_argument("--bytecode", choices=("cached", "source"), default="cached",
                        help="cached: compiled bytecode cached, as an installed package runs (default); "
                             "source: PYTHONDONTWRITEBYTECODE=1, asyncfl compiled from source on every run")
    args = parser.parse_args(argv)
    roots = {"run": ROOT, **({"compare": args.compare.resolve()} if args.compare else {})}
    py = sys.executable
    env_note = f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, {env_note} (start)")
    torch_cmd = [py, "-c", "import torch"]
    samples: dict[str, list[tuple[float, float]]] = {"torch": [], **{name: [] for name in roots}}
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if args.bytecode == "cached":
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        print(f"bytecode: {args.bytecode}")
        for i in range(-1 if args.bytecode == "cached" else 0, args.repeat):  # round -1 fills the cache, untimed
            sample = timed(torch_cmd, env=env)
            if i >= 0:
                samples["torch"].append(sample)
            for name, root in roots.items():
                out = Path(tmp) / f"{name}{i}"
                run_cmd = [py, "-m", "asyncfl", "run", args.scenario, "--set", f"run.steps={args.steps}", "--out", str(out),
                           "--quiet"]
                sample = timed(run_cmd, root, env)
                if i >= 0:
                    samples[name].append(sample)
                missing = [f for f in ("bias.json", "metrics.png") if not (out / f).is_file()]
                if missing:
                    raise SystemExit(f"the run from {root} did not write {', '.join(missing)}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (end)")
    labels = {"torch": "python -c 'import torch'", "run": f"asyncfl run, {args.steps} steps ({ROOT})",
              "compare": f"asyncfl run, {args.steps} steps ({args.compare})"}
    for name in samples:
        walls, cpus = [w for w, _ in samples[name]], [c for _, c in samples[name]]
        print(f"{labels[name]}:")
        print("  " + describe("wall", walls))
        print("  " + describe("CPU ", cpus))
    for name in roots:
        for clock, index in (("wall", 0), ("CPU", 1)):
            overhead = (statistics.median(s[index] for s in samples[name])
                        - statistics.median(s[index] for s in samples["torch"]))
            print(f"overhead over importing torch, {labels[name]} ({clock}): {overhead:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
