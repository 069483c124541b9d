"""The import contract, checked over the real import graph (every ``import`` statement of every
module, function-level and ``TYPE_CHECKING`` ones included):

* no cycles between modules;
* the product packages (``gpu_runtime``, ``backend``, ``worker``, ``dashboard``) never import the
  tools (``bench``, ``evals``, the ``inferscale`` command);
* the runtime imports nothing of its clients; the backend and the worker import of the runtime
  only its torch-free client side (``gpu_runtime.client``, ``gpu_runtime.types``); nothing in
  the backend imports the worker; the dashboard talks to the API over HTTP only;
* inside ``backend`` and ``gpu_runtime``, layers point one way (``LAYERS``: a module imports its
  own layer or the ones below);
* vLLM is imported by exactly two modules.

The checker is run against a deliberately broken package too, so it is known to fail.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("gpu_runtime", "backend", "worker", "dashboard")
TOOLS = ("bench", "evals", "inferscale")

# Top to bottom; a module belongs to the layer of its longest matching prefix.
LAYERS = {
    "backend": [
        ["backend.main", "backend.cli"],  # the processes' entry points
        ["backend.api"],  # routes, schemas, HTTP concerns
        ["backend.jobs"],  # the use cases the worker runs (encoding, extraction, ingestion)
        ["backend.resources"],  # the composition root
        ["backend.services"],  # every write
        ["backend.jobs.pipeline"],  # task names, the broker, the outbox, progress
        ["backend.runtime", "backend.retrieval"],  # adapters: the runtime service, FAISS
        ["backend.repositories"],
        ["backend.db"],
        ["backend.core", "backend.errors", "backend"],
    ],
    "gpu_runtime": [
        ["gpu_runtime.__main__"],
        ["gpu_runtime.server"],  # the internal HTTP API
        ["gpu_runtime.runtime"],  # the tenant-typed runtime over the engine
        ["gpu_runtime.engine"],  # vLLM's public API
        ["gpu_runtime.connector"],  # the KV connector's halves (vLLM's internals: one module)
        ["gpu_runtime.kernels"],
        ["gpu_runtime.layouts", "gpu_runtime.rope"],
        ["gpu_runtime.pool"],  # memory tiers over the store
        ["gpu_runtime.store"],  # fact KV as tensors, durable
        ["gpu_runtime.store.disk"],  # the on-disk format, torch-free
        ["gpu_runtime.model_assets"],
        ["gpu_runtime.client", "gpu_runtime.config", "gpu_runtime.generation"],
        ["gpu_runtime.types", "gpu_runtime.errors", "gpu_runtime"],
    ],
}
RUNTIME_CLIENT_SIDE = ("gpu_runtime", "gpu_runtime.client", "gpu_runtime.types")
VLLM_MODULES = {"gpu_runtime.engine", "gpu_runtime.connector.vllm_connector"}


@dataclass(frozen=True)
class Graph:
    edges: dict[str, set[str]]  # module -> the project modules it imports
    external: dict[str, set[str]]  # module -> the top-level packages of others it imports


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def build_graph(root: Path, packages: tuple[str, ...]) -> Graph:
    files = {_module_name(root, f): f for p in packages for f in (root / p).rglob("*.py")}
    edges: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges[name], external[name] = set(), set()
        for base, names in _imported(ast.parse(path.read_text()), package):
            # ``from a import b``: the module a.b if there is one, else a itself
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in files]
            for target in submodules or [base]:
                known = target
                while known and known not in files:
                    known = known.rpartition(".")[0]
                if known:
                    if known != name:
                        edges[name].add(known)
                else:
                    external[name].add(target.partition(".")[0])
    return Graph(edges, external)


def _imported(tree: ast.AST, package: str) -> Iterator[tuple[str, list[str]]]:
    """(module, names imported from it) of every import statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            yield base, [alias.name for alias in node.names]


def _root(module: str) -> str:
    return module.partition(".")[0]


def _layer(module: str, layers: list[list[str]]) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, members in enumerate(layers):
        for prefix in members:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _client_side(module: str) -> bool:
    """The runtime's torch-free side its clients may import."""
    return module == "gpu_runtime" or any(
        module == m or module.startswith(m + ".") for m in RUNTIME_CLIENT_SIDE[1:]
    )


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.edges):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def violations(graph: Graph, layers: dict[str, list[list[str]]] = LAYERS) -> list[str]:
    found = [f"cycle: {' <-> '.join(c)}" for c in cycles(graph)]
    for module, targets in sorted(graph.edges.items()):
        package = _root(module)
        for target in sorted(targets):
            where = _root(target)
            if package in PRODUCT and where in TOOLS:
                found.append(f"{module} imports the tool {target}")
            if package == "gpu_runtime" and where in ("backend", "worker", "dashboard"):
                found.append(f"{module}: the runtime imports its client {target}")
            if (
                package in ("backend", "worker")
                and where == "gpu_runtime"
                and not _client_side(target)
            ):
                found.append(f"{module} imports runtime internals: {target}")
            if package == "backend" and where == "worker":
                found.append(f"{module} imports upward into the worker: {target}")
            if package == "dashboard" and where != "dashboard":
                found.append(f"{module}: the dashboard imports {target} (it uses the API)")
            if package in layers and where == package:
                mine, theirs = _layer(module, layers[package]), _layer(target, layers[package])
                if mine is None or theirs is None:
                    found.append(f"{module} or {target} is in no layer of {package}")
                elif theirs < mine:
                    found.append(f"{module} imports upward: {target}")
    for module, packages in sorted(graph.external.items()):
        if "vllm" in packages and _root(module) in PRODUCT and module not in VLLM_MODULES:
            found.append(f"{module} imports vLLM (only {', '.join(sorted(VLLM_MODULES))} may)")
    return found


def test_the_project_keeps_its_import_contract() -> None:
    graph = build_graph(REPO, PRODUCT + TOOLS)
    assert len(graph.edges) > 180  # the whole project was read
    assert violations(graph) == []


def test_vllm_is_imported_in_exactly_two_modules() -> None:
    graph = build_graph(REPO, PRODUCT)
    assert {m for m, packages in graph.external.items() if "vllm" in packages} == VLLM_MODULES


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checker_fails_on_a_cycle_an_upward_import_and_a_forbidden_one(
    tmp_path: Path,
) -> None:
    """The same rules over a small broken project: each deliberate violation is named."""
    _write(tmp_path, {
        "backend/__init__.py": "",
        "backend/db/__init__.py": "",
        "backend/db/models.py": "from backend.services.memories import MemoryService\n",
        "backend/services/__init__.py": "",
        "backend/services/memories.py": "class MemoryService: ...\n",
        "backend/services/chat.py": "from backend.services import memories\n"
                                    "def f():\n    from backend.services.tenants import g\n",
        "backend/services/tenants.py": "from backend.services.chat import f\ndef g(): ...\n",
        "backend/api/__init__.py": "import vllm\nfrom worker import tasks\n",
        "worker/__init__.py": "",
        "worker/tasks.py": "from gpu_runtime.pool import index\nimport bench\n",
        "gpu_runtime/__init__.py": "", "gpu_runtime/pool/__init__.py": "",
        "gpu_runtime/pool/index.py": "from backend.services import memories\n",
        "bench/__init__.py": "",
    })  # fmt: skip
    found = violations(build_graph(tmp_path, ("backend", "worker", "gpu_runtime", "bench")))
    assert found == [
        "cycle: backend.services.chat <-> backend.services.tenants",
        "backend.api imports upward into the worker: worker.tasks",
        "backend.db.models imports upward: backend.services.memories",
        "gpu_runtime.pool.index: the runtime imports its client backend.services.memories",
        "worker.tasks imports the tool bench",
        "worker.tasks imports runtime internals: gpu_runtime.pool.index",
        "backend.api imports vLLM (only gpu_runtime.connector.vllm_connector, "
        "gpu_runtime.engine may)",
    ]
