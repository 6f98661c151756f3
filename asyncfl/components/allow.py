"""Which modules a ``"package.module:attribute"`` component name may import (docs/extending.md §3).

A scenario, a ``--set`` override and a run directory are data: they travel between people, and
reading one must not run code the reader did not choose to run. So a component name of the form
``"package.module:attribute"`` is imported only for a module the user allowed, in one of three
ways, which all feed the same list:

* the environment variable :data:`ENV` (``ASYNCFL_ALLOW_MODULES=mylab,otherlab.rules``);
* ``--allow-module MODULE`` (repeatable) on the commands that build runs from a scenario or a run
  directory (``run``, ``validate``, ``sweep``, ``resume``);
* :func:`allow_modules` from Python (``asyncfl.allow_modules("mylab")``).

An entry ``mylab`` allows the module ``mylab`` and every module below it (``mylab.rules``), never
``mylab_other``. The flag and the function also export the variable, so the worker processes of a
sweep, of ``run.executor = "processes"`` and of a local Ray instance inherit the permission.

Reading a run directory (:func:`reading`: ``load_run``, ``compare``, ``bias``, ``plot``, the
figures) never imports, allowed or not: it sees only what is registered. Torch-free.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from contextvars import ContextVar
from typing import Iterator

#: the environment variable listing the allowed modules, comma-separated
ENV = "ASYNCFL_ALLOW_MODULES"

_allowed: set[str] = set()
_reading: ContextVar[bool] = ContextVar("asyncfl_reading_run_dir", default=False)


def module_name_problem(name: object) -> str | None:
    """Why ``name`` is not a dotted module name (``a.b_c.d``), or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty module name"
    if not all(part.isidentifier() for part in name.split(".")):
        return "must be a dotted module name of Python identifiers (mylab, mylab.rules)"
    return None


def _from_env() -> set[str]:
    return {item.strip() for item in os.environ.get(ENV, "").split(",") if module_name_problem(item.strip()) is None}


def allowed() -> tuple[str, ...]:
    """Every allowed module (from :func:`allow_modules` and :data:`ENV`), sorted."""
    return tuple(sorted(_allowed | _from_env()))


def allow_modules(*names: str) -> tuple[str, ...]:
    """Allow scenarios and ``--set`` overrides to name components ``"MODULE:attribute"`` for each
    module of ``names`` and the modules below it, in this process and (through :data:`ENV`, which
    is updated) the worker processes it starts. Returns every allowed module. A name that is not a
    dotted module name is a :class:`ValueError` (nothing is allowed then)."""
    for name in names:
        problem = module_name_problem(name)
        if problem is not None:
            raise ValueError(f"allowed module {name!r}: {problem}")
    _allowed.update(names)
    everything = allowed()
    if everything:
        os.environ[ENV] = ",".join(everything)
    return everything


def is_allowed(module: str) -> bool:
    """Whether ``module`` (``a.b.c``) is allowed: it or one of its parents (``a``, ``a.b``) is."""
    permitted = _allowed | _from_env()
    parts = module.split(".")
    return any(".".join(parts[:i]) in permitted for i in range(1, len(parts) + 1))


def refusal(module: str) -> str:
    """Why a name in ``module`` is not imported, and the three ways to allow it (the one wording of
    every such refusal: components, trackers)."""
    return (f"names code in the module {module!r}, which asyncfl does not import unless you allow it (a scenario "
            f"or a run directory never runs code you did not choose). If you trust it: --allow-module {module} on "
            f"the command line, {ENV}={module} in the environment, or asyncfl.allow_modules({module!r}) in Python")


def load_attribute(module: str, attribute: str) -> object:
    """``module``'s (dotted) ``attribute``, for a module the caller found :func:`is_allowed`. Any
    failure — an exception or ``SystemExit`` on import, a missing attribute — is an
    :class:`ImportError` naming it: reported, never obeyed. Nothing found is called."""
    try:
        obj: object = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit on import included
        text = " ".join(str(exc).split())
        raise ImportError(f"importing {attribute!r} from the allowed module {module!r} failed ({type(exc).__name__}: "
                          f"{text if len(text) <= 200 else text[:197] + '...'})") from None
    return obj


def reset() -> None:
    """Forget the modules allowed from Python (tests); :data:`ENV` is left as it is."""
    _allowed.clear()


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Within: component names are looked up among the registered ones only, never imported
    (reading a run directory, whatever is allowed)."""
    token = _reading.set(True)
    try:
        yield
    finally:
        _reading.reset(token)


def is_reading() -> bool:
    return _reading.get()
