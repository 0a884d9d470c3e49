"""Options shared by the ``beyondsim`` commands, each declared once as a typer ``Annotated`` alias
(``home: HomeOpt = None``). A command whose option means something narrower builds it with the
matching ``*_option(help)`` function, so the flag, its environment variable and its type stay here.
Method packages that add verbs (entry point group ``beyondsim.commands``) use them too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def home_option(help: str = "Store and caches (default ~/.beyondsim).") -> Any:
    return typer.Option("--home", envvar="BEYONDSIM_HOME", help=help)


def data_dir_option(help: str = "Data directory (else BEYONDSIM_DATA, else ../shared/data).") -> Any:
    return typer.Option("--data-dir", help=help)


def online_option(help: str = "Allow loaders to fetch missing data from the official source.") -> Any:
    return typer.Option("--online", help=help)


def prices_option(help: str = "Extra prices TOML on top of harness/models/prices.toml.") -> Any:
    return typer.Option("--prices", help=help)


# the --format choices of every command that prints a table or its rows as data
TABULAR = ("table", "json", "csv")

# Help texts are plain text: brackets such as ``[retrievers.NAME]`` are words, not console markup.
TYPER_SETTINGS: dict[str, Any] = {"no_args_is_help": True, "rich_markup_mode": None}

# where every command that writes the site writes it unless told otherwise (`leaderboard`, `submit`,
# `make demo`): one place, relative to the working directory, printed by each command
DEFAULT_SITE = Path("leaderboard")

HomeOpt = Annotated[Optional[Path], home_option()]
DataDirOpt = Annotated[Optional[Path], data_dir_option()]
OnlineOpt = Annotated[bool, online_option()]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="cpu or cuda (default: cuda when present).")]
MaxQueriesOpt = Annotated[Optional[int], typer.Option(
    "--max-queries", help="Score only the first N judged queries (a smoke test; stored as the benchmark "
    "'<name>[:N]', apart from full runs).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed.")]
BenchmarkFilterOpt = Annotated[Optional[str], typer.Option(
    "--benchmark", "-b", help="Only this benchmark (name or folder path, as given to run).")]
RetrieverFilterOpt = Annotated[Optional[str], typer.Option(
    "--retriever", "-r", help="Only this retriever (id or label).")]

# The LLM behind the retrievers that call one (run, submit, llm info).
LlmBaseUrlOpt = Annotated[Optional[str], typer.Option(
    "--llm-base-url", help="OpenAI-compatible server for LLM retrievers (else BEYONDSIM_LLM_BASE_URL, else the "
    "embedded llama.cpp server). The key comes from BEYONDSIM_LLM_API_KEY or OPENAI_API_KEY.")]
LlmModelOpt = Annotated[Optional[str], typer.Option(
    "--llm-model", help="Model name on that server (else BEYONDSIM_LLM_MODEL).")]
MaxUsdOpt = Annotated[Optional[float], typer.Option(
    "--max-usd", help="Stop before the LLM request that could pass this spend.")]
MaxCallsOpt = Annotated[Optional[int], typer.Option(
    "--max-calls", help="Stop before LLM request number N+1 (cache hits are free).")]
LlmConcurrencyOpt = Annotated[Optional[int], typer.Option(
    "--llm-concurrency", help="Parallel LLM requests (default: 4 to a server; to the embedded server, one per slot: "
    "[llm] embedded_slots, 8).")]
PricesOpt = Annotated[Optional[Path], prices_option()]

# --ray: run the jobs on a Ray cluster (harness.run.distributed, imported only when it is given)
RayOpt = Annotated[Optional[str], typer.Option(
    "--ray", metavar="local|ADDRESS", help="Run every (retriever, benchmark, seed) job as a Ray task: 'local' starts a "
    "cluster on this machine, ADDRESS (host:port, or auto) joins a running one. Results are stored here as they "
    "arrive; --home and the data directory must be paths every node sees. Needs pip install 'beyondsim[ray]'.")]
