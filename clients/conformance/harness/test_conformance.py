"""One test per (scenario, runner); see conftest.py."""

from __future__ import annotations

from typing import Any

import pytest

from suite import needs, runners
from engine import LaneResult


def test_scenario(case: tuple[str, str], played: dict[tuple[str, str], LaneResult],
                  scenario_data: dict[str, dict[str, Any]]) -> None:
    name, runner = case
    spec = next(r for r in runners() if r.name == runner)
    if spec.unavailable is not None:
        pytest.skip(f"runner {runner} unavailable: {spec.unavailable}")
    missing = needs(scenario_data[name]) - (spec.capabilities or needs(scenario_data[name]))
    if missing:
        pytest.skip(f"{runner} lacks {sorted(missing)}")
    result = played.get(case)
    assert result is not None, f"{name} was not played for {runner}"
    if name in spec.known_failures:
        if not result.ok:
            pytest.xfail(f"known failure of {runner}: {spec.known_failures[name]}")
    if not result.ok:
        pytest.fail(f"{name} [{runner}] ({result.seconds:.1f} s, logs in target/conformance/{name}/):\n  "
                    + "\n  ".join(result.failures), pytrace=False)
