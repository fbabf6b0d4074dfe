"""``magnetar tokens``: make keys and JWTs for token authentication, as ``pulsar tokens`` does.

Keys are written the way Pulsar's tool writes them, so either tool's output works with
either broker: a secret key is raw bytes (``--base64``: base64 text), a key pair is DER
(PKCS#8 private key, X.509 SubjectPublicKeyInfo public key). A token's role is its ``sub``
claim; ``--expiry-time`` adds ``exp``.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.broker.config.durations import parse_duration
from magnetar.broker.security.auth.keys import (
    KeyMaterialError,
    algorithms_for_key,
    load_private_key,
    load_public_key,
    read_key_value,
)

EPILOG = """\
Examples:
  magnetar tokens create-secret-key --output my-secret.key
  magnetar tokens create --secret-key file:///path/to/my-secret.key --subject test-user
  magnetar tokens create --secret-key file:///path/to/my-secret.key --subject app --expiry-time 1h
  magnetar tokens create-key-pair --output-private-key my-private.key --output-public-key my-public.key
  magnetar tokens create --private-key file:///path/to/my-private.key --subject test-user
  magnetar tokens validate --public-key file:///path/to/my-public.key --token "$TOKEN"
  magnetar tokens show --token "$TOKEN"

Broker settings for the tokens above (broker.conf):
  authenticationEnabled=true
  authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken
  tokenSecretKey=file:///path/to/my-secret.key      (or tokenPublicKey=file:///path/to/my-public.key)
"""

_HMAC = {"HS256": 32, "HS384": 48, "HS512": 64}


def create_secret_key(algorithm: str = "HS256") -> bytes:
    if algorithm not in _HMAC:
        raise ValueError(f"secret keys are for {', '.join(_HMAC)}, not {algorithm}")
    return secrets.token_bytes(_HMAC[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private key PKCS#8 DER, public key X.509 DER)."""
    key: Any
    if algorithm.startswith(("RS", "PS")):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in ("ES256", "ES384", "ES512"):
        curve = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
        key = ec.generate_private_key(curve[algorithm])
    else:
        raise ValueError(f"key pairs are for RS*, PS* and ES* algorithms, not {algorithm}")
    private = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def create_token(subject: str, secret_key: str | None = None, private_key: str | None = None,
                 expiry_seconds: int | None = None, algorithm: str | None = None,
                 claims: dict[str, Any] | None = None) -> str:
    """A signed JWT for ``subject``; keys are Pulsar-style values (file:, data:, base64)."""
    payload: dict[str, Any] = {"sub": subject, **(claims or {})}
    if expiry_seconds is not None:
        payload["exp"] = int(time.time()) + expiry_seconds
    key: Any
    if secret_key:
        key = read_key_value(secret_key, "--secret-key", allow_path=False)
        alg = algorithm or "HS256"
    elif private_key:
        key = load_private_key(read_key_value(private_key, "--private-key", allow_path=False),
                               "--private-key")
        alg = algorithm or algorithms_for_key(key)[0]
        if alg not in algorithms_for_key(key):
            raise ValueError(f"a {type(key).__name__} cannot sign {alg}")
    else:
        raise ValueError("one of --secret-key and --private-key is needed")
    return jwt.encode(payload, key, algorithm=alg)


def _token_arg(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token).strip()
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return sys.stdin.read().strip()


def _write(path: str | None, data: bytes) -> None:
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        Path(path).write_bytes(data)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    tokens = sub.add_parser(
        "tokens", parents=parents, help="create keys and tokens for token authentication",
        description="Create and check the JWTs of token authentication (as `pulsar tokens`).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = tokens.add_subparsers(dest="tokens_command", metavar="ACTION")
    cmds.required = True
    p = cmds.add_parser("create-secret-key", help="a random HMAC key", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-a", "--signature-algorithm", default="HS256", choices=sorted(_HMAC))
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("-b", "--base64", action="store_true", help="write base64 text, not raw bytes")
    p = cmds.add_parser("create-key-pair", help="an RSA or EC key pair (DER files)", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-a", "--signature-algorithm", default="RS256",
                   choices=["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"])
    p.add_argument("--output-private-key", required=True)
    p.add_argument("--output-public-key", required=True)
    p = cmds.add_parser("create", help="a signed token for a role", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    keys = p.add_mutually_exclusive_group(required=True)
    keys.add_argument("-sk", "--secret-key", help="file:///path, data:;base64,... or base64")
    keys.add_argument("-pk", "--private-key", help="file:///path, data:;base64,... or base64")
    p.add_argument("-s", "--subject", required=True, help="the role the token proves")
    p.add_argument("-e", "--expiry-time", help="lifetime: 30s, 10m, 1h, 7d, 1y (default: none)")
    p.add_argument("-a", "--signature-algorithm", help="default HS256 or the key pair's type")
    p.add_argument("--claim", action="append", default=[], metavar="NAME=VALUE",
                   help="an extra claim (e.g. aud=my-broker); repeatable")
    for name, helptext in (("show", "print a token's header and claims (no check)"),
                           ("validate", "check a token's signature and expiry")):
        p = cmds.add_parser(name, help=helptext, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("-i", "--token", help="the token (default: read standard input)")
        p.add_argument("-f", "--token-file", help="a file holding the token")
        if name == "validate":
            keys = p.add_mutually_exclusive_group(required=True)
            keys.add_argument("-sk", "--secret-key")
            keys.add_argument("-pk", "--public-key")


def run_tokens(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except jwt.InvalidTokenError as exc:
        print(f"magnetar tokens: not a valid token: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"magnetar tokens: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except (ValueError, KeyMaterialError) as exc:
        print(f"magnetar tokens: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    action = args.tokens_command
    if action == "create-secret-key":
        secret = create_secret_key(args.signature_algorithm)
        _write(args.output, base64.b64encode(secret) + (b"\n" if not args.output else b"")
               if args.base64 else secret)
        return 0
    if action == "create-key-pair":
        private, public = create_key_pair(args.signature_algorithm)
        Path(args.output_private_key).write_bytes(private)
        Path(args.output_public_key).write_bytes(public)
        return 0
    if action == "create":
        claims = {}
        for item in args.claim:
            name, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--claim expects NAME=VALUE, got {item!r}")
            claims[name] = value
        expiry = parse_duration(args.expiry_time) if args.expiry_time else None
        print(create_token(args.subject, args.secret_key, args.private_key, expiry,
                           args.signature_algorithm, claims))
        return 0
    token = _token_arg(args)
    if action == "show":
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
        print(json.dumps(header), json.dumps(claims), sep="\n")
        return 0
    # validate
    key: Any
    if args.secret_key:
        key, algorithms = read_key_value(args.secret_key, "--secret-key", False), list(_HMAC)
    else:
        key = load_public_key(read_key_value(args.public_key, "--public-key", False), "--public-key")
        algorithms = algorithms_for_key(key)
    claims = jwt.decode(token, key, algorithms=algorithms, options={"verify_aud": False})
    print(json.dumps(claims))
    return 0
