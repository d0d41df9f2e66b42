"""Benchmark data sets for the ncclz codec benchmark.

Every public function returns a C-contiguous float32 NumPy array.  Generated or
derived arrays are cached as .npy/.npz files under bench/data/ (git-ignored) so
that repeated benchmark runs do not pay for generation or training again.

Data sets
---------
gaussian(n)    Synthetic "gradient-like" data: n i.i.d. N(0, sigma=1e-3) values,
               numpy PCG64 seed 20261122.  Default n = 8 Mi values = 32 MiB.
smooth3d(shape) Smooth synthetic 3D field, default 64x256x256 (16 MiB).  With
               normalised coordinates u = (z/Z, y/Y, x/X) in [0, 1)^3:

                 f(u) = sum_{k=1..6} a_k * sin(2*pi * <w_k, u> + phi_k)
                      + sum_{j=1..4} b_j * exp(-|u - c_j|^2 / (2 * s_j^2))

               with integer wave vectors w_k in {-3..3}^3 (not all zero),
               amplitudes a_k ~ U(0.5, 1.5), phases phi_k ~ U(0, 2*pi),
               bump heights b_j ~ U(-2, 2), centres c_j ~ U(0.2, 0.8)^3,
               widths s_j ~ U(0.08, 0.25); numpy PCG64 seed 7.  Computed in
               float64 and rounded once to float32.  No noise is added.
reanalysis()   Real data: NCEP/NCAR reanalysis 500 hPa geopotential height,
               winter (DJF) means, variable ``z`` of
               ``eofs/examples/example_data/hgt_djf.nc`` shipped in the eofs
               package; shape (65, 29, 49) = (time, lat, lon) after dropping the
               singleton pressure axis, cast float64 -> float32.  This is
               only 92,365 values (361 KiB); it is NOT tiled or resized.
gradients()    Real gradients of a small CNN trained with torch (CPU, one
               thread, seed 0) on scikit-learn's bundled ``load_digits``
               (1797 8x8 images, 10 classes).  Model: conv3x3(1->32) ReLU
               conv3x3(32->64) ReLU flatten(4096) fc(4096->512) ReLU
               fc(512->10); 2,121,610 parameters.  SGD momentum 0.9, lr 0.02,
               batch 128, 300 steps; the gradient of the training loss at step
               150 (mid-training, on that step's batch) is taken, all parameter
               grads concatenated in ``model.parameters()`` order into one flat
               float32 array (8.1 MiB).  Per-layer grads: gradients_per_layer().
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DATA_DIR = Path(os.environ.get("NCCLZ_BENCH_DATA", Path(__file__).resolve().parent / "data"))

GAUSSIAN_SEED = 20261122
GAUSSIAN_SIGMA = 1e-3
SMOOTH_SEED = 7
GRAD_SEED = 0
GRAD_STEPS = 300
GRAD_TAKE_STEP = 150


def _cache_path(name: str) -> Path:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    return DATA_DIR / name


def _tmp_beside(p: Path) -> Path:
    """A temporary name next to p for this process: several ranks (processes, possibly in other
    network namespaces) may build the same cache file at once; each writes its own temporary file
    and renames it over p (same bytes, the last rename wins)."""
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


# --------------------------------------------------------------------------- gaussian
def gaussian(n: int = 8 * 1024 * 1024) -> np.ndarray:
    """n i.i.d. N(0, 1e-3^2) float32 values (default 8 Mi values = 32 MiB), fixed seed."""

    def make():
        rng = np.random.default_rng(GAUSSIAN_SEED)
        return rng.standard_normal(n, dtype=np.float32) * np.float32(GAUSSIAN_SIGMA)

    return _cached_npy(f"gaussian_{n}.npy", make)


# --------------------------------------------------------------------------- smooth3d
def smooth3d_params(seed: int = SMOOTH_SEED) -> dict:
    """The random parameters of the smooth3d formula (see module docstring)."""
    rng = np.random.default_rng(seed)
    waves = []
    while len(waves) < 6:
        w = rng.integers(-3, 4, size=3)
        if np.any(w != 0):
            waves.append(w)
    return dict(
        w=np.array(waves, dtype=np.float64),
        a=rng.uniform(0.5, 1.5, 6),
        phi=rng.uniform(0.0, 2 * np.pi, 6),
        b=rng.uniform(-2.0, 2.0, 4),
        c=rng.uniform(0.2, 0.8, (4, 3)),
        s=rng.uniform(0.08, 0.25, 4),
    )


def smooth3d(shape: tuple = (64, 256, 256)) -> np.ndarray:
    """Smooth synthetic 3D field (sum of 6 low-frequency sinusoids + 4 Gaussian bumps)."""
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
def reanalysis_path() -> Path:
    import eofs

    return Path(eofs.__file__).resolve().parent / "examples" / "example_data" / "hgt_djf.nc"


def reanalysis() -> np.ndarray:
    """NCEP/NCAR reanalysis Z500 DJF field from eofs package data, (65, 29, 49) float32. Not tiled."""
    from scipy.io import netcdf_file

    with netcdf_file(reanalysis_path(), "r", mmap=False) as nc:
        z = np.array(nc.variables["z"].data, dtype=np.float64)  # (65, 1, 29, 49), big-endian f8
    z = z[:, 0, :, :]
    if not np.all(np.isfinite(z)):
        raise ValueError("unexpected non-finite values in hgt_djf.nc")
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
    meta = dict(loss_first=losses[0], loss_at_take=losses[take_step - 1], loss_last=losses[-1], train_acc=acc)
    return grabbed, meta


def _grad_npz() -> Path:
    p = _cache_path(f"gradients_digits_cnn_s{GRAD_SEED}_t{GRAD_TAKE_STEP}of{GRAD_STEPS}.npz")
    if not p.exists():
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


# --------------------------------------------------------------------------- registry
DATASETS = {
    "gaussian": dict(
        full=lambda: gaussian(8 * 1024 * 1024),
        quick=lambda: gaussian(1024 * 1024),
        desc="N(0,1e-3) i.i.d., numpy seed 20261122",
    ),
    "smooth3d": dict(
        full=lambda: smooth3d((64, 256, 256)),
        quick=lambda: smooth3d((32, 64, 64)),
        desc="6 low-freq 3D sinusoids + 4 Gaussian bumps, no noise, seed 7",
    ),
    "reanalysis": dict(
        full=reanalysis,
        quick=reanalysis,
        desc="NCEP/NCAR Z500 DJF (eofs hgt_djf.nc, var z), not tiled",
    ),
    "gradients": dict(
        full=gradients,
        quick=gradients,
        desc="CNN on sklearn digits, grads at SGD step 150/300, seed 0",
    ),
}


def load(name: str, quick: bool = False) -> np.ndarray:
    return DATASETS[name]["quick" if quick else "full"]()


if __name__ == "__main__":
    import time

    for name in DATASETS:
        t = time.perf_counter()
        a = load(name)
        print(
            f"{name:11s} shape={a.shape} dtype={a.dtype} bytes={a.nbytes} min={a.min():.6g} max={a.max():.6g} "
            f"mean={a.mean():.4g} std={a.std():.4g} ({time.perf_counter() - t:.1f}s)"
        )
    print("gradients meta:", gradients_meta())
    for k, v in gradients_per_layer().items():
        print(f"  {k:10s} {v.shape!s:18s} std={v.std():.3g} absmax={np.abs(v).max():.3g}")
