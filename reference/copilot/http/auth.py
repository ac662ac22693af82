"""Bearer tokens for the Copilot API: JWT HS256 with ``sub`` (user id), ``role`` and ``exp``."""

from __future__ import annotations

import time
from datetime import datetime

import jwt

from reference.copilot.api import Principal
from reference.copilot.errors import Unauthenticated

ALGORITHM = "HS256"
ROLES = frozenset({"operator", "approver", "supervisor"})  # supervisor: resolves MANUAL_REVIEW
MAX_USER_ID = 128  # user_id columns are String(128)
LEEWAY_S = 5  # clock skew tolerated on exp
MAX_LIFETIME_S = 7 * 86400  # a token expiring later than this from now is refused (a forever token is a leak)


def issue_token(
    secret: str,
    user_id: str,
    role: str = "operator",
    ttl_s: float = 3600,
    now: float | datetime | None = None,
) -> str:
    """A signed token for ``user_id``; ``now`` (epoch seconds or an aware datetime) defaults to wall time."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    t = time.time() if now is None else now.timestamp() if isinstance(now, datetime) else float(now)
    claims = {"sub": user_id, "role": role, "iat": int(t), "exp": int(t + ttl_s)}
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; UNAUTHENTICATED when there is none."""
    if not header:
        raise Unauthenticated("UNAUTHENTICATED", "an Authorization: Bearer token is required")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthenticated("UNAUTHENTICATED", "an Authorization: Bearer token is required")
    token = token.strip()
    if not token:
        raise Unauthenticated("INVALID_TOKEN", "the bearer token is empty")
    return token


def verify_token(secret: str, token: str) -> Principal:
    """The caller a token names; INVALID_TOKEN for a bad signature, an expired or a malformed token."""
    return _verified(secret, token)[0]


def _verified(secret: str, token: str) -> tuple[Principal, float]:
    """verify_token's checks; the principal and the token's ``exp``."""
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            leeway=LEEWAY_S,
            options={"require": ["exp", "sub", "role"]},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("INVALID_TOKEN", "the token has expired") from None
    except jwt.PyJWTError:
        raise Unauthenticated("INVALID_TOKEN", "the token is invalid") from None
    sub, role, exp = claims.get("sub"), claims.get("role"), claims.get("exp")
    if not isinstance(sub, str) or not sub or len(sub) > MAX_USER_ID or not _clean(sub):
        raise Unauthenticated("INVALID_TOKEN", "the token's subject is invalid")
    if not isinstance(role, str) or role not in ROLES:  # a list or an object is malformed, not a crash
        raise Unauthenticated("INVALID_TOKEN", "the token's role is invalid")
    if not isinstance(exp, int | float) or isinstance(exp, bool) or exp > time.time() + MAX_LIFETIME_S + LEEWAY_S:
        raise Unauthenticated("INVALID_TOKEN", f"the token lives longer than {MAX_LIFETIME_S} s")
    return Principal(sub, role), float(exp)


class TokenVerifier:
    """verify_token for one secret, remembering the tokens it accepted until they expire: a client sends the same
    token with every request, and decoding and checking its signature again cost more than the rest of the request's
    authentication. Only acceptances are remembered, and a remembered token is answered only while PyJWT would still
    accept its ``exp`` (exp > now - leeway); the other checks cannot turn a token bad later (a too-long lifetime only
    shortens, ``iat``/``nbf`` only pass). Bounded: the memory is emptied when it holds ``max_tokens``."""

    def __init__(self, secret: str, max_tokens: int = 4096) -> None:
        self.secret = secret
        self.max_tokens = max_tokens
        self._accepted: dict[str, tuple[Principal, float]] = {}

    def __call__(self, token: str) -> Principal:
        hit = self._accepted.get(token)
        if hit is not None and hit[1] > time.time() - LEEWAY_S:
            return hit[0]
        principal, exp = _verified(self.secret, token)  # raises for a bad or an expired token
        if len(self._accepted) >= self.max_tokens:
            self._accepted.clear()
        self._accepted[token] = (principal, exp)
        return principal


def _clean(text: str) -> bool:
    """Encodable as UTF-8 (no lone surrogates) and free of NUL: storable in any database."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text
