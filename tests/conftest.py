import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)


def embedded_model_path():
    """The converted embedded model, fetched if needed (slow tests only)."""
    from speculab.models.embedded import ensure_embedded_model

    return ensure_embedded_model()


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SPECULAB_SKIP_SLOW"):
        skip = pytest.mark.skip(reason="SPECULAB_SKIP_SLOW is set")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


from tests.servers import eagle_server, one_slot_server  # noqa: E402,F401  (fixtures: real `speculab serve` processes)
