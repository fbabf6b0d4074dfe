"""Compute key hashes with the official C++ client library (run in a subprocess).

Reads JSON hex keys on stdin, writes ``[[boost, murmur, java], ...]`` on stdout. Calls the
exported ``pulsar::*Hash::makeHash(const std::string&)`` symbols of the ``libpulsar``
bundled with ``pulsar-client`` through ctypes, building a libstdc++ ``std::string`` by
hand. Exit status 3 means the library or symbols are not available here.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import sys

SYMBOLS = {
    "boost": "_ZN6pulsar9BoostHash8makeHashERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "murmur": "_ZN6pulsar14Murmur3_32Hash8makeHashERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "java": "_ZN6pulsar14JavaStringHash8makeHashERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
}


class _StdString(ctypes.Structure):
    # libstdc++ (C++11 ABI) layout: data pointer, length, 16-byte SSO buffer / capacity
    _fields_ = (("ptr", ctypes.c_char_p), ("size", ctypes.c_size_t), ("buf", ctypes.c_char * 16))


def main() -> int:
    try:
        import _pulsar  # loads libpulsar and its dependencies
    except ImportError:
        return 3
    libs = glob.glob(
        os.path.join(os.path.dirname(_pulsar.__file__), "pulsar_client.libs", "libpulsar-*.so")
    )
    if not libs:
        return 3
    lib = ctypes.CDLL(libs[0])
    fns = []
    for name in ("boost", "murmur", "java"):
        try:
            fn = getattr(lib, SYMBOLS[name])
        except AttributeError:
            return 3
        fn.restype = ctypes.c_int32
        fn.argtypes = (ctypes.c_void_p, ctypes.POINTER(_StdString))
        fns.append(fn)
    this = ctypes.create_string_buffer(64)  # stateless hasher objects
    out = []
    for key_hex in json.load(sys.stdin):
        key = bytes.fromhex(key_hex)
        keep = ctypes.create_string_buffer(key, len(key) + 1)
        s = _StdString(ctypes.cast(keep, ctypes.c_char_p), len(key))
        out.append([fn(this, ctypes.byref(s)) for fn in fns])
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
