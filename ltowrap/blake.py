"""BLAKE2b (claims' offsets, option records' names), without importing hashlib: hashlib.blake2b
is this same type, and importing hashlib loads OpenSSL's _hashlib first, which ltowrap does
not use. A Python built without its own BLAKE2 has only hashlib's."""

try:
    from _blake2 import blake2b as blake2b
except ImportError:
    from hashlib import blake2b as blake2b
