"""Shared by the speculation tests: a tiny random Llama target and its transformers twin (fp32),
on each kind of linear layer (``tests.helpers.KERNELS``)."""

import pytest

from tests.helpers import KERNELS, tiny_target


@pytest.fixture(scope="module", params=KERNELS)
def target_pair(request):
    return tiny_target(request.param, seed=3)


@pytest.fixture(scope="module")
def hf_target(target_pair):
    return target_pair[0]


@pytest.fixture(scope="module")
def target(target_pair):
    return target_pair[1]
