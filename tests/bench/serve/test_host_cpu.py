"""The cell CPU meter splits the host's CPU by service: a process spinning in a session of its
own (as the device scripts start every service) is counted under its pid file's name, an idle
one near zero, and the host's busy cores at least what the spinning one used."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.serve.host_cpu import CLIENT, CpuMeter, sessions_of

pytestmark = pytest.mark.unit

SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


def _daemon(code: str, pid_dir: Path, name: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    (pid_dir / f"{name}.pid").write_text(str(process.pid))
    return process


def test_a_spinning_service_is_counted_under_its_name_and_an_idle_one_is_not(
    tmp_path: Path,
) -> None:
    spinner = _daemon(SPIN, tmp_path, "spinner")
    sleeper = _daemon("import time; time.sleep(30)", tmp_path, "sleeper")
    try:
        time.sleep(0.5)  # both started (the interpreter's start-up is not in the cell)
        meter = CpuMeter(sessions_of(tmp_path))
        meter.start()
        time.sleep(1.5)
        cores = meter.stop()
    finally:
        for process in (spinner, sleeper):
            process.kill()
            process.wait()
    assert cores["spinner"] > 0.5  # one core, less what a 2-core box's other work takes
    assert cores.get("sleeper", 0.0) < 0.05
    assert cores.get(CLIENT, 0.0) < 0.2  # this process only slept
    assert cores["spinner"] <= cores["host busy"] + 0.1 <= cores["host"] + 0.1
    assert meter.busiest["spinner"] == cores["spinner"]  # one process: the group's busiest
    assert meter.busiest_name["spinner"].startswith("python")


def test_pid_files_that_do_not_parse_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "api.pid").write_text("123\n")
    (tmp_path / "broken.pid").write_text("not a pid")
    assert sessions_of(tmp_path) == {123: "api"}
    assert sessions_of(tmp_path / "missing") == {} == sessions_of(None)
