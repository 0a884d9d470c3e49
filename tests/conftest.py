"""Shared fixtures. Every test runs with outbound network connections refused, so any code
path that would reach a hub or a dataset server fails loudly instead of passing by luck."""

from __future__ import annotations

import io
import socket
import tarfile
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class NetworkBlocked(RuntimeError):
    pass


def _is_local(address: object) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX
        return True
    if isinstance(address, tuple) and address:
        host = str(address[0])
        return host in ("localhost", "::1") or host.startswith("127.")
    return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    attempts: list[object] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def guard(self: socket.socket, address: object, _real=real_connect):  # type: ignore[no-untyped-def]
        if not _is_local(address):
            attempts.append(address)
            raise NetworkBlocked(f"test tried to open a network connection to {address!r}")
        return _real(self, address)

    def guard_ex(self: socket.socket, address: object, _real=real_connect_ex):  # type: ignore[no-untyped-def]
        if not _is_local(address):
            attempts.append(address)
            raise NetworkBlocked(f"test tried to open a network connection to {address!r}")
        return _real(self, address)

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket.socket, "connect_ex", guard_ex)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return attempts


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("BEYONDSIM_HOME", str(h))
    return h


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory):
    """An encoder pool (CPU) with an embedding cache shared by the tests of one module."""
    from harness.encoders import EncoderPool

    return EncoderPool(tmp_path_factory.mktemp("cache"), "cpu")


@pytest.fixture
def ctx(pool):
    """A run context on the CPU over the module's encoder pool."""
    from harness.protocols import RunContext

    return RunContext(seed=0, device="cpu", encoders=pool, cache_dir=pool.cache_dir)


def tarball_with_member(path: Path, member: str) -> Path:
    """A .tar.gz at ``path`` holding one two-byte file named ``member`` (for unsafe-path tests)."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return path
