"""The ``[task]`` variants read from a user's disk, and the offline FEMNIST twin (docs/tasks.md §13–19).

Each variant names the folder it reads (``path``), the files it expects there and where the data
set is published (:meth:`DatasetTask.expected_files`, :meth:`DatasetTask.source`), so a missing or
wrong path is refused — :meth:`DatasetTask.file_problems`, called by every builder before it
reads anything — with a message naming the file expected and where to get it. Nothing is
downloaded. Every variant also states the sizes of the task before it is built (the memory
estimate of :mod:`asyncfl.config.memory`, :class:`asyncfl.config.tasks.TaskSection`), from the
data set's published statistics (the sample counts below), since the files are not read until
the task is built.

Torch-free and numpy-free (validating a scenario imports neither).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from asyncfl.config.base import PosFloat
from asyncfl.config.tasks import TaskSection, _mlp_params

# -- published statistics (used by the estimates before the files are read) ---------------------
#: LEAF FEMNIST (Caldas et al., 2018, Table 1): 3,550 writers, 805,263 samples
FEMNIST_USERS, FEMNIST_SAMPLES = 3550, 805_263
FEMNIST_MEAN, FEMNIST_STD = 226.83, 88.94  # samples per writer
FEMNIST_CLASSES, IMAGE_SIDE = 62, 28
#: LEAF Shakespeare: 1,129 speakers, 4,226,158 samples of 80 characters
SHAKESPEARE_USERS, SHAKESPEARE_SAMPLES, SHAKESPEARE_SEQ = 1129, 4_226_158, 80
#: LEAF's sample split: the fraction of every user's samples kept for training (``-t sample``)
LEAF_TRAIN_FRACTION = {"femnist": 0.9, "shakespeare": 0.8}
#: the largest LEAF JSON file's parsed Python objects (FEMNIST: ~100 writers × 227 × 784 floats
#: at ~32 bytes each, plus the text): the reader holds one file at a time
LEAF_FILE_PEAK = 800 << 20
CIFAR_TRAIN, CIFAR_TEST, CIFAR_FEATURES = 50_000, 10_000, 3 * 32 * 32
#: MNIST and EMNIST (Cohen et al., 2017) as IDX files: (training, test, classes) per variant
IDX_VARIANTS: dict[str, tuple[int, int, int]] = {
    "mnist": (60_000, 10_000, 10),
    "emnist-digits": (240_000, 40_000, 10),
    "emnist-letters": (124_800, 20_800, 26),
    "emnist-balanced": (112_800, 18_800, 47),
    "emnist-bymerge": (697_932, 116_323, 47),
    "emnist-byclass": (697_932, 116_323, 62),
    "emnist-mnist": (60_000, 10_000, 10),
}
#: TensorFlow Federated's EMNIST in HDF5: (writers, training, test samples, classes)
TFF_EMNIST = {False: (3400, 671_585, 77_483, 62), True: (3383, 341_873, 40_832, 10)}


def leaf_cnn_params(classes: int) -> int:
    """``Conv2d(1, 32, 5) − Conv2d(32, 64, 5) − Linear(7·7·64, 2048) − Linear(2048, classes)``."""
    return (25 * 32 + 32) + (25 * 32 * 64 + 64) + _mlp_params([7 * 7 * 64, 2048, classes])


def cifar_cnn_params(classes: int) -> int:
    """``Conv2d(3, 32, 3) − Conv2d(32, 64, 3) − Conv2d(64, 64, 3) − Linear(1024, 64) − Linear(64, classes)``."""
    return (27 * 32 + 32) + (9 * 32 * 64 + 64) + (9 * 64 * 64 + 64) + _mlp_params([4 * 4 * 64, 64, classes])


def char_lstm_params(vocab: int, embed: int, hidden: int, layers: int) -> int:
    """Embedding, ``layers`` LSTM layers (``W_ih``, ``W_hh`` and torch's two biases of ``4·hidden``), output."""
    lstm = sum(4 * hidden * ((embed if i == 0 else hidden) + hidden + 2) for i in range(layers))
    return vocab * embed + lstm + hidden * vocab + vocab


def image_model_params(model: str, side_pixels: int, classes: int, hidden: int) -> int:
    """``d`` of the image models of MNIST-like tasks: the LEAF CNN or the 2-hidden-layer MLP."""
    return leaf_cnn_params(classes) if model == "cnn" else _mlp_params([side_pixels, hidden, hidden, classes])


class DatasetTask(TaskSection):
    """A task read from files under ``path``. Subclasses give the files and where they come from."""

    SOURCE: ClassVar[str] = ""
    #: the keys naming input files: a relative path is taken relative to the scenario file
    file_keys: ClassVar[tuple[str, ...]] = ("path",)

    def expected_files(self) -> list[tuple[str, ...]]:
        """Files the reader needs, relative to ``path``; each entry lists accepted alternatives
        (e.g. an IDX file raw or gzipped)."""
        raise NotImplementedError

    def source(self) -> str:
        return self.SOURCE

    def file_problems(self) -> list[str]:
        """One message per missing file (or a missing folder), each naming the file expected and
        where the data set is published; empty when everything is there. Reads nothing."""
        root = Path(self.path).expanduser()  # type: ignore[attr-defined]
        where = f"get it from {self.source()}; nothing is downloaded"
        if not root.is_dir():
            what = "is a file, not a folder" if root.exists() else "no such folder"
            return [f"task.path = {str(root)!r}: {what}; task.name = {self.name!r} reads the folder holding "  # type: ignore[attr-defined]
                    f"{', '.join(alt[0] for alt in self.expected_files())} ({where})"]
        missing = [" or ".join(alt) for alt in self.expected_files() if not any(_matches(root, n) for n in alt)]
        if not missing:
            return []
        return [f"task.path = {str(root)!r}: not found there: {'; '.join(missing)} ({where})"]

def _matches(root: Path, name: str) -> bool:
    """``name`` exists under ``root`` (a trailing ``/*.json`` asks for a folder with a ``.json`` entry)."""
    if name.startswith("**/"):
        return any(p.is_file() for p in root.rglob(name[3:]))
    if name.endswith("/*.json"):
        folder = root / name[: -len("/*.json")]
        return folder.is_dir() and any(p.suffix == ".json" for p in folder.iterdir())
    return (root / name).exists()  # the reader refuses, naming it, a name that is not a regular file


# ---------------------------------------------------------------------------------------------
class LeafTask(DatasetTask):
    """A LEAF data set (JSON ``users`` / ``num_samples`` / ``user_data``): one client per user, the
    ``population.clients`` users drawn at random (seeded) from those with at least ``min_samples``
    training samples; the test set is the same users' test samples, as LEAF splits them."""

    path: str
    min_samples: Annotated[int, Field(ge=1, le=10**6)] = 1

    def expected_files(self) -> list[tuple[str, ...]]:
        return [("train/*.json",), ("test/*.json",)]

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients",)


class FEMNISTShape(TaskSection):
    """The sizes of FEMNIST-shaped data (``femnist``, ``femnist-twin``): 28×28 float32 images of 62
    classes, LEAF's counts per writer (226.83 on average, 90 % for training), LEAF's CNN or the
    2NN MLP."""

    model: Literal["cnn", "mlp"] = "cnn"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 200

    def model_params(self) -> int:
        return image_model_params(self.model, IMAGE_SIDE * IMAGE_SIDE, FEMNIST_CLASSES, self.hidden)

    def mean_samples_per_client(self, clients: int) -> float:
        return FEMNIST_MEAN * LEAF_TRAIN_FRACTION["femnist"]

    def sample_bytes(self) -> int:
        return IMAGE_SIDE * IMAGE_SIDE * 4 + 8

    def test_samples(self, clients: int) -> float:
        return clients * FEMNIST_MEAN * (1 - LEAF_TRAIN_FRACTION["femnist"])


class FEMNISTTask(LeafTask, FEMNISTShape):
    """LEAF FEMNIST: 28×28 handwritten characters, 62 classes, one client per writer."""

    name: Literal["femnist"] = "femnist"

    SOURCE: ClassVar[str] = ("LEAF (https://leaf.cmu.edu, github.com/TalwalkarLab/leaf): in leaf/data/femnist run "
                             "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample, then task.path = leaf/data/femnist/data")

    def build_bytes(self, clients: int) -> int:
        return self.data_bytes(clients) + LEAF_FILE_PEAK


class ShakespeareTask(LeafTask):
    """LEAF Shakespeare: next-character prediction from 80 characters, one client per speaker."""

    name: Literal["shakespeare"] = "shakespeare"
    embed: Annotated[int, Field(ge=1, le=1024)] = 8
    hidden: Annotated[int, Field(ge=1, le=4096)] = 256
    layers: Annotated[int, Field(ge=1, le=4)] = 2

    SOURCE: ClassVar[str] = ("LEAF (https://leaf.cmu.edu, github.com/TalwalkarLab/leaf): in leaf/data/shakespeare run "
                             "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample -tf 0.8, then task.path = "
                             "leaf/data/shakespeare/data")

    def model_params(self) -> int:
        from_vocab = 80  # LEAF's character set (asyncfl.datasets.leaf.LEAF_CHARACTERS)
        return char_lstm_params(from_vocab, self.embed, self.hidden, self.layers)

    def mean_samples_per_client(self, clients: int) -> float:
        return SHAKESPEARE_SAMPLES / SHAKESPEARE_USERS * LEAF_TRAIN_FRACTION["shakespeare"]

    def sample_bytes(self) -> int:
        return SHAKESPEARE_SEQ + 8  # 80 uint8 character indices and an int64 target

    def test_samples(self, clients: int) -> float:
        return clients * SHAKESPEARE_SAMPLES / SHAKESPEARE_USERS * (1 - LEAF_TRAIN_FRACTION["shakespeare"])

    def build_bytes(self, clients: int) -> int:
        return self.data_bytes(clients) + LEAF_FILE_PEAK


# ---------------------------------------------------------------------------------------------
class SplitTask(DatasetTask):
    """A centralised data set split over ``population.clients``: ``split = "dirichlet"`` (the
    label-Dirichlet prior of docs/tasks.md §7 steps 2–3, concentration ``dirichlet_alpha``) or
    ``"shards"`` (sort by label, cut into ``shards_per_client · N`` equal shards, deal each client
    ``shards_per_client`` at random: McMahan et al., 2017). The data set's own test set is the
    test set."""

    path: str
    split: Literal["dirichlet", "shards"] = "dirichlet"
    dirichlet_alpha: PosFloat = 0.1
    shards_per_client: Annotated[int, Field(ge=1, le=1000)] = 2

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients",)


class CIFAR10Task(SplitTask):
    """CIFAR-10's python pickles (``data_batch_1..5``, ``test_batch``), 32×32×3, 10 classes."""

    name: Literal["cifar10"] = "cifar10"
    model: Literal["cnn"] = "cnn"

    SOURCE: ClassVar[str] = ("https://www.cs.toronto.edu/~kriz/cifar.html (CIFAR-10 python version, "
                             "cifar-10-python.tar.gz): extract it and give task.path = cifar-10-batches-py")
    CLASSES: ClassVar[int] = 10

    def expected_files(self) -> list[tuple[str, ...]]:
        return [(f"data_batch_{i}",) for i in range(1, 6)] + [("test_batch",)]

    def classes(self) -> int:
        return self.CLASSES

    def model_params(self) -> int:
        return cifar_cnn_params(self.classes())

    def mean_samples_per_client(self, clients: int) -> float:
        return CIFAR_TRAIN / clients

    def sample_bytes(self) -> int:
        return CIFAR_FEATURES * 4 + 8

    def test_samples(self, clients: int) -> float:
        return float(CIFAR_TEST)

    def build_bytes(self, clients: int) -> int:
        return self.data_bytes(clients) + (CIFAR_TRAIN + CIFAR_TEST) * (CIFAR_FEATURES + 8)  # the uint8 arrays read


class CIFAR100Task(CIFAR10Task):
    """CIFAR-100's python pickles (``train``, ``test``); ``labels`` picks the 100 fine or 20 coarse classes."""

    name: Literal["cifar100"] = "cifar100"  # type: ignore[assignment]
    labels: Literal["fine", "coarse"] = "fine"

    SOURCE: ClassVar[str] = ("https://www.cs.toronto.edu/~kriz/cifar.html (CIFAR-100 python version, "
                             "cifar-100-python.tar.gz): extract it and give task.path = cifar-100-python")

    def expected_files(self) -> list[tuple[str, ...]]:
        return [("train",), ("test",)]

    def classes(self) -> int:
        return 100 if self.labels == "fine" else 20


class MNISTTask(SplitTask):
    """MNIST or an EMNIST variant from its four IDX files (raw or ``.gz``), 28×28 grey images."""

    name: Literal["mnist"] = "mnist"
    variant: Literal[tuple(IDX_VARIANTS)] = "mnist"  # type: ignore[valid-type]
    model: Literal["cnn", "mlp"] = "mlp"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 200
    dirichlet_alpha: PosFloat = 0.3

    def file_stems(self) -> dict[str, str]:
        """The four files' names without ``.gz``: ``train_x``, ``train_y``, ``test_x``, ``test_y``."""
        if self.variant == "mnist":
            return {"train_x": "train-images-idx3-ubyte", "train_y": "train-labels-idx1-ubyte",
                    "test_x": "t10k-images-idx3-ubyte", "test_y": "t10k-labels-idx1-ubyte"}
        split = self.variant.partition("-")[2]
        return {f"{part}_{xy}": f"emnist-{split}-{part}-{'images-idx3' if xy == 'x' else 'labels-idx1'}-ubyte"
                for part in ("train", "test") for xy in ("x", "y")}

    def file_alternatives(self) -> dict[str, tuple[str, ...]]:
        """Each of the four files' accepted names, in the order they are looked for: the dashed
        name of the original distribution (``train-images-idx3-ubyte``), then the dotted one of
        Kaggle's copy and of PyPI packages (``train-images.idx3-ubyte``), each raw then gzipped."""
        out = {}
        for key, stem in self.file_stems().items():
            dotted = stem.replace("-idx", ".idx")
            out[key] = (stem, stem + ".gz", dotted, dotted + ".gz")
        return out

    def expected_files(self) -> list[tuple[str, ...]]:
        return list(self.file_alternatives().values())

    def source(self) -> str:
        if self.variant == "mnist":
            return ("MNIST (Yann LeCun's page, http://yann.lecun.com/exdb/mnist/, or a mirror such as Kaggle's): the "
                    "four IDX files, named train-images-idx3-ubyte or train-images.idx3-ubyte, gzipped or not, in one "
                    "folder given as task.path")
        return ("EMNIST (https://www.nist.gov/itl/products-and-services/emnist-dataset, 'Binary format as the "
                "original MNIST dataset', gzip.zip): extract it and give task.path = its gzip folder")

    def classes(self) -> int:
        return IDX_VARIANTS[self.variant][2]

    def model_params(self) -> int:
        return image_model_params(self.model, IMAGE_SIDE * IMAGE_SIDE, self.classes(), self.hidden)

    def mean_samples_per_client(self, clients: int) -> float:
        return IDX_VARIANTS[self.variant][0] / clients

    def sample_bytes(self) -> int:
        return IMAGE_SIDE * IMAGE_SIDE * 4 + 8

    def test_samples(self, clients: int) -> float:
        return float(IDX_VARIANTS[self.variant][1])

    def build_bytes(self, clients: int) -> int:
        train, test, _ = IDX_VARIANTS[self.variant]
        return self.data_bytes(clients) + (train + test) * (IMAGE_SIDE * IMAGE_SIDE + 1) * 2  # bytes read, unzipped


# ---------------------------------------------------------------------------------------------
class TFFEMNISTTask(DatasetTask):
    """TensorFlow Federated's EMNIST in its HDF5 layout (``examples/<writer>/{pixels, label}``),
    one client per writer (the ``population.clients`` writers drawn at random, seeded); the test
    file's same writers form the test set. Needs the optional ``h5py`` (``pip install asyncfl[h5]``)."""

    name: Literal["tff-emnist"] = "tff-emnist"
    path: str
    only_digits: bool = False
    model: Literal["cnn", "mlp"] = "cnn"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 200

    SOURCE: ClassVar[str] = ("TensorFlow Federated's EMNIST (tff.simulation.datasets.emnist: "
                             "https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2, or "
                             "fed_emnist_digitsonly.tar.bz2): extract it and give task.path = that folder")

    def file_names(self) -> tuple[str, str]:
        stem = "fed_emnist_digitsonly" if self.only_digits else "fed_emnist"
        return f"{stem}_train.h5", f"{stem}_test.h5"

    def expected_files(self) -> list[tuple[str, ...]]:
        return [(name,) for name in self.file_names()]

    def classes(self) -> int:
        return TFF_EMNIST[self.only_digits][3]

    def model_params(self) -> int:
        return image_model_params(self.model, IMAGE_SIDE * IMAGE_SIDE, self.classes(), self.hidden)

    def mean_samples_per_client(self, clients: int) -> float:
        users, train, _, _ = TFF_EMNIST[self.only_digits]
        return train / users

    def sample_bytes(self) -> int:
        return IMAGE_SIDE * IMAGE_SIDE * 4 + 8

    def test_samples(self, clients: int) -> float:
        users, _, test, _ = TFF_EMNIST[self.only_digits]
        return clients * test / users


# ---------------------------------------------------------------------------------------------
#: Flower Datasets' partitioners offered by ``hf-images`` (docs/tasks.md §20)
HF_PARTITIONERS = ("natural-id", "iid", "dirichlet", "pathological", "shard")


class HFImagesTask(DatasetTask):
    """An image-classification data set as the Hugging Face ``datasets`` ecosystem ships it — a
    ``save_to_disk`` folder or the hub's parquet files, e.g. FEMNIST (``flwrlabs/femnist``: 28×28
    grey ``image``, ``writer_id``, ``character``; one split) or CIFAR-10 (``uoft-cs/cifar10``:
    32×32×3 ``img``, ``label``; train and test) — partitioned over the clients by one of Flower
    Datasets' partitioners with its seed (docs/tasks.md §20). Needs the optional ``datasets`` and
    ``flwr-datasets`` (``pip install 'asyncfl[hf]'``)."""

    name: Literal["hf-images"] = "hf-images"
    path: str
    image: Annotated[str, Field(min_length=1, max_length=200)] = "image"
    label: Annotated[str, Field(min_length=1, max_length=200)] = "label"
    classes: Annotated[int, Field(ge=2, le=100_000)] | None = None  # None: the label column's ClassLabel says
    side: Literal[28, 32] = 28
    channels: Literal[1, 3] = 1
    model: Literal["cnn", "mlp"] = "cnn"
    hidden: Annotated[int, Field(ge=1, le=100_000)] = 200
    train_split: Annotated[str, Field(min_length=1, max_length=200)] = "train"
    test_split: Annotated[str, Field(min_length=1, max_length=200)] = "test"
    test_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.1
    partitioner: Literal[HF_PARTITIONERS] = "iid"  # type: ignore[valid-type]
    partition_by: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    alpha: PosFloat = 0.5
    min_partition_size: Annotated[int, Field(ge=0, le=10**9)] = 10
    self_balancing: bool = False
    classes_per_partition: Annotated[int, Field(ge=1, le=100_000)] = 2
    class_assignment: Literal["random", "deterministic", "first-deterministic"] = "random"
    shards_per_partition: Annotated[int, Field(ge=1, le=100_000)] = 2
    shuffle: bool = True
    partition_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 42

    SOURCE: ClassVar[str] = ("the Hugging Face hub, fetched once on a machine with network (e.g. "
                             "datasets.load_dataset('flwrlabs/femnist').save_to_disk(DIR), or the repository's "
                             "parquet files), then task.path = DIR")

    @model_validator(mode="after")
    def _shapes(self) -> "HFImagesTask":
        if self.model == "cnn" and (self.side, self.channels) not in ((28, 1), (32, 3)):
            raise ValueError(f"task.model = 'cnn' needs side = 28 with channels = 1 (LEAF's CNN) or side = 32 with "
                             f"channels = 3 (the CIFAR CNN); found side = {self.side}, channels = {self.channels}")
        if self.partitioner == "natural-id" and self.partition_by is None:
            raise ValueError("task.partitioner = 'natural-id' needs task.partition_by, the column naming each "
                             "sample's user (FEMNIST: 'writer_id')")
        return self

    def expected_files(self) -> list[tuple[str, ...]]:
        return [("dataset_dict.json", "state.json", "**/*.parquet")]

    def features(self) -> int:
        return self.side * self.side * self.channels

    def model_params(self) -> int:
        """``d`` (0, unknown, until the data are read when ``classes`` is not given)."""
        if self.classes is None:
            return 0
        if self.model == "cnn":
            return leaf_cnn_params(self.classes) if self.channels == 1 else cifar_cnn_params(self.classes)
        return _mlp_params([self.features(), self.hidden, self.hidden, self.classes])

    def sample_bytes(self) -> int:
        return self.features() * 4 + 8


# ---------------------------------------------------------------------------------------------
class FEMNISTTwinTask(FEMNISTShape):
    """A synthetic data set shaped like LEAF FEMNIST, generated offline (docs/tasks.md §18): 28×28
    images of 62 classes by ``users`` writers with FEMNIST's per-writer counts, each image a class
    prototype drawn in the writer's style (affine transform, stroke weight, contrast) with noise.
    The data depend on ``data_seed`` only; the run's seed picks the ``population.clients`` writers."""

    name: Literal["femnist-twin"] = "femnist-twin"
    users: Annotated[int, Field(ge=1, le=100_000)] = FEMNIST_USERS
    data_seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    noise: Annotated[float, Field(ge=0, le=10)] = 0.3
    style: Annotated[float, Field(ge=0, le=10)] = 1.0

    def build_bytes(self, clients: int) -> int:
        # one writer's float32 images and its transform grid at a time, on top of the data
        return self.data_bytes(clients) + int(4 * FEMNIST_MEAN * IMAGE_SIDE * IMAGE_SIDE * 4)

    def size_keys(self) -> tuple[str, ...]:
        return ("population.clients", "task.model")


DatasetTaskConfig = (FEMNISTTask | ShakespeareTask | CIFAR10Task | CIFAR100Task | MNISTTask | TFFEMNISTTask | FEMNISTTwinTask
                     | HFImagesTask)
