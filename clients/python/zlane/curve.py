"""CURVE keys from the czmq certificate files `zlane-ctl keygen` writes.

A certificate is ZPL text (czmq's zconfig format): a `metadata` section (name,
role, tenants, lanes) and a `curve` section with `public-key` and, in the
`NAME_secret` file, `secret-key`, each a 40-character Z85 string. A client
needs the broker's public certificate and its own secret certificate, as
`zl_curve_load` in common/curve.c takes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import zmq
from zmq.utils import z85

from .errors import CurveError

_ZERO_KEY = "0" * 40  # czmq's text of an all-zero key: a public-only certificate


def read_certificate(path: str | os.PathLike) -> dict[str, dict[str, str]]:
    """Parse a czmq certificate file into {section: {key: value}} (top-level sections
    "metadata" and "curve"). Raises CurveError if it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise CurveError(f"cannot read the certificate {os.fspath(path)}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CurveError(f"{os.fspath(path)} is not a czmq certificate (not text)") from exc
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip()
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        depth = (len(line) - len(stripped)) // 4
        name, sep, value = stripped.partition("=")
        name = name.strip()
        if depth == 0:
            current = sections.setdefault(name, {})
            continue
        if current is None or not sep:
            continue  # deeper structure we do not need
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:  # an unquoted value ends at a comment
            value = value.split("#", 1)[0].strip()
        current[name] = value
    if "curve" not in sections or "public-key" not in sections["curve"]:
        raise CurveError(f"{os.fspath(path)} is not a czmq certificate (no curve public-key)")
    return sections


def _key(path, sections, name) -> str:
    key = sections["curve"].get(name, "")
    if len(key) != 40:
        raise CurveError(f"{os.fspath(path)}: {name} is not a 40-character Z85 key")
    try:
        z85.decode(key.encode("ascii"))
    except Exception as exc:
        raise CurveError(f"{os.fspath(path)}: {name} is not valid Z85") from exc
    return key


@dataclass(frozen=True)
class Curve:
    """The broker's public key and this client's key pair (Z85 text). One server key
    serves every broker of a list: the brokers of one deployment share it."""

    server_public: str
    public_key: str
    secret_key: str = field(repr=False)

    @classmethod
    def load(cls, server_cert: str | os.PathLike, client_cert: str | os.PathLike) -> "Curve":
        """Load the broker's public certificate and this client's *secret* certificate
        (`NAME_secret`). Raises CurveError with the reason."""
        server = read_certificate(server_cert)
        me = read_certificate(client_cert)
        secret = me["curve"].get("secret-key", "")
        if not secret or secret == _ZERO_KEY:
            raise CurveError(f"{os.fspath(client_cert)} holds no secret key: give the _secret file")
        return cls(_key(server_cert, server, "public-key"), _key(client_cert, me, "public-key"),
                   _key(client_cert, me, "secret-key"))

    def apply(self, sock: zmq.Socket) -> None:
        """Set the CURVE client options on `sock` before it connects."""
        sock.curve_serverkey = self.server_public.encode("ascii")
        sock.curve_publickey = self.public_key.encode("ascii")
        sock.curve_secretkey = self.secret_key.encode("ascii")


def as_curve(curve) -> Curve | None:
    """Accept None, a Curve, a (server_cert, client_cert) pair of paths, or a dict with
    keys server_cert and cert (or client_cert)."""
    if curve is None or isinstance(curve, Curve):
        return curve
    if isinstance(curve, dict):
        return Curve.load(curve["server_cert"], curve.get("cert") or curve["client_cert"])
    if isinstance(curve, (tuple, list)) and len(curve) == 2:
        return Curve.load(curve[0], curve[1])
    raise TypeError("curve must be a zlane.Curve, (server_cert, client_secret_cert) or None")
