"""labeldp: two-party, feature-oblivious label differential privacy."""

from pathlib import Path

__version__ = "0.1.0"

# The wire contract is generated into proto/labeldp/v1 (beside its .proto sources) and imported as
# ``labeldp.v1``, the path protoc's generated code uses. In a wheel it is installed there directly.
_CONTRACT = Path(__file__).resolve().parent.parent / "proto" / "labeldp"
if _CONTRACT.is_dir():
    __path__.append(str(_CONTRACT))
