#!/usr/bin/env bash
# Generate the Python code of the gRPC contracts in protos/ into services/cnbrain/v1/.
#
# Usage: scripts/protos.sh [OUT_DIR]   (default: services; the package lands in OUT/cnbrain/v1)
# Needs the dev extras (grpcio-tools, mypy-protobuf) in the Python found as $PYTHON or .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
OUT="${1:-services}"
BIN="$(dirname "$PYTHON")"
mkdir -p "$OUT/cnbrain/v1"
rm -f "$OUT"/cnbrain/v1/*_pb2*.py "$OUT"/cnbrain/v1/*_pb2*.pyi
"$PYTHON" -m grpc_tools.protoc \
    --plugin=protoc-gen-mypy="$BIN/protoc-gen-mypy" \
    --plugin=protoc-gen-mypy_grpc="$BIN/protoc-gen-mypy_grpc" \
    -Iprotos \
    --python_out="$OUT" --grpc_python_out="$OUT" \
    --mypy_out=quiet:"$OUT" --mypy_grpc_out=quiet:"$OUT" \
    protos/cnbrain/v1/*.proto
touch "$OUT/cnbrain/v1/__init__.py"
