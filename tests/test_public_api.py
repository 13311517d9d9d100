"""The public surface of ``import lattice``: what it exports, and what it does not import."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator

import pytest

import lattice
from tests.conftest import REPO

SDKS = ("openai", "anthropic", "mcp", "opentelemetry", "litellm")
"""Heavy optional dependencies that only the features using them may import."""
HEAVY = ("networkx", "httpx", "httpcore", "jsonschema", "rich", "anyio", *SDKS)
"""Modules that a run, a lowering or an HTTP call imports when it needs them, never an import."""
KEYWORD_ONLY = {"LLMPrimitive": 0, "Response": 0, "Runner": 1}
"""Public classes → how many leading positional parameters they take (``Runner(ir, ...)``)."""


@pytest.fixture(scope="module", autouse=True)
def _leaves_no_run_in_the_clone() -> Iterator[None]:
    """The probes below run in the clone: none of them may leave a run folder there."""
    runs = REPO / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    yield
    after = set(runs.iterdir()) if runs.is_dir() else set()
    assert after == before, f"the tests left {sorted(map(str, after - before))}"


BOUND_AT_IMPORT = {"abatch": "lattice.batch", "batch": "lattice.batch"}
BOUND_AT_IMPORT |= {"lower": "lattice.lower", "lower_document": "lattice.lower"}
"""The functions named like their subpackages, bound when ``lattice`` is imported."""


def test_all_matches_the_lazy_export_table() -> None:
    assert lattice.__all__ == sorted([*lattice._EXPORTS, *BOUND_AT_IMPORT, "__version__"])
    assert len(set(lattice.__all__)) == len(lattice.__all__)
    assert dir(lattice) == lattice.__all__


@pytest.mark.parametrize("name", sorted(lattice._EXPORTS))
def test_every_export_is_importable_from_its_module(name: str) -> None:
    value = getattr(lattice, name)
    defining = importlib.import_module(lattice._EXPORTS[name])
    assert getattr(defining, name) is value


@pytest.mark.parametrize("name", sorted(BOUND_AT_IMPORT))
def test_the_functions_named_like_subpackages_are_theirs(name: str) -> None:
    value = vars(lattice)[name]
    assert callable(value) and value is getattr(
        importlib.import_module(BOUND_AT_IMPORT[name]), name
    )


def test_type_checking_imports_mirror_the_export_table() -> None:
    """Type checkers see the same names, from the same modules, as the lazy table gives."""
    tree = ast.parse((REPO / "lattice" / "__init__.py").read_text(encoding="utf-8"))
    (block,) = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    seen = {
        alias.name: stmt.module
        for stmt in block.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    assert seen == lattice._EXPORTS


def test_the_names_a_user_needs_are_exported() -> None:
    wanted = {
        "load_workflow",
        "lower",
        "Runner",
        "RunResult",
        "LLMPrimitive",
        "Response",
        "LatticeError",
        "LatticeUserError",
        "LatticeRunError",
        "OpenAIProvider",
        "AnthropicProvider",
        "MockProvider",
        "FixtureProvider",
        "make_provider",
        "batch",
        "abatch",
        "BatchSummary",
    }
    assert wanted <= set(lattice.__all__)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Lowerer'"):
        _ = lattice.Lowerer  # type: ignore[attr-defined]


def _sdks_after(code: str, watched: tuple[str, ...] = SDKS) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code
            + "\nimport json, sys\n"
            + f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(watched)!r}))))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_lattice_does_not_import_the_sdks() -> None:
    assert _sdks_after("import lattice") == []


def test_using_the_public_api_does_not_import_the_sdks() -> None:
    """Even a star import (every public name, provider classes included) stays SDK-free."""
    assert _sdks_after("from lattice import *") == []


def test_lattice_help_does_not_import_them() -> None:
    code = (
        "import contextlib, io\n"
        "from lattice.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['run', '--help'])"
    )
    assert _sdks_after(code) == []


RUN_HELLO = (
    "from lattice import MockProvider, Runner, RunStore, lower\n"
    "from lattice.runtime.settings import RuntimeSettings, settings_from_config\n"
    "from lattice.config import load_config\n"
    "ir = lower('workflows/examples/hello-world.json')\n"
    "mock = MockProvider.from_file('workflows/examples/hello-world.mock.json')\n"
    "settings = settings_from_config(load_config())\n"
    "runner = Runner(ir, provider=mock, store=RunStore(None), settings=settings)\n"
    "runner.subscribe(lambda event: None)\n"
    "assert runner.run({'name': 'Ada'}).status == 'completed'\n"
)


def test_a_run_without_tracing_imports_none_of_them() -> None:
    """Not configured, tracing costs nothing: OpenTelemetry is not even imported (and a
    listener on a mock run streams nothing)."""
    assert _sdks_after(RUN_HELLO) == []


def test_a_traced_run_imports_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe above would see it: configured, a run loads the SDK (and nothing else)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.2")  # nothing listens there
    assert _sdks_after(RUN_HELLO) == ["opentelemetry"]


@pytest.mark.parametrize(
    "code",
    [
        "import lattice",
        "import lattice; lattice.Runner",
        "from lattice import Runner, lower, RunStore, MockProvider, RuntimeSettings",
        "import lattice.runtime.runner, lattice.lower, lattice.runs.store",
    ],
)
def test_importing_the_runtime_and_the_compiler_loads_no_heavy_module(code: str) -> None:
    """httpx, jsonschema and the SDKs are imported when a run, a lowering or an HTTP call
    needs them, and networkx never (bench/compare_langgraph.py times the import)."""
    assert _sdks_after(code, HEAVY) == []


DEFERRED = ("lattice.config", "lattice.llm.mock", "tomllib")
"""Modules a plain run does not need, left out of the runtime's import (each cost a few
ms of ``from lattice import Runner``): the config models come with ``load_config``, the
mock with ``MockProvider``."""


def _modules_after(code: str, watched: tuple[str, ...]) -> list[str]:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code + f"\nimport sys\nprint(sorted(set(sys.modules) & set({list(watched)!r})))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return list(ast.literal_eval(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "from lattice import Runner, lower, RunStore",
        "import lattice.runtime.runner, lattice.lower, lattice.runs.store",
    ],
)
def test_importing_the_runtime_leaves_out_what_a_run_does_not_need(code: str) -> None:
    assert _modules_after(code, DEFERRED) == []


def test_the_deferred_modules_come_when_used() -> None:
    """The probe above can fail: the names that need them still bring them."""
    code = "from lattice.llm import MockProvider\nfrom lattice import load_config"
    assert _modules_after(code, DEFERRED) == sorted(DEFERRED)


LOADED_WITH_AN_IR = ("pydantic", "lattice.ir.models")
"""The IR's models and pydantic (about 60 ms): loaded by whatever makes or reads an ExecIR
(lowering, ``ir_from_json``), never by importing the runtime, which is handed one."""
LOADED_WITH_A_MODEL_OP = (
    "lattice.runtime.llm_op",
    "lattice.runtime.agent_op",
    "lattice.contracts.engine",
    "lattice.agents.loop",
)
"""The contract engine and the agent loop: loaded when a Runner is built for an IR with an
LLM or AGENT op, never by an import."""


@pytest.mark.parametrize(
    "code",
    [
        "import lattice",
        "from lattice import Runner, lower, RunStore",
        "import lattice.runtime, lattice.runtime.runner, lattice.lower, lattice.runs.store",
        "import lattice.ir.templates, lattice.ir.kinds",  # lattice.ir's names come on first use
    ],
)
def test_importing_the_runtime_loads_no_ir_model_nor_the_contract_engine(code: str) -> None:
    watched = (*LOADED_WITH_AN_IR, "lattice.ir.serialize", *LOADED_WITH_A_MODEL_OP)
    assert _modules_after(code, watched) == []


TRANSFORM_ONLY = {
    "nodes": [
        {"id": "s", "type": "start"},
        {"id": "t", "type": "dataTransform", "data": {"expression": "length(`[1, 2]`)"}},
        {"id": "e", "type": "end"},
    ],
    "connections": [{"from": "s", "to": "t"}, {"from": "t", "to": "e"}],
}


def test_the_models_come_with_an_ir_and_the_engine_with_a_model_op() -> None:
    """The probe above can fail: lowering brings the models; a run without model ops
    leaves the contract engine out, a run with an LLM op brings it (and no agent loop)."""
    plain = (
        "from lattice import Runner, RunStore, lower\n"
        f"runner = Runner(lower({TRANSFORM_ONLY!r}), store=RunStore(None))\n"
        "assert runner.run({}).output == 2"
    )
    watched = (*LOADED_WITH_AN_IR, *LOADED_WITH_A_MODEL_OP)
    assert _modules_after(plain, watched) == sorted(LOADED_WITH_AN_IR)
    llm_op = ["lattice.contracts.engine", "lattice.runtime.llm_op"]
    assert _modules_after(RUN_HELLO, watched) == sorted([*LOADED_WITH_AN_IR, *llm_op])


def test_the_heavy_modules_come_when_needed() -> None:
    """The probe above can fail: a schema and an HTTP request's transport bring theirs."""
    document = {
        "nodes": [
            {"id": "s", "type": "start"},
            {"id": "p", "type": "prompt", "data": {"prompt": "hi", "outputSchema": {}}},
            {"id": "e", "type": "end"},
        ],
        "connections": [{"from": "s", "to": "p"}, {"from": "p", "to": "e"}],
    }
    schema = f"from lattice import lower\nlower({document!r})"
    assert _sdks_after(schema, HEAVY) == ["jsonschema"]
    http = "from lattice.tools.http import HttpPolicy\nHttpPolicy().transport_for_run()"
    loaded = _sdks_after(http, HEAVY)
    assert {"anyio", "httpcore", "httpx"} <= set(loaded)  # rich too, where click is installed
    assert "jsonschema" not in loaded


def test_the_probe_would_see_an_sdk() -> None:
    """The subprocess check above can fail: importing a provider's SDK shows up."""
    assert _sdks_after("import lattice, openai") == ["openai"]


@pytest.mark.parametrize("name", sorted(KEYWORD_ONLY))
def test_public_constructors_take_keyword_arguments(name: str) -> None:
    params = list(inspect.signature(getattr(lattice, name)).parameters.values())
    assert len(params) > KEYWORD_ONLY[name]
    for param in params[KEYWORD_ONLY[name] :]:
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}({param.name})"


def test_py_typed_ships() -> None:
    assert (REPO / "lattice" / "py.typed").is_file()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["lattice"]


def test_lower_stays_the_function_after_its_subpackage_is_imported() -> None:
    """Importing ``lattice.lower`` (the subpackage) used to replace ``lattice.lower`` (the function)."""
    code = (
        "from lattice import LowererRegistry, lower\n"
        "import lattice, lattice.lower.compiler\n"
        "from lattice.lower import lower_document\n"
        "assert lower is lattice.lower and callable(lower), lower\n"
        "assert lower.__module__ == 'lattice.lower', lower\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("package_name", "module_name", "name"),
    [
        ("lattice.lower", "lattice.lower.compiler", "lower"),
        ("lattice.lower", "lattice.lower.compiler", "lower_document"),
        ("lattice.batch", "lattice.batch.api", "batch"),
        ("lattice.batch", "lattice.batch.api", "abatch"),
    ],
)
def test_the_packages_entry_points_keep_the_compilers_signatures(
    package_name: str, module_name: str, name: str
) -> None:
    """``lattice.lower.lower`` stands in for ``compiler.lower`` (so that importing the
    package does not load the compiler), as ``lattice.batch.batch`` does for
    ``lattice.batch.api``'s: their parameters must not drift apart."""
    package = importlib.import_module(package_name)
    module = importlib.import_module(module_name)
    ours, theirs = getattr(package, name), getattr(module, name)
    assert inspect.signature(ours) == inspect.signature(theirs)
