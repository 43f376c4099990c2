"""The development CA and certificates: layout, key modes, names, usages, validity, and that
every certificate chains to the CA."""

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from cnbrain.rpc.certs import DEFAULT_NAMES, write_certificates


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_writes_the_ca_and_a_certificate_and_key_per_name(tmp_path: Path) -> None:
    written = write_certificates(tmp_path, DEFAULT_NAMES)
    expected = {"ca.pem", "ca-key.pem"} | {
        f"{name}{suffix}" for name in DEFAULT_NAMES for suffix in (".pem", "-key.pem")
    }
    assert {p.name for p in tmp_path.iterdir()} == expected
    assert written.created_ca
    assert set(written.peers) == set(DEFAULT_NAMES)
    for path in tmp_path.glob("*-key.pem"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_each_certificate_is_signed_by_the_ca_for_server_and_client_use(tmp_path: Path) -> None:
    write_certificates(tmp_path, ["east"], days=30)
    ca, east = _load(tmp_path / "ca.pem"), _load(tmp_path / "east.pem")
    east.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not east.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = east.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    names = east.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["east", "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.IPv4Address("127.0.0.1")]
    lifetime = east.not_valid_after_utc - dt.datetime.now(dt.UTC)
    assert dt.timedelta(days=29) < lifetime <= dt.timedelta(days=30)


def test_a_second_run_keeps_the_ca_so_older_certificates_stay_valid(tmp_path: Path) -> None:
    write_certificates(tmp_path, ["east"])
    ca_before = (tmp_path / "ca.pem").read_bytes()
    again = write_certificates(tmp_path, ["west"])
    assert not again.created_ca
    assert (tmp_path / "ca.pem").read_bytes() == ca_before
    ca = _load(tmp_path / "ca.pem")
    _load(tmp_path / "east.pem").verify_directly_issued_by(ca)
    _load(tmp_path / "west.pem").verify_directly_issued_by(ca)


def test_a_key_file_with_loose_modes_is_tightened_when_rewritten(tmp_path: Path) -> None:
    write_certificates(tmp_path, ["east"])
    key = tmp_path / "east-key.pem"
    key.chmod(0o644)
    write_certificates(tmp_path, ["east"])
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("names", "days", "problem"),
    [
        (["ca"], 1, "bad name"),
        (["East"], 1, "bad name"),
        (["-east"], 1, "bad name"),
        (["a/b"], 1, "bad name"),
        ([], 1, "no names"),
        (["east", "east"], 1, "twice"),
        (["east"], 0, "days"),
    ],
)
def test_bad_names_and_days_are_refused_before_writing(
    tmp_path: Path, names: list[str], days: int, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        write_certificates(tmp_path / "out", names, days=days)
    assert not (tmp_path / "out").exists()
