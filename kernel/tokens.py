"""Bearer tokens every system's HTTP API shares: JWT HS256 with ``sub`` (the caller's id), ``role`` (one of the
system's roles) and ``exp``. A refusal is ``TokenRefused`` with a stable code (UNAUTHENTICATED: no bearer token;
INVALID_TOKEN: a bad signature, an expired, malformed or too long-lived token, a role the system does not have); each
API answers it as its 401."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Collection
from datetime import datetime
from typing import NamedTuple

import jwt

from kernel.jsonbody import DuplicateKey, clean_text, unique_keys

ALGORITHM = "HS256"
MAX_USER_ID = 128  # user id columns are String(128)
LEEWAY_S = 5  # clock skew tolerated on exp
MAX_LIFETIME_S = 7 * 86400  # a token expiring later than this from now is refused (a forever token is a leak)


class TokenRefused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


class Caller(NamedTuple):
    """Who a verified token names."""

    user_id: str
    role: str


def issue_token(secret: str, user_id: str, role: str, roles: Collection[str], ttl_s: float = 3600,
                now: float | datetime | None = None) -> str:
    """A signed token for ``user_id`` in ``role`` (one of ``roles``); ``now`` (epoch seconds or an aware datetime)
    defaults to wall time."""
    if role not in roles:
        raise ValueError(f"role must be one of {sorted(roles)}, got {role!r}")
    t = time.time() if now is None else now.timestamp() if isinstance(now, datetime) else float(now)
    claims = {"sub": user_id, "role": role, "iat": int(t), "exp": int(t + ttl_s)}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; UNAUTHENTICATED when there is none."""
    if not header:
        raise TokenRefused("UNAUTHENTICATED", "an Authorization: Bearer token is required")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise TokenRefused("UNAUTHENTICATED", "an Authorization: Bearer token is required")
    token = token.strip()
    if not token:
        raise TokenRefused("INVALID_TOKEN", "the bearer token is empty")
    return token


def _names_a_key_twice(token: str) -> bool:
    """Whether the token's header or payload names a key twice. PyJWT's JSON parse keeps the last, other parsers the
    first: a token whose ``role`` (or ``alg``) reads differently to two parsers is refused, not interpreted."""
    for segment in token.split(".")[:2]:
        try:
            json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)), object_pairs_hook=unique_keys)
        except DuplicateKey:
            return True
        except (binascii.Error, ValueError):  # not a token: PyJWT refuses it
            return False
    return False


def verified(secret: str, token: str, roles: Collection[str]) -> tuple[Caller, float]:
    """The caller a token names and its ``exp``; TokenRefused(INVALID_TOKEN) for any token not good now."""
    if _names_a_key_twice(token):
        raise TokenRefused("INVALID_TOKEN", "the token names a claim or a header field twice")
    try:
        claims = jwt.decode(token, secret, algorithms=[ALGORITHM], leeway=LEEWAY_S,
                            options={"require": ["exp", "sub", "role"]})
    except jwt.ExpiredSignatureError:
        raise TokenRefused("INVALID_TOKEN", "the token has expired") from None
    except jwt.PyJWTError:
        raise TokenRefused("INVALID_TOKEN", "the token is invalid") from None
    sub, role, exp = claims.get("sub"), claims.get("role"), claims.get("exp")
    if not isinstance(sub, str) or not sub or len(sub) > MAX_USER_ID or not clean_text(sub):
        raise TokenRefused("INVALID_TOKEN", "the token's subject is invalid")
    if not isinstance(role, str) or role not in roles:  # a list or an object is malformed, not a crash
        raise TokenRefused("INVALID_TOKEN", "the token's role is invalid")
    if not isinstance(exp, int | float) or isinstance(exp, bool) or exp > time.time() + MAX_LIFETIME_S + LEEWAY_S:
        raise TokenRefused("INVALID_TOKEN", f"the token lives longer than {MAX_LIFETIME_S} s")
    return Caller(sub, role), float(exp)


class TokenVerifier:
    """``verified`` for one secret and set of roles, remembering the tokens it accepted until they expire: a client
    sends the same token with every request, and decoding and checking its signature again cost more than the rest of
    the request's authentication. Only acceptances are remembered, and a remembered token is answered only while PyJWT
    would still accept its ``exp`` (exp > now - leeway); the other checks cannot turn a token bad later (a too-long
    lifetime only shortens, ``iat``/``nbf`` only pass). Bounded: the memory is emptied when it holds ``max_tokens``."""

    def __init__(self, secret: str, roles: Collection[str], max_tokens: int = 4096) -> None:
        self.secret, self.roles, self.max_tokens = secret, frozenset(roles), max_tokens
        self._accepted: dict[str, tuple[Caller, float]] = {}

    def __call__(self, token: str) -> Caller:
        return self.with_expiry(token)[0]

    def with_expiry(self, token: str) -> tuple[Caller, float]:
        """The caller and the token's ``exp`` (a stream ends there)."""
        hit = self._accepted.get(token)
        if hit is not None and hit[1] > time.time() - LEEWAY_S:
            return hit
        caller, exp = verified(self.secret, token, self.roles)  # raises for a bad or an expired token
        if len(self._accepted) >= self.max_tokens:
            self._accepted.clear()
        self._accepted[token] = (caller, exp)
        return caller, exp
