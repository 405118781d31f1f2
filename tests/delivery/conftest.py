"""Fixtures of the delivery checks (chart, image)."""

from __future__ import annotations

import pytest

from tests.delivery.helm_render import VALUES_FILES, Rendered, load_values, render


@pytest.fixture(scope="session")
def rendered() -> dict[str, Rendered]:
    """Each values file rendered once per session."""
    return {name: render(load_values(name)) for name in VALUES_FILES}
