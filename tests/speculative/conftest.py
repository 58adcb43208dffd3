"""Shared by the speculation tests: a tiny random Llama target and its transformers twin (fp32)."""

import pytest

from tests.helpers import speculab_from_hf, tiny_hf_model


@pytest.fixture(scope="module")
def hf_target():
    return tiny_hf_model("llama", seed=3)


@pytest.fixture(scope="module")
def target(hf_target):
    return speculab_from_hf(hf_target)
