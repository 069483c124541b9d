"""bench/serve/stacks.py over py-spy's raw format, as `py-spy record -f raw --subprocesses
--threads` writes it (lines copied from a real recording, counts changed)."""

from bench.serve.stacks import parse, report

SERVER = 'process 10:"python3 -m gpu_runtime serve";thread (10): MainThread'
LOOP = "run (asyncio/runners.py:118);_run_once (asyncio/base_events.py:{})"
RAW = "\n".join([
    f"{SERVER};{LOOP.format(1922)};_line (gpu_runtime/server/routes.py:190) 30",
    f"{SERVER};{LOOP.format(1930)};delta_line (gpu_runtime/server/routes.py:180) 50",
    'process 10:"python3 -m gpu_runtime serve";process 11:"VLLM::EngineCore";'
    "thread (11): MainThread;step (vllm/engine.py:5) 80",
    "not a stack line",
])  # fmt: skip


def test_samples_add_up_per_process_and_thread() -> None:
    threads = parse(RAW)
    main = threads[("10 python3 -m gpu_runtime serve", "thread (10): MainThread")]
    core = threads[("11 VLLM::EngineCore", "thread (11): MainThread")]
    assert (main.samples, core.samples) == (80, 80)
    # one function's lines are one function; a sample counts once per function on its stack
    assert main.inclusive["_run_once (asyncio/base_events.py)"] == 80
    assert main.inclusive["run (asyncio/runners.py)"] == 80
    assert main.own == {
        "_line (gpu_runtime/server/routes.py)": 30,
        "delta_line (gpu_runtime/server/routes.py)": 50,
    }


def test_report_gives_each_thread_its_share_of_the_window() -> None:
    text = report(parse(RAW), window=100, top=3)
    assert "| 11 VLLM::EngineCore | thread (11): MainThread | 0.80 |" in text
    assert "* 62% `delta_line (gpu_runtime/server/routes.py)`" in text
