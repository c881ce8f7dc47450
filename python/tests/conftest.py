# GPU tests need torch with CUDA and a GPU; without them they skip with a message.
import pytest


def _gpu():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no GPU"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or _gpu()
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"skipped: {reason}"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs torch with CUDA and a GPU")
