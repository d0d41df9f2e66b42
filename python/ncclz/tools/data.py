"""Benchmark data sets: the arrays ``ncclz-bench``, ``ncclz-demo`` and bench/ measure with.

Two levels. *Fields* are fixed float32 arrays (generated, or real data from optional packages);
*per-rank inputs* (:func:`rank_input`) are what rank r of a collective benchmark holds, a
deterministic function of (data set, r, count) built from a field, so that every rank can rebuild
every rank's input and check its result against the exact reduction.

Generated and derived fields are cached as .npy / .npz files in :func:`cache_dir`
(``NCCLZ_BENCH_DATA``; default ``~/.cache/ncclz/data``, or ``$XDG_CACHE_HOME/ncclz/data``; the
repository's bench/ scripts point it at bench/data/), so repeated runs do not pay for generation
or training again. Several processes may build one file at once: each writes a file of its own
and renames it over the target (same bytes; the last rename wins).

Fields
------
gaussian(n)     "Gradient-like" data: n i.i.d. N(0, sigma=1e-3) values, numpy PCG64 seed 20261122.
                Default n = 8 Mi values = 32 MiB.
smooth3d(shape) Smooth synthetic 3-D field, default 64x256x256 (16 MiB). With normalised
                coordinates u = (z/Z, y/Y, x/X) in [0, 1)^3:

                  f(u) = sum_{k=1..6} a_k * sin(2*pi * <w_k, u> + phi_k)
                       + sum_{j=1..4} b_j * exp(-|u - c_j|^2 / (2 * s_j^2))

                with integer wave vectors w_k in {-3..3}^3 (not all zero), amplitudes
                a_k ~ U(0.5, 1.5), phases phi_k ~ U(0, 2*pi), bump heights b_j ~ U(-2, 2), centres
                c_j ~ U(0.2, 0.8)^3, widths s_j ~ U(0.08, 0.25); numpy PCG64 seed 7. Computed in
                float64 and rounded once to float32. No noise is added.
reanalysis()    Real data: NCEP/NCAR reanalysis 500 hPa geopotential height [m], winter (DJF) means,
                variable ``z`` of ``eofs/examples/example_data/hgt_djf.nc`` shipped in the eofs
                package (read with scipy); shape (65, 29, 49) = (winter, lat, lon) after dropping
                the singleton pressure axis, cast float64 -> float32. Only 92,365 values (361 KiB).
                Needs the optional packages eofs and scipy (the ``demo`` and ``bench`` extras).
gradients()     Real gradients of a small CNN trained with torch (CPU, one thread, seed 0) on
                scikit-learn's bundled ``load_digits`` (1797 8x8 images, 10 classes). Model:
                conv3x3(1->32) ReLU conv3x3(32->64) ReLU flatten(4096) fc(4096->512) ReLU
                fc(512->10); 2,121,610 parameters. SGD momentum 0.9, lr 0.02, batch 128, 300 steps;
                the gradient of the training loss at step 150 (mid-training, on that step's batch),
                all parameter grads concatenated in ``model.parameters()`` order into one flat
                float32 array (8.1 MiB). Per-layer grads: gradients_per_layer(). Needs torch and
                scikit-learn the first time (then the cache).

Per-rank inputs (:data:`DATASETS`, :func:`rank_input`)
------------------------------------------------------
gaussian   gaussian values, rolled by rank * (count // 7 + 1).
sparse     the same with 99% of the values zeroed (mask from numpy seed 1000 + rank).
smooth     smooth3d((ceil(count/65536), 256, 256)) flat[:count] * (1 + 0.1 rank) + 0.25 rank.
real       the reanalysis field, its winters tiled cyclically from winter 5 * rank.
grad       the flat CNN gradient, rolled by rank * 104729 and tiled to count.
<name>-shaped (smooth, real): <name>'s values shaped (count / plane, *plane) when count is a whole
           number of planes (smooth (z, 256, 256), real (t, 29, 49)); else flat.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import numpy as np

#: The environment variable that names the cache folder.
CACHE_ENV = "NCCLZ_BENCH_DATA"

GAUSSIAN_SEED = 20261122
GAUSSIAN_SIGMA = 1e-3
SMOOTH_SEED = 7
GRAD_SEED = 0
GRAD_STEPS = 300
GRAD_TAKE_STEP = 150


class DataUnavailable(RuntimeError):
    """A data set needs optional packages that are not installed (the message says which)."""


def cache_dir() -> Path:
    """The folder generated fields are cached in (created when first written)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ncclz" / "data"


def _cache_path(name: str) -> Path:
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d / name


def _tmp_beside(p: Path) -> Path:
    """A temporary name next to p for this process (see the module doc)."""
    return p.with_name(f"{p.stem}.{os.getpid()}.tmp{p.suffix}")


def _cached_npy(name: str, make):
    p = _cache_path(name)
    if p.exists():
        return np.load(p)
    a = np.ascontiguousarray(make(), dtype=np.float32)
    tmp = _tmp_beside(p)
    np.save(tmp, a)
    os.replace(tmp, p)
    return a


def _missing(*modules: str) -> list:
    return [m for m in modules if importlib.util.find_spec(m) is None]


# --------------------------------------------------------------------------- gaussian
def gaussian(n: int = 8 * 1024 * 1024) -> np.ndarray:
    """n i.i.d. N(0, 1e-3^2) float32 values (default 8 Mi values = 32 MiB), fixed seed."""

    def make():
        rng = np.random.default_rng(GAUSSIAN_SEED)
        return rng.standard_normal(n, dtype=np.float32) * np.float32(GAUSSIAN_SIGMA)

    return _cached_npy(f"gaussian_{n}.npy", make)


# --------------------------------------------------------------------------- smooth3d
def smooth3d_params(seed: int = SMOOTH_SEED) -> dict:
    """The random parameters of the smooth3d formula (see the module doc)."""
    rng = np.random.default_rng(seed)
    waves = []
    while len(waves) < 6:
        w = rng.integers(-3, 4, size=3)
        if np.any(w != 0):
            waves.append(w)
    return {
        "w": np.array(waves, dtype=np.float64),
        "a": rng.uniform(0.5, 1.5, 6),
        "phi": rng.uniform(0.0, 2 * np.pi, 6),
        "b": rng.uniform(-2.0, 2.0, 4),
        "c": rng.uniform(0.2, 0.8, (4, 3)),
        "s": rng.uniform(0.08, 0.25, 4),
    }


def smooth3d(shape: tuple = (64, 256, 256)) -> np.ndarray:
    """Smooth synthetic 3-D field (sum of 6 low-frequency sinusoids + 4 Gaussian bumps)."""
    shape = tuple(int(s) for s in shape)

    def make():
        p = smooth3d_params()
        Z, Y, X = shape
        z = (np.arange(Z) / Z)[:, None, None]
        y = (np.arange(Y) / Y)[None, :, None]
        x = (np.arange(X) / X)[None, None, :]
        f = np.zeros(shape, dtype=np.float64)
        for k in range(6):
            wz, wy, wx = p["w"][k]
            f += p["a"][k] * np.sin(2 * np.pi * (wz * z + wy * y + wx * x) + p["phi"][k])
        for j in range(4):
            cz, cy, cx = p["c"][j]
            r2 = (z - cz) ** 2 + (y - cy) ** 2 + (x - cx) ** 2
            f += p["b"][j] * np.exp(-r2 / (2 * p["s"][j] ** 2))
        return f.astype(np.float32)

    return _cached_npy("smooth3d_{}.npy".format("x".join(map(str, shape))), make)


# --------------------------------------------------------------------------- reanalysis
REANALYSIS_NOTE = ("NCEP/NCAR reanalysis 500 hPa geopotential height [m], winter (DJF) means of 65 winters "
                   "on a 29x49 grid (hgt_djf.nc of the eofs package)")


def reanalysis_path() -> Path:
    """The reanalysis file the eofs package ships (DataUnavailable without eofs)."""
    if _missing("eofs"):
        raise DataUnavailable(_NEEDS["real"])
    import eofs

    return Path(eofs.__file__).resolve().parent / "examples" / "example_data" / "hgt_djf.nc"


def reanalysis() -> np.ndarray:
    """NCEP/NCAR reanalysis Z500 DJF field from eofs package data, (65, 29, 49) float32. Not tiled."""
    if _missing("eofs", "scipy"):
        raise DataUnavailable(_NEEDS["real"])
    from scipy.io import netcdf_file

    with netcdf_file(reanalysis_path(), "r", mmap=False) as nc:
        z = np.array(nc.variables["z"].data, dtype=np.float64)  # (65, 1, 29, 49), big-endian f8
    z = z[:, 0, :, :]
    if not np.all(np.isfinite(z)) or np.any(np.abs(z) > 1e10):
        raise ValueError("unexpected missing or non-finite values in hgt_djf.nc")
    return np.ascontiguousarray(z, dtype=np.float32)


# --------------------------------------------------------------------------- gradients
def _train_and_grab(steps: int = GRAD_STEPS, take_step: int = GRAD_TAKE_STEP, seed: int = GRAD_SEED):
    import torch
    from sklearn.datasets import load_digits

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    digits = load_digits()
    X = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (1797, 1, 8, 8)
    y = torch.tensor(digits.target, dtype=torch.long)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 8 * 8, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    n = X.shape[0]
    batch = 128
    perm = torch.randperm(n, generator=gen)
    pos = 0
    grabbed = None
    losses = []
    for step in range(1, steps + 1):
        if pos + batch > n:
            perm = torch.randperm(n, generator=gen)
            pos = 0
        idx = perm[pos : pos + batch]
        pos += batch
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(X[idx]), y[idx])
        loss.backward()
        losses.append(loss.item())
        if step == take_step:
            grabbed = {name: p.grad.detach().numpy().astype(np.float32).copy() for name, p in model.named_parameters()}
        opt.step()
    with torch.no_grad():
        acc = float((model(X).argmax(1) == y).float().mean())
    meta = {"loss_first": losses[0], "loss_at_take": losses[take_step - 1], "loss_last": losses[-1], "train_acc": acc}
    return grabbed, meta


def _grad_npz_name() -> str:
    return f"gradients_digits_cnn_s{GRAD_SEED}_t{GRAD_TAKE_STEP}of{GRAD_STEPS}.npz"


def _grad_npz() -> Path:
    p = cache_dir() / _grad_npz_name()
    if not p.exists():
        if _missing("torch", "sklearn"):
            raise DataUnavailable(_NEEDS["grad"])
        p = _cache_path(_grad_npz_name())
        grads, meta = _train_and_grab()
        tmp = _tmp_beside(p)
        with open(tmp, "wb") as f:
            np.savez(f, **{"grad/" + k: v for k, v in grads.items()}, **{"meta/" + k: np.float64(v) for k, v in meta.items()})
        os.replace(tmp, p)
    return p


def gradients_per_layer() -> dict:
    """Per-parameter gradients {name: float32 array}, in model.parameters() order."""
    with np.load(_grad_npz()) as z:
        return {k[len("grad/"):]: z[k] for k in z.files if k.startswith("grad/")}


def gradients_meta() -> dict:
    with np.load(_grad_npz()) as z:
        return {k[len("meta/"):]: float(z[k]) for k in z.files if k.startswith("meta/")}


def gradients() -> np.ndarray:
    """All parameter gradients of the digits CNN at step 150/300, flattened into one float32 array."""
    layers = gradients_per_layer()
    return np.ascontiguousarray(np.concatenate([g.ravel() for g in layers.values()]), dtype=np.float32)


# --------------------------------------------------------------------------- registry of fields
#: Fields by name (the codec benchmark's data sets): full and quick versions, a description.
FIELDS = {
    "gaussian": {"full": lambda: gaussian(8 * 1024 * 1024), "quick": lambda: gaussian(1024 * 1024),
                 "desc": "N(0,1e-3) i.i.d., numpy seed 20261122"},
    "smooth3d": {"full": lambda: smooth3d((64, 256, 256)), "quick": lambda: smooth3d((32, 64, 64)),
                 "desc": "6 low-freq 3D sinusoids + 4 Gaussian bumps, no noise, seed 7"},
    "reanalysis": {"full": reanalysis, "quick": reanalysis,
                   "desc": "NCEP/NCAR Z500 DJF (eofs hgt_djf.nc, var z), not tiled"},
    "gradients": {"full": gradients, "quick": gradients,
                  "desc": "CNN on sklearn digits, grads at SGD step 150/300, seed 0"},
}


def load(name: str, quick: bool = False) -> np.ndarray:
    """The field `name` of FIELDS (the quick version: smaller where there is one)."""
    return FIELDS[name]["quick" if quick else "full"]()


# =========================================================================== per-rank inputs
#: The data sets of the collective benchmarks (ncclz-bench -d, ncclz-demo).
DATASETS = ("gaussian", "smooth", "sparse", "real", "grad", "smooth-shaped", "real-shaped")
#: One line each, with what they need beyond ncclz.
DESCRIPTIONS = {
    "gaussian": "N(0, 1e-3) values, rolled per rank (generated)",
    "smooth": "the smooth3d field, scaled and shifted per rank (generated)",
    "sparse": "gaussian with 99% zeros (generated)",
    "real": "NCEP/NCAR Z500 reanalysis, 92 K values tiled along time (needs eofs, scipy: the demo/bench extras)",
    "grad": "2.1 M gradient values of a small CNN, tiled (needs torch and scikit-learn the first time)",
    "smooth-shaped": "smooth, in its natural shape (z, 256, 256)",
    "real-shaped": "real, in its natural shape (t, 29, 49)",
}
#: "<name>-shaped": the same values as <name>, handed to the collectives in their natural shape (so
#: ncclz's wire codec can use 2-D/3-D predictors); the count is rounded up to whole planes.
SHAPE_PLANES = {"smooth": (256, 256), "real": (29, 49)}

_NEEDS = {
    "real": "data set 'real' needs the optional packages eofs and scipy (the NCEP/NCAR reanalysis field ships "
            "with eofs): pip install eofs scipy (both are in ncclz's 'demo' and 'bench' extras)",
    "grad": "data set 'grad' needs torch and scikit-learn to train the small CNN whose gradients it uses "
            "(once; then the cache): pip install torch scikit-learn",
}


def shaped_base(dataset: str) -> tuple:
    """("smooth", (256, 256)) for "smooth-shaped"; (dataset, None) for the flat data sets."""
    if dataset.endswith("-shaped"):
        name = dataset[: -len("-shaped")]
        return name, SHAPE_PLANES[name]
    return dataset, None


def unavailable(dataset: str) -> str | None:
    """None if `dataset` can be built here, else the reason (which packages to install)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown data set {dataset!r}; one of {', '.join(DATASETS)}")
    base = shaped_base(dataset)[0]
    if base == "real" and _missing("eofs", "scipy"):
        return _NEEDS["real"]
    if base == "grad" and not (cache_dir() / _grad_npz_name()).exists() and _missing("torch", "sklearn"):
        return _NEEDS["grad"]
    return None


def np_dtype(name) -> np.dtype:
    """The NumPy dtype of a name ("bfloat16"/"bf16" through ml_dtypes, "fp16"/"half", ...)."""
    name = str(name)
    if name in ("bfloat16", "bf16"):
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if name in ("float16", "fp16", "half"):
        return np.dtype(np.float16)
    return np.dtype(name)


_BASE_CACHE: dict = {}


def base_field(dataset: str, count: int) -> np.ndarray:
    """The float32 field `dataset`'s inputs are cut from, with at least `count` values where it can
    grow (cached in memory; a smooth field's prefix depends on the size it was generated at, so
    build it once at the largest count a run needs)."""
    have = _BASE_CACHE.get(dataset)
    if have is not None and have.size >= count:
        return have
    if dataset in ("gaussian", "sparse"):
        a = gaussian(max(count, 1 << 20))
    elif dataset == "smooth":
        a = smooth3d((max(1, math.ceil(count / (256 * 256))), 256, 256)).ravel()
    elif dataset == "real":
        a = reanalysis()  # (65, 29, 49)
    elif dataset == "grad":
        a = gradients()
    else:
        raise ValueError(f"unknown data set {dataset!r}; one of {', '.join(DATASETS)}")
    _BASE_CACHE[dataset] = a
    return a


def rank_input(dataset: str, rank: int, count: int, dtype="float32") -> np.ndarray:
    """Rank `rank`'s input of `count` elements: deterministic in (dataset, rank, count), so every rank
    can rebuild all (see the module doc). Raises DataUnavailable when the data set needs packages
    that are not installed."""
    count = int(count)
    base, plane = shaped_base(dataset)
    if plane is not None:
        x = rank_input(base, rank, count, dtype)
        q = int(np.prod(plane))
        return x.reshape(count // q, *plane) if count >= q and count % q == 0 else x
    if dataset in ("gaussian", "sparse"):
        b = base_field(dataset, count)[:count]
        x = np.roll(b, rank * (count // 7 + 1)) if rank else b.copy()
        if dataset == "sparse":
            keep = np.random.default_rng(1000 + rank).random(count) < 0.01
            x = np.where(keep, x, np.float32(0))
    elif dataset == "smooth":
        b = base_field(dataset, count)[:count]
        x = b * np.float32(1 + 0.1 * rank) + np.float32(0.25 * rank)
    elif dataset == "real":
        b = base_field(dataset, count)
        t, plane_size = b.shape[0], b.shape[1] * b.shape[2]
        steps = math.ceil(count / plane_size)
        idx = (np.arange(steps) + 5 * rank) % t
        x = b[idx].ravel()[:count]
    elif dataset == "grad":
        b = base_field(dataset, count)
        x = np.resize(np.roll(b, rank * 104729), count)
    else:
        raise ValueError(f"unknown data set {dataset!r}; one of {', '.join(DATASETS)}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if str(dtype) != "float32":
        x = np.ascontiguousarray(x.astype(np_dtype(dtype)))
    return x


if __name__ == "__main__":
    import time

    for name in FIELDS:
        t = time.perf_counter()
        try:
            a = load(name)
        except DataUnavailable as e:
            print(f"{name:11s} unavailable: {e}")
            continue
        print(f"{name:11s} shape={a.shape} dtype={a.dtype} bytes={a.nbytes} min={a.min():.6g} max={a.max():.6g} "
              f"mean={a.mean():.4g} std={a.std():.4g} ({time.perf_counter() - t:.1f}s)")
