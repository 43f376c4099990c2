"""Mutual TLS with the certificates of `cnbrain certs`: a peer with a certificate of the CA
gets through; a client without a certificate, or with one from another CA, and a server whose
certificate does not name the host asked for, are refused."""

from pathlib import Path

import grpc
import pytest

from cnbrain.rpc import PeerSecurity
from cnbrain.rpc.certs import write_certificates
from cnbrain.v1 import ledger_pb2, ledger_pb2_grpc
from tests.rpc.rpc_ledger import Rpc, prepare_of

pytestmark = pytest.mark.asyncio


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    write_certificates(tmp_path / "ours", ["national", "east"], days=2)
    return tmp_path / "ours"


async def _prepare(channel: grpc.aio.Channel) -> ledger_pb2.PrepareResponse:
    stub = ledger_pb2_grpc.LedgerServiceStub(channel)
    return await stub.Prepare(prepare_of("r1"), timeout=3)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_peers_with_certificates_of_the_ca_talk(rpc: Rpc, certs: Path, host: str) -> None:
    server, ledger = await rpc.serve(security=PeerSecurity.from_dir(certs, "national"))
    channel = rpc.channel(f"{host}:{server.port}", security=PeerSecurity.from_dir(certs, "east"))
    assert (await _prepare(channel)).results[0].prepared
    assert ledger.prepared == {"r1"}


async def test_server_name_selects_the_name_checked_in_the_servers_certificate(
    rpc: Rpc, certs: Path
) -> None:
    server, _ = await rpc.serve(security=PeerSecurity.from_dir(certs, "national"))
    east = PeerSecurity.from_dir(certs, "east")
    right = rpc.channel(f"127.0.0.1:{server.port}", security=east, server_name="national")
    assert (await _prepare(right)).results[0].prepared
    wrong = rpc.channel(f"127.0.0.1:{server.port}", security=east, server_name="east")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _prepare(wrong)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_client_without_a_certificate_is_refused(rpc: Rpc, certs: Path) -> None:
    server, ledger = await rpc.serve(security=PeerSecurity.from_dir(certs, "national"))
    credentials = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.pem").read_bytes())
    channel = grpc.aio.secure_channel(f"127.0.0.1:{server.port}", credentials)
    rpc.channels.append(channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _prepare(channel)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert ledger.calls == 0


async def test_a_client_with_a_certificate_of_another_ca_is_refused(
    rpc: Rpc, certs: Path, tmp_path: Path
) -> None:
    write_certificates(tmp_path / "theirs", ["east"], days=2)
    server, ledger = await rpc.serve(security=PeerSecurity.from_dir(certs, "national"))
    # Trusts our CA (so it accepts the server) but presents a certificate of theirs.
    impostor = PeerSecurity(
        ca_file=certs / "ca.pem",
        cert_file=tmp_path / "theirs" / "east.pem",
        key_file=tmp_path / "theirs" / "east-key.pem",
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _prepare(rpc.channel(server, security=impostor))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert ledger.calls == 0


async def test_a_plaintext_client_is_refused(rpc: Rpc, certs: Path) -> None:
    server, ledger = await rpc.serve(security=PeerSecurity.from_dir(certs, "national"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _prepare(rpc.channel(server))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert ledger.calls == 0


async def test_tls_and_the_token_together(rpc: Rpc, certs: Path) -> None:
    server, _ = await rpc.serve(security=PeerSecurity.from_dir(certs, "national", token="tok"))
    without = rpc.channel(server, security=PeerSecurity.from_dir(certs, "east"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _prepare(without)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with_token = rpc.channel(server, security=PeerSecurity.from_dir(certs, "east", token="tok"))
    assert (await _prepare(with_token)).results[0].prepared
