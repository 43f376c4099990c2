"""PeerSecurity: what it accepts, and where `from_dir` looks."""

from pathlib import Path

import pytest

from cnbrain.rpc import PeerSecurity
from cnbrain.rpc.certs import write_certificates


@pytest.mark.parametrize("token", ["", "two words", "tab\there"])
def test_tokens_that_cannot_travel_in_a_header_are_rejected(token: str) -> None:
    with pytest.raises(ValueError, match="token"):
        PeerSecurity(token=token)


def test_the_token_is_not_in_the_repr() -> None:
    assert "peer-secret" not in repr(PeerSecurity(token="peer-secret"))


def test_tls_files_come_all_three_or_none(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="together"):
        PeerSecurity(ca_file=tmp_path / "ca.pem", cert_file=tmp_path / "a.pem")
    assert not PeerSecurity().tls


def test_credentials_need_tls() -> None:
    with pytest.raises(ValueError, match="TLS"):
        PeerSecurity(token="t").server_credentials()
    with pytest.raises(ValueError, match="TLS"):
        PeerSecurity().channel_credentials()


def test_from_dir_reads_the_layout_of_cnbrain_certs(tmp_path: Path) -> None:
    write_certificates(tmp_path, ["east"], days=1)
    security = PeerSecurity.from_dir(tmp_path, "east", token="t")
    assert security.tls
    assert security.ca_file == tmp_path / "ca.pem"
    assert security.cert_file == tmp_path / "east.pem"
    assert security.key_file == tmp_path / "east-key.pem"
    assert security.token == "t"


def test_from_dir_names_the_missing_file(tmp_path: Path) -> None:
    write_certificates(tmp_path, ["east"], days=1)
    with pytest.raises(FileNotFoundError, match=r"west\.pem"):
        PeerSecurity.from_dir(tmp_path, "west")
