import os

# Tests never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models run fastest, and deterministically, on one torch thread (2 shared cores)."""
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
