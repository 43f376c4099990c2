"""How a brain proves who it is to its peers, and checks who they are.

Two independent layers, each optional:

- mutual TLS: every server presents its certificate and requires one from the client, both
  signed by the shared CA (`cnbrain certs` writes a development CA and certificates);
- a shared peer token, sent by every client as `authorization: Bearer <token>` and required by
  every server (see `cnbrain.rpc.interceptors`).

`PeerSecurity()` (no files, no token) is plaintext without authentication: for tests and a
single machine only.
"""

from dataclasses import dataclass, field
from pathlib import Path

import grpc

CA_FILE = "ca.pem"
"""The CA certificate's file name in a certificate directory."""


def cert_file_name(name: str) -> str:
    """File name of `name`'s certificate in a certificate directory."""
    return f"{name}.pem"


def key_file_name(name: str) -> str:
    """File name of `name`'s private key in a certificate directory."""
    return f"{name}-key.pem"


@dataclass(frozen=True, slots=True)
class PeerSecurity:
    """TLS files (all three or none) and an optional shared token.

    Raises ValueError when only some of the TLS files are given, or the token is empty or has
    whitespace (it travels in a header). Files are read when credentials are built, not here.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        files = (self.ca_file, self.cert_file, self.key_file)
        if any(f is None for f in files) and any(f is not None for f in files):
            raise ValueError("TLS needs ca_file, cert_file and key_file together, or none")
        if self.token is not None and (not self.token or any(c.isspace() for c in self.token)):
            raise ValueError("the peer token must be non-empty and have no whitespace")

    @classmethod
    def from_dir(cls, directory: Path | str, name: str, token: str | None = None) -> "PeerSecurity":
        """Mutual TLS with DIR/ca.pem, DIR/NAME.pem and DIR/NAME-key.pem (the layout that
        `cnbrain certs` writes), plus `token` if given.

        Raises FileNotFoundError naming the first missing file.
        """
        base = Path(directory)
        paths = (base / CA_FILE, base / cert_file_name(name), base / key_file_name(name))
        for path in paths:
            if not path.is_file():
                raise FileNotFoundError(f"missing TLS file {path}")
        return cls(ca_file=paths[0], cert_file=paths[1], key_file=paths[2], token=token)

    @property
    def tls(self) -> bool:
        """True when mutual TLS is configured."""
        return self.ca_file is not None

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials of a server that presents its certificate and requires a client
        certificate signed by the CA (connections without one fail the TLS handshake).

        Raises ValueError without TLS, OSError when a file cannot be read.
        """
        ca, cert, key = self._read()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials of a client that verifies the server against the CA and presents its
        own certificate. Raises ValueError without TLS, OSError when a file cannot be read."""
        ca, cert, key = self._read()
        return grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )

    def _read(self) -> tuple[bytes, bytes, bytes]:
        if self.ca_file is None or self.cert_file is None or self.key_file is None:
            raise ValueError("TLS is not configured")
        return self.ca_file.read_bytes(), self.cert_file.read_bytes(), self.key_file.read_bytes()
