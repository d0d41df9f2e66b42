import ncclz


def test_imports_without_gpu():
    assert isinstance(ncclz.built_with_cuda(), bool)
    assert ncclz.cuda_device_count() >= 0


def test_error_hierarchy():
    assert issubclass(ncclz.CorruptDataError, ncclz.Error)
    assert issubclass(ncclz.CorruptDataError, ValueError)
    assert issubclass(ncclz.InvalidArgumentError, ValueError)
    assert issubclass(ncclz.TimeoutError, ncclz.RemoteError)


def test_one_version_everywhere():
    """pyproject.toml, ncclz.__version__, CMakeLists.txt's project() and ncclz.h's NCCLZ_MAJOR/MINOR/PATCH
    (what ncclzGetVersion reports) say the same version."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    py = re.search(r'^version = "([0-9.]+)"', (root / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    cm = re.search(r"project\(ncclz VERSION ([0-9.]+)", (root / "CMakeLists.txt").read_text()).group(1)
    h = (root / "cpp/include/ncclz/ncclz.h").read_text()
    parts = [re.search(rf"#define NCCLZ_{k} (\d+)", h).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    assert py == ncclz.__version__ == cm == ".".join(parts), (py, ncclz.__version__, cm, parts)
