"""`cnbrain certs`: write a development CA and a certificate per brain for mutual TLS (see
`cnbrain.rpc.certs`).

Prints one line per file written. Returns 0; on a bad name or --days prints
`cnbrain: <problem>` and returns 2.
"""

import argparse
import sys
from pathlib import Path

from cnbrain.rpc.certs import DEFAULT_NAMES, write_certificates


def add_certs_command(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `certs` under `sub`."""
    certs = sub.add_parser(
        "certs", help="write a development CA and a TLS certificate per brain (mutual TLS)"
    )
    certs.add_argument("--out", required=True, type=Path, help="directory for the PEM files")
    certs.add_argument(
        "--names",
        default=",".join(DEFAULT_NAMES),
        help="comma-separated brain names, one certificate each (default: %(default)s)",
    )
    certs.add_argument("--days", type=int, default=365, help="validity (default: %(default)s)")
    certs.set_defaults(run=certs_command)


def certs_command(args: argparse.Namespace) -> int:
    names = [name.strip() for name in args.names.split(",") if name.strip()]
    try:
        written = write_certificates(args.out, names, days=args.days)
    except ValueError as exc:
        print(f"cnbrain: {exc}", file=sys.stderr)
        return 2
    verb = "wrote" if written.created_ca else "kept"
    print(f"{verb} CA {written.ca_file} (key {written.ca_key_file})")
    for name, (cert, key) in written.peers.items():
        print(f"wrote {name}: {cert} (key {key})")
    return 0
