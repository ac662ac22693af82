"""Bearer tokens for the Copilot API: the kernel's JWT (kernel.tokens: HS256 with ``sub``, ``role`` and ``exp``)
with the Copilot's roles, its refusals as the Copilot's Unauthenticated, its caller as a Principal."""

from __future__ import annotations

from datetime import datetime

from kernel import tokens
from kernel.tokens import ALGORITHM, LEEWAY_S, MAX_LIFETIME_S, MAX_USER_ID, TokenRefused
from reference.copilot.api import Principal
from reference.copilot.errors import Unauthenticated

ROLES = frozenset({"operator", "approver", "supervisor"})  # supervisor: resolves MANUAL_REVIEW


def issue_token(
    secret: str,
    user_id: str,
    role: str = "operator",
    ttl_s: float = 3600,
    now: float | datetime | None = None,
) -> str:
    """A signed token for ``user_id``; ``now`` (epoch seconds or an aware datetime) defaults to wall time."""
    return tokens.issue_token(secret, user_id, role, ROLES, ttl_s, now)


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; UNAUTHENTICATED when there is none."""
    try:
        return tokens.bearer_token(header)
    except TokenRefused as err:
        raise Unauthenticated(err.code, err.message) from None


def verify_token(secret: str, token: str) -> Principal:
    """The caller a token names; INVALID_TOKEN for a bad signature, an expired or a malformed token."""
    return verify_token_expiry(secret, token)[0]


def verify_token_expiry(secret: str, token: str) -> tuple[Principal, float]:
    """verify_token's caller and the token's ``exp`` (epoch seconds: a stream ends there)."""
    try:
        caller, exp = tokens.verified(secret, token, ROLES)
    except TokenRefused as err:
        raise Unauthenticated(err.code, err.message) from None
    return Principal(caller.user_id, caller.role), exp


class TokenVerifier:
    """kernel.tokens.TokenVerifier (the accepted tokens remembered until they expire) answering Principals."""

    def __init__(self, secret: str, max_tokens: int = 4096) -> None:
        self._verify = tokens.TokenVerifier(secret, ROLES, max_tokens)

    def __call__(self, token: str) -> Principal:
        return self.with_expiry(token)[0]

    def with_expiry(self, token: str) -> tuple[Principal, float]:
        """The caller and the token's ``exp``."""
        try:
            caller, exp = self._verify.with_expiry(token)
        except TokenRefused as err:
            raise Unauthenticated(err.code, err.message) from None
        return Principal(caller.user_id, caller.role), exp


__all__ = ["ALGORITHM", "LEEWAY_S", "MAX_LIFETIME_S", "MAX_USER_ID", "ROLES", "Principal", "TokenVerifier",
           "bearer_token", "issue_token", "verify_token", "verify_token_expiry"]
