"""LEAF's JSON data sets: FEMNIST and Shakespeare (docs/tasks.md §13–14).

LEAF (Caldas et al., 2018) writes every split of a data set as JSON files under ``train/`` and
``test/``, each holding ``{"users": [id, …], "num_samples": [n, …], "user_data": {id: {"x": […],
"y": […]}}}`` with ``len(x) = len(y) = n`` for every user. Its sample split (``-t sample``) puts a
fraction of every user's samples in ``test/`` under the same id.

* FEMNIST: ``x`` a list of 784 floats (a 28×28 image, row-major, in ``[0, 1]``), ``y`` an int in
  ``[0, 62)`` (digits, then upper-case, then lower-case letters).
* Shakespeare: ``x`` a string of 80 characters, ``y`` the next character; characters are coded by
  their position in LEAF's 80-character alphabet :data:`LEAF_CHARACTERS` (a character outside it
  is refused, naming the file and the user).

The clients are ``N`` users chosen by :mod:`asyncfl.datasets.users` among those with at least
``min_samples`` training samples, read one file at a time; the test set is the chosen users' test
samples. Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np

from asyncfl.datasets.files import read_file, refuse
from asyncfl.datasets.users import UserSelection
from asyncfl.errors import ScenarioError

#: LEAF's Shakespeare alphabet (its ``ALL_LETTERS``): a character's code is its position here
LEAF_CHARACTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
FEMNIST_PIXELS, FEMNIST_CLASSES = 784, 62
SHAKESPEARE_SEQ = 80
_CODE = {c: i for i, c in enumerate(LEAF_CHARACTERS)}

Arrays = tuple[np.ndarray, np.ndarray]
Convert = Callable[[list, list, Path, str], Arrays]


def leaf_files(folder: Path) -> list[Path]:
    """The ``*.json`` files of ``folder``, in name order."""
    files = sorted(p for p in folder.iterdir() if p.suffix == ".json" and p.is_file()) if folder.is_dir() else []
    if not files:
        raise refuse(folder, "no LEAF .json file in this folder")
    return files


def read_leaf_file(path: Path) -> dict[str, tuple[list, list]]:
    """``{user: (x, y)}`` of one LEAF JSON file, after checking its structure."""
    try:
        doc = json.loads(read_file(path))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise refuse(path, f"not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or not all(k in doc for k in ("users", "num_samples", "user_data")):
        raise refuse(path, "not a LEAF file: expected a JSON object with 'users', 'num_samples' and 'user_data'")
    users, counts, data = doc["users"], doc["num_samples"], doc["user_data"]
    if not isinstance(users, list) or not isinstance(counts, list) or len(users) != len(counts) or not isinstance(data, dict):
        raise refuse(path, "'users' and 'num_samples' must be lists of the same length and 'user_data' an object")
    out: dict[str, tuple[list, list]] = {}
    for user, n in zip(users, counts):
        if not isinstance(user, str) or isinstance(n, bool) or not isinstance(n, int):
            raise refuse(path, f"user {str(user)[:40]!r}: ids must be strings and num_samples integers")
        entry = data.get(user)
        if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) or not isinstance(entry.get("y"), list):
            raise refuse(path, f"user {user[:40]!r}: user_data must hold lists 'x' and 'y'")
        if not len(entry["x"]) == len(entry["y"]) == n:
            raise refuse(path, f"user {user[:40]!r}: num_samples says {n}, 'x' holds {len(entry['x'])} and 'y' "
                               f"{len(entry['y'])}")
        if user in out:
            raise refuse(path, f"user {user[:40]!r} is listed twice")
        out[user] = (entry["x"], entry["y"])
    return out


def femnist_arrays(x: list, y: list, path: Path, user: str) -> Arrays:
    """``(n, 784)`` float32 pixels and ``(n,)`` int64 labels of one FEMNIST user."""
    try:
        xs = np.asarray(x, dtype=np.float32)
        ys = np.asarray(y, dtype=np.int64)
    except (ValueError, TypeError):
        raise refuse(path, f"user {user[:40]!r}: 'x' must be lists of {FEMNIST_PIXELS} numbers and 'y' integers") from None
    if xs.ndim != 2 or xs.shape[1] != FEMNIST_PIXELS:
        raise refuse(path, f"user {user[:40]!r}: an image must have {FEMNIST_PIXELS} pixels (28×28), found shape {xs.shape}")
    if not np.isfinite(xs).all():
        raise refuse(path, f"user {user[:40]!r}: pixels must be finite numbers")
    if any(isinstance(v, (bool, float)) for v in y) or (len(ys) and (ys.min() < 0 or ys.max() >= FEMNIST_CLASSES)):
        raise refuse(path, f"user {user[:40]!r}: labels must be integers in [0, {FEMNIST_CLASSES - 1}]")
    return xs.reshape(len(ys), FEMNIST_PIXELS), ys


def shakespeare_arrays(x: list, y: list, path: Path, user: str) -> Arrays:
    """``(n, 80)`` uint8 character codes and ``(n,)`` int64 codes of the next character."""
    if not all(isinstance(s, str) and len(s) == SHAKESPEARE_SEQ for s in x):
        raise refuse(path, f"user {user[:40]!r}: every 'x' must be a string of {SHAKESPEARE_SEQ} characters")
    if not all(isinstance(s, str) and len(s) == 1 for s in y):
        raise refuse(path, f"user {user[:40]!r}: every 'y' must be one character")
    text = "".join(x) + "".join(y)
    bad = set(text) - _CODE.keys()
    if bad:
        raise refuse(path, f"user {user[:40]!r}: character {sorted(bad)[0]!r} is not in LEAF's 80-character alphabet")
    codes = np.frombuffer(text.encode("latin-1"), dtype=np.uint8)  # every LEAF character is ASCII
    table = np.zeros(256, dtype=np.uint8)
    table[[ord(c) for c in LEAF_CHARACTERS]] = np.arange(len(LEAF_CHARACTERS), dtype=np.uint8)
    coded = table[codes]
    n = len(y)
    return coded[: n * SHAKESPEARE_SEQ].reshape(n, SHAKESPEARE_SEQ), coded[n * SHAKESPEARE_SEQ:].astype(np.int64)


def read_leaf(root: Path, convert: Convert, users: int, seed: int, min_samples: int = 1) -> tuple[list[tuple[str, Arrays]], Arrays]:
    """``(clients, test)``: the ``users`` chosen users' training arrays (``[(id, (x, y)), …]`` in
    client order) and their test samples pooled in the same order, from ``root/train`` and
    ``root/test``."""
    selection = UserSelection(users, seed)
    seen: set[str] = set()
    eligible = 0
    for path in leaf_files(root / "train"):
        for user, (x, y) in read_leaf_file(path).items():
            if user in seen:
                raise refuse(path, f"user {user[:40]!r} also appears in another training file")
            seen.add(user)
            if len(y) >= min_samples:
                eligible += 1
                selection.offer(user, lambda x=x, y=y, p=path, u=user: convert(x, y, p, u))
    if eligible < users:
        raise ScenarioError([f"population.clients = {users}: {root / 'train'} holds {eligible} users with at least "
                             f"task.min_samples = {min_samples} training samples"])
    chosen = selection.chosen()
    wanted = {user for user, _ in chosen}
    test: dict[str, Arrays] = {}
    for path in leaf_files(root / "test"):
        for user, (x, y) in read_leaf_file(path).items():
            if user in wanted:
                if user in test:
                    raise refuse(path, f"user {user[:40]!r} also appears in another test file")
                test[user] = convert(x, y, path, user)
    parts = [test[u] for u, _ in chosen if u in test]
    if not parts:
        raise refuse(root / "test", "none of the chosen users has a test sample")
    return chosen, (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

