"""``bench floors`` against real Postgres and Redis and its bare app on uvicorn: every probe
timed every round, the floor their medians' sum, and the bare app a stream the official OpenAI
SDK reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.serve import floors

pytestmark = pytest.mark.db


def test_floors_time_every_probe_and_add_them(migrated_database: str, tmp_path: Path) -> None:
    assert floors.main(["--rounds", "5", "--port", "8096", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "floors.json").read_text())
    assert set(result["probes_ms"]) == set(floors.PROBES)
    for name, values in result["samples_ms"].items():
        assert len(values) == 5, name
        assert all(0 < v < 5_000 for v in values), name
    medians = [p["median"] for p in result["probes_ms"].values()]
    assert result["floor_ms"] == pytest.approx(sum(medians))
    assert "floor_ms" in (tmp_path / "floors.md").read_text()


def test_floors_refuse_no_rounds() -> None:
    with pytest.raises(SystemExit) as exit_:
        floors.main(["--rounds", "0"])
    assert exit_.value.code == 2
