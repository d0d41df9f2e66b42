import ncclz


def test_imports_without_gpu():
    assert isinstance(ncclz.built_with_cuda(), bool)
    assert ncclz.cuda_device_count() >= 0


def test_error_hierarchy():
    assert issubclass(ncclz.CorruptDataError, ncclz.Error)
    assert issubclass(ncclz.CorruptDataError, ValueError)
    assert issubclass(ncclz.InvalidArgumentError, ValueError)
    assert issubclass(ncclz.TimeoutError, ncclz.RemoteError)
