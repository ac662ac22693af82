"""The idempotency key's rule (services.confirm.check_idempotency_key), for every string: 1..160 characters and
no C0 or C1 control character (NUL included: PostgreSQL text cannot store it), no comma (a repeated header arrives
joined by commas, "k1,k2": refused, not stored as one key). The API and the confirm service
both apply it; this pins the one implementation against the rule written out character by character."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.copilot.errors import ValidationFailed
from reference.copilot.services.confirm import MAX_KEY_LENGTH, ConfirmDraft, check_idempotency_key, validate_command


def _acceptable(key: str) -> bool:
    return (1 <= len(key) <= MAX_KEY_LENGTH and "," not in key  # a comma: a repeated header, joined by the server
            and not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in key))


# Mostly printable text with control characters mixed in, so that both answers are common.
_KEYS = st.text(alphabet=st.one_of(st.characters(min_codepoint=0, max_codepoint=0xA0), st.characters()),
                max_size=MAX_KEY_LENGTH + 5)


@given(_KEYS)
def test_a_key_is_accepted_exactly_when_it_is_short_enough_and_has_no_control_character_or_comma(key: str) -> None:
    if _acceptable(key):
        check_idempotency_key(key)
    else:
        with pytest.raises(ValidationFailed) as refused:
            check_idempotency_key(key)
        assert refused.value.code == "INVALID_IDEMPOTENCY_KEY"
        assert refused.value.status == 400


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f", "\x85", "\x9f", ","])
def test_each_control_range_is_refused_at_its_edges(char: str) -> None:
    with pytest.raises(ValidationFailed):
        check_idempotency_key(f"key{char}")
    check_idempotency_key("key\xa0é")  # just past C1, and beyond: text


@pytest.mark.parametrize("version", [0, -1, True, "1", 1.0])
def test_the_confirm_use_case_itself_refuses_a_draft_version_that_is_not_a_positive_integer(version: object) -> None:
    """The confirm's other field (validate_command, beside the key): a draft version is a positive integer. The API's
    schema refuses the same before the use case runs; the simulation's users call the use case without the API."""
    with pytest.raises(ValidationFailed) as refused:
        validate_command(ConfirmDraft("operator-001", "d-1", version, "k"))  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.detail.get("field")) == ("INVALID_PARAMETERS", "draft_version")
    validate_command(ConfirmDraft("operator-001", "d-1", 1, "k"))  # the first version is one
