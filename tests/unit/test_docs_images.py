"""The diagrams in docs/img are drawn from their Graphviz sources: a committed SVG that
differs from what its .dot renders to is stale (regenerate: scripts/docs_images.py)."""

from __future__ import annotations

import pytest

from scripts.docs_images import IMG, dot_install, sources, stale
from scripts.service_common import ServiceError


def test_every_diagram_is_drawn_from_its_source() -> None:
    try:
        dot = dot_install()
    except ServiceError as e:
        pytest.skip(f"Graphviz's dot is needed to render docs/img/*.dot: {e}")
    assert sources(), f"no .dot sources in {IMG}"
    behind = [str(svg.relative_to(IMG.parent.parent)) for svg in stale(dot)]
    assert behind == [], "stale; run .venv/bin/python scripts/docs_images.py"


def test_every_source_has_its_svg_committed() -> None:
    missing = [s.name for s in sources() if not s.with_suffix(".svg").exists()]
    assert missing == []
