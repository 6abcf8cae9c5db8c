"""pytest's side of the suite: one test per (scenario, runner), all played once per session
(suite.py)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from engine import LaneResult  # noqa: E402
from suite import play_all, runners, scenarios  # noqa: E402


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = [(data["name"], r.name) for _, data in scenarios() for r in runners()]
        metafunc.parametrize("case", cases, ids=[f"{s}[{r}]" for s, r in cases])


@pytest.fixture(scope="session")
def played() -> dict[tuple[str, str], LaneResult]:
    t0 = time.monotonic()
    out = asyncio.run(play_all())
    print(f"\n[conformance] played every scenario in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return out


@pytest.fixture
def scenario_data() -> dict[str, dict[str, Any]]:
    return {d["name"]: d for _, d in scenarios()}
