from __future__ import annotations

import base64

import pytest

from common.crypto import (
    KeyConfigError,
    Keyring,
    encode_key,
    generate_key,
    keyring_for,
    seal,
    unseal,
)
from common.errors import DecryptionFailed

AAD = b"tenant-1\x1fthreads.ThreadEnv:42:API_TOKEN"
WRAP_AAD = b"tenant-data-key:tenant-1"


def _flip(blob: bytes, index: int) -> bytes:
    tampered = bytearray(blob)
    tampered[index] ^= 0x01
    return bytes(tampered)


def _ring(*keys: bytes) -> Keyring:
    return Keyring.from_strings([encode_key(key) for key in keys])


# Sealing values --------------------------------------------------------------


def test_sealed_value_unseals_to_the_plaintext() -> None:
    data_key = generate_key()

    blob = seal(data_key, b"hunter2", aad=AAD)

    assert unseal(data_key, blob, aad=AAD) == b"hunter2"
    assert blob.startswith(b"S1")
    assert b"hunter2" not in blob


def test_sealing_the_same_value_twice_gives_different_ciphertexts() -> None:
    data_key = generate_key()

    assert seal(data_key, b"same", aad=AAD) != seal(data_key, b"same", aad=AAD)


def test_empty_plaintext_round_trips() -> None:
    data_key = generate_key()

    assert unseal(data_key, seal(data_key, b"", aad=AAD), aad=AAD) == b""


@pytest.mark.parametrize("index", [2, 13, 14, -1], ids=["nonce", "nonce-end", "body", "tag"])
def test_tampered_ciphertext_is_refused(index: int) -> None:
    data_key = generate_key()
    blob = seal(data_key, b"hunter2", aad=AAD)

    with pytest.raises(DecryptionFailed, match="failed authentication"):
        unseal(data_key, _flip(blob, index), aad=AAD)


def test_ciphertext_bound_to_other_associated_data_is_refused() -> None:
    data_key = generate_key()
    blob = seal(data_key, b"hunter2", aad=AAD)

    with pytest.raises(DecryptionFailed, match="bound to another owner"):
        unseal(data_key, blob, aad=b"tenant-2\x1fthreads.ThreadEnv:42:API_TOKEN")


def test_ciphertext_under_another_data_key_is_refused() -> None:
    blob = seal(generate_key(), b"hunter2", aad=AAD)

    with pytest.raises(DecryptionFailed):
        unseal(generate_key(), blob, aad=AAD)


@pytest.mark.parametrize(
    "blob",
    [b"", b"S1", b"S1" + b"\x00" * 27, b"X1" + b"\x00" * 40],
    ids=["empty", "prefix-only", "one-byte-short", "wrong-prefix"],
)
def test_malformed_ciphertext_is_refused_as_unknown_format(blob: bytes) -> None:
    with pytest.raises(DecryptionFailed, match="unknown format"):
        unseal(generate_key(), blob, aad=AAD)


def test_decryption_failure_is_a_domain_error_with_its_code() -> None:
    with pytest.raises(DecryptionFailed) as caught:
        unseal(generate_key(), b"", aad=AAD)

    assert caught.value.code == "decryption_failed"
    assert caught.value.status == 500


# Parsing PLATFORM_ENCRYPTION_KEYS ------------------------------------------------


def test_keyring_parses_keys_in_order() -> None:
    first, second = generate_key(), generate_key()

    ring = Keyring.from_strings([encode_key(first), encode_key(second)])

    assert ring.keys == (first, second)


def test_keyring_accepts_keys_written_with_the_url_safe_alphabet() -> None:
    key = bytes([0xFB, 0xFF]) * 16  # encodes with "-" and "_"
    encoded = encode_key(key)
    assert "-" in encoded or "_" in encoded

    assert Keyring.from_strings([encoded]).keys == (key,)


def test_keyring_refuses_an_empty_list() -> None:
    with pytest.raises(KeyConfigError, match=r"^PLATFORM_ENCRYPTION_KEYS holds no key$"):
        Keyring.from_strings([])


def test_keyring_refuses_non_base64_naming_the_key_position() -> None:
    good = encode_key(generate_key())

    with pytest.raises(KeyConfigError) as caught:
        Keyring.from_strings([good, "not base64!"])

    assert str(caught.value) == "PLATFORM_ENCRYPTION_KEYS key #2 is not url-safe base64"


def test_keyring_refuses_a_key_of_the_wrong_length_naming_its_position() -> None:
    good = encode_key(generate_key())
    short = base64.urlsafe_b64encode(b"k" * 16).decode()

    with pytest.raises(KeyConfigError) as caught:
        Keyring.from_strings([good, good, short])

    assert str(caught.value) == (
        "PLATFORM_ENCRYPTION_KEYS key #3 is 16 bytes; each key must be 32 bytes"
    )


def test_keyring_refuses_a_key_that_is_too_long() -> None:
    long = base64.urlsafe_b64encode(b"k" * 33).decode()

    with pytest.raises(KeyConfigError, match="key #1 is 33 bytes"):
        Keyring.from_strings([long])


def test_key_config_error_is_a_value_error() -> None:
    assert issubclass(KeyConfigError, ValueError)


def test_keyring_for_parses_once_per_configuration() -> None:
    encoded = (encode_key(generate_key()),)

    assert keyring_for(encoded) is keyring_for(encoded)
    assert keyring_for(encoded).keys == Keyring.from_strings(encoded).keys


# Wrapping data keys ------------------------------------------------------------


def test_wrapped_data_key_unwraps_to_the_same_key() -> None:
    ring = _ring(generate_key())
    data_key = generate_key()

    wrapped = ring.wrap(data_key, aad=WRAP_AAD)

    assert ring.unwrap(wrapped, aad=WRAP_AAD) == data_key
    assert wrapped.startswith(b"K1")
    assert wrapped[2:10] == ring.primary_id
    assert data_key not in wrapped


def test_wrap_uses_the_newest_master_key() -> None:
    new, old = generate_key(), generate_key()
    data_key = generate_key()

    wrapped = _ring(new, old).wrap(data_key, aad=WRAP_AAD)

    assert _ring(new).unwrap(wrapped, aad=WRAP_AAD) == data_key
    with pytest.raises(DecryptionFailed):
        _ring(old).unwrap(wrapped, aad=WRAP_AAD)


def test_key_wrapped_under_an_old_master_key_unwraps_after_rotation() -> None:
    old, new = generate_key(), generate_key()
    data_key = generate_key()
    wrapped_by_old = _ring(old).wrap(data_key, aad=WRAP_AAD)
    rotated = _ring(new, old)

    assert rotated.unwrap(wrapped_by_old, aad=WRAP_AAD) == data_key
    assert rotated.needs_rewrap(wrapped_by_old) is True

    rewrapped = rotated.wrap(rotated.unwrap(wrapped_by_old, aad=WRAP_AAD), aad=WRAP_AAD)

    assert rotated.needs_rewrap(rewrapped) is False
    assert _ring(new).unwrap(rewrapped, aad=WRAP_AAD) == data_key


def test_key_wrapped_under_the_newest_master_key_needs_no_rewrap() -> None:
    ring = _ring(generate_key(), generate_key())

    assert ring.needs_rewrap(ring.wrap(generate_key(), aad=WRAP_AAD)) is False


def test_unwrap_without_the_wrapping_master_key_names_the_setting() -> None:
    wrapped = _ring(generate_key()).wrap(generate_key(), aad=WRAP_AAD)
    other = _ring(generate_key(), generate_key())

    with pytest.raises(DecryptionFailed) as caught:
        other.unwrap(wrapped, aad=WRAP_AAD)

    assert "PLATFORM_ENCRYPTION_KEYS" in str(caught.value)
    assert "not in PLATFORM_ENCRYPTION_KEYS" in caught.value.message


@pytest.mark.parametrize("index", [10, 21, 22, -1], ids=["nonce", "nonce-end", "body", "tag"])
def test_tampered_wrapped_key_is_refused(index: int) -> None:
    ring = _ring(generate_key())
    wrapped = ring.wrap(generate_key(), aad=WRAP_AAD)

    with pytest.raises(DecryptionFailed, match="failed authentication"):
        ring.unwrap(_flip(wrapped, index), aad=WRAP_AAD)


def test_wrapped_key_with_a_tampered_key_id_is_refused() -> None:
    ring = _ring(generate_key())
    wrapped = ring.wrap(generate_key(), aad=WRAP_AAD)

    with pytest.raises(DecryptionFailed, match="not in PLATFORM_ENCRYPTION_KEYS"):
        ring.unwrap(_flip(wrapped, 2), aad=WRAP_AAD)


def test_wrapped_key_bound_to_another_tenant_is_refused() -> None:
    ring = _ring(generate_key())
    wrapped = ring.wrap(generate_key(), aad=WRAP_AAD)

    with pytest.raises(DecryptionFailed, match="failed authentication"):
        ring.unwrap(wrapped, aad=b"tenant-data-key:tenant-2")


@pytest.mark.parametrize("length", [0, 2, 10, 15, 21, 22, 37])
def test_truncated_wrapped_key_is_refused_as_unknown_format(length: int) -> None:
    ring = _ring(generate_key())
    wrapped = ring.wrap(generate_key(), aad=WRAP_AAD)

    with pytest.raises(DecryptionFailed, match="unknown format"):
        ring.unwrap(wrapped[:length], aad=WRAP_AAD)


def test_sealed_value_is_not_accepted_as_a_wrapped_key() -> None:
    ring = _ring(generate_key())

    with pytest.raises(DecryptionFailed, match="unknown format"):
        ring.unwrap(seal(generate_key(), b"x" * 32, aad=WRAP_AAD), aad=WRAP_AAD)


def test_keyring_refuses_a_key_with_characters_outside_url_safe_base64() -> None:
    valid = encode_key(generate_key())
    stray = valid[:10] + "!" + valid[10:]

    with pytest.raises(KeyConfigError, match=r"key #1 is not url-safe base64"):
        Keyring.from_strings([stray])
