"""Shared fixtures. Tiny models are built once per session (they take ~100 ms each)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a model hub; fail fast instead of retrying

import pytest
import torch

from mot_core.tiny import TINY_ARCHITECTURES, tiny_model

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session", params=TINY_ARCHITECTURES)
def tiny_lm(request):
    return tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_models():
    return {arch: tiny_model(arch) for arch in TINY_ARCHITECTURES}
