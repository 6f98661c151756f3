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
``min_samples`` training samples, read one file at a time. The test set depends on LEAF's split:

* sample split (``-t sample``: the users of ``test/`` are users of ``train/``): the chosen users'
  test samples, pooled in client order;
* by-writer split (``-t user``: no user of ``test/`` is a user of ``train/``, LEAF having held
  whole writers out): the chosen writers have no test sample of their own, so the test set is
  every held-out writer's samples pooled — accuracy on writers never trained on. A note says so.

The files are read as LEAF writes them. Each user's ``x`` and ``y`` must have the same length,
and those lists are trusted over ``num_samples``: LEAF's ``split_data.py`` keeps, for
Shakespeare's sample split, the test windows from ``num_train + 79`` on (the 79 windows after the
training ones overlap the training text) but records ``num_samples`` as every window after the
training ones, so every real Shakespeare test file says ``num_samples = len(x) + 79``. The
mismatch is reported once, as a note counting the users (:func:`miscount_note`), not as an error.
Torch-free.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from asyncfl.datasets.files import read_file, refuse
from asyncfl.datasets.users import UserSelection
from asyncfl.errors import ScenarioError

#: LEAF's Shakespeare alphabet (its ``ALL_LETTERS``): a character's code is its position here
LEAF_CHARACTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
FEMNIST_PIXELS, FEMNIST_CLASSES = 784, 62
SHAKESPEARE_SEQ = 80
_CODE = {c: i for i, c in enumerate(LEAF_CHARACTERS)}

#: how many windows LEAF's split_data.py drops from every Shakespeare test file but still counts
LEAF_SHAKESPEARE_DROPPED = SHAKESPEARE_SEQ - 1
log = logging.getLogger("asyncfl.datasets")

Arrays = tuple[np.ndarray, np.ndarray]
Convert = Callable[[list, list, Path, str], Arrays]


class Miscount(NamedTuple):
    """A user whose ``num_samples`` differs from the samples its lists hold."""

    path: Path
    user: str
    declared: int
    listed: int


def leaf_files(folder: Path) -> list[Path]:
    """The ``*.json`` files of ``folder``, in name order; one that is not a regular file (a
    directory, a pipe, a device, a link to one) is refused, naming it."""
    if not folder.is_dir():
        raise refuse(folder, "no such folder (LEAF writes train/ and test/ folders of .json files)")
    files = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    for path in files:
        if not path.is_file():
            raise refuse(path, "not a regular file (a folder, a pipe, a device or a broken link cannot be a LEAF "
                               "file); move it out of the folder")
    if not files:
        raise refuse(folder, "no LEAF .json file in this folder")
    return files


def read_leaf_file(path: Path, miscounts: list[Miscount] | None = None) -> dict[str, tuple[list, list]]:
    """``{user: (x, y)}`` of one LEAF JSON file, after checking its structure. A user whose
    ``num_samples`` differs from ``len(x) = len(y)`` is kept with its lists and appended to
    ``miscounts`` (module doc)."""
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
        if not isinstance(user, str) or isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise refuse(path, f"user {str(user)[:40]!r}: ids must be strings and num_samples non-negative integers")
        entry = data.get(user)
        if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) or not isinstance(entry.get("y"), list):
            raise refuse(path, f"user {user[:40]!r}: user_data must hold lists 'x' and 'y'")
        if len(entry["x"]) != len(entry["y"]):
            raise refuse(path, f"user {user[:40]!r}: 'x' holds {len(entry['x'])} samples and 'y' {len(entry['y'])} "
                               "labels; they must pair up")
        if len(entry["y"]) != n and miscounts is not None:
            miscounts.append(Miscount(path, user, n, len(entry["y"])))
        if user in out:
            raise refuse(path, f"user {user[:40]!r} is listed twice")
        out[user] = (entry["x"], entry["y"])
    return out


def miscount_note(miscounts: list[Miscount]) -> str | None:
    """The one note for every user whose ``num_samples`` differs from its lists (None if none)."""
    if not miscounts:
        return None
    files = len({m.path for m in miscounts})
    first = miscounts[0]
    quirk = all(m.declared - m.listed == LEAF_SHAKESPEARE_DROPPED and m.path.parent.name == "test" for m in miscounts)
    cause = (f"all test files, each by +{LEAF_SHAKESPEARE_DROPPED}: LEAF's split_data.py counts the "
             f"{LEAF_SHAKESPEARE_DROPPED} windows it drops from Shakespeare's test text (they overlap the training text)"
             if quirk else f"e.g. {first.path.name}: user {first.user[:40]!r} says {first.declared} and lists {first.listed}")
    n = len(miscounts)
    return (f"note: {n} user{'s' if n > 1 else ''} in {files} LEAF file{'s' if files > 1 else ''} "
            f"{'have' if n > 1 else 'has'} num_samples different from the samples listed "
            f"({cause}); the samples listed are used")


def femnist_arrays(x: list, y: list, path: Path, user: str) -> Arrays:
    """``(n, 784)`` float32 pixels and ``(n,)`` int64 labels of one FEMNIST user."""
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < FEMNIST_CLASSES for v in y):
        raise refuse(path, f"user {user[:40]!r}: labels must be integers in [0, {FEMNIST_CLASSES - 1}]")
    try:
        xs = np.asarray(x, dtype=np.float32)
    except (ValueError, TypeError, OverflowError):
        raise refuse(path, f"user {user[:40]!r}: 'x' must be lists of {FEMNIST_PIXELS} numbers") from None
    if xs.ndim != 2 or xs.shape[1] != FEMNIST_PIXELS:
        raise refuse(path, f"user {user[:40]!r}: an image must have {FEMNIST_PIXELS} pixels (28×28), found shape {xs.shape}")
    if not np.isfinite(xs).all():
        raise refuse(path, f"user {user[:40]!r}: pixels must be finite numbers")
    ys = np.asarray(y, dtype=np.int64)
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
    client order) and the test set (module doc: the chosen users' test samples pooled in the same
    order, or, for LEAF's by-writer split, every held-out writer's samples), from ``root/train``
    and ``root/test``. Notes (miscounted users, the by-writer split) are logged once each."""
    selection = UserSelection(users, seed)
    miscounts: list[Miscount] = []
    seen: set[str] = set()
    eligible = 0
    for path in leaf_files(root / "train"):
        for user, (x, y) in read_leaf_file(path, miscounts).items():
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
    own: dict[str, Arrays] = {}  # the chosen users' test samples (sample split)
    held_out: list[Arrays] = []  # the test samples of writers with no training samples (by-writer split)
    tested: set[str] = set()
    for path in leaf_files(root / "test"):
        for user, (x, y) in read_leaf_file(path, miscounts).items():
            if user in tested:
                raise refuse(path, f"user {user[:40]!r} also appears in another test file")
            tested.add(user)
            if user in wanted:
                own[user] = convert(x, y, path, user)
            elif user not in seen and y:
                held_out.append(convert(x, y, path, user))
    note = miscount_note(miscounts)
    if note:
        log.warning("%s", note)
    if not tested & seen:  # LEAF's -t user: the test writers are not training writers
        if not held_out:
            raise refuse(root / "test", "holds no test sample")
        log.warning("note: %s: LEAF's by-writer split (-t user): no test writer is a training writer, so the test set "
                    "is the %d held-out writers' %d samples pooled (accuracy on writers never trained on); LEAF's "
                    "-t sample split gives every writer test samples of its own", root, len(held_out),
                    sum(len(p[1]) for p in held_out))
        parts = held_out
    else:
        parts = [own[u] for u, _ in chosen if u in own]
        if not parts:
            raise refuse(root / "test", f"none of the {len(chosen)} chosen users has a test sample, although "
                                        f"{len(tested & seen)} training users have test samples there; the folders "
                                        "seem to mix LEAF splits: rerun LEAF's preprocess.sh with -t sample")
        if len(parts) < len(chosen) or held_out:
            log.warning("note: %s: %d of the %d chosen users have no test sample%s; the test set is the other chosen "
                        "users' samples", root / "test", len(chosen) - len(parts), len(chosen),
                        f" and {len(held_out)} test users have no training samples (left out)" if held_out else "")
    return chosen, (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
