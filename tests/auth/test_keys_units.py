"""auth/keys.py's checks one by one: each algorithm's signature check against the right and
the wrong signature, hash, padding and length; each key refusal and JWK refusal word for
word. Fixture-free (the keys are made at import), so the in-process mutation runner can
call them (docs/mutation.md, session 15, wt-mpo5: the module had never been run)."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, x25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from dbsvc.auth.keys import UnusableKey, VerifyKey, check_public_key, key_from_jwk, load_pem_key
from support.authkit import (
    EC_OCTETS,
    KEY_FOR_ALG,
    ORDERS,
    all_private_keys,
    b64,
    certificate_pem,
    jwk_of,
    public_der,
    public_pem,
    raw_sign,
)

KEYS = all_private_keys()
DATA = b"header.payload"
ALGS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
OTHER_HASH = {"256": hashes.SHA384, "384": hashes.SHA512, "512": hashes.SHA256}


DROP = object()  # a JWK member left out


def _key(alg: str, name: str | None = None) -> VerifyKey:
    return key_from_jwk(jwk_of(KEYS[name or KEY_FOR_ALG[alg]]), alg)


def unusable(call, *args) -> str:
    with pytest.raises(UnusableKey) as caught:
        call(*args)
    return str(caught.value)


# --- VerifyKey: one algorithm per key, every signature check


@pytest.mark.parametrize("alg", ALGS)
def test_a_good_signature_verifies_and_the_same_over_other_data_does_not(alg):
    key = _key(alg)
    signature = raw_sign(KEYS[KEY_FOR_ALG[alg]], alg, DATA)
    assert key.verify(DATA, signature) is True
    assert key.verify(DATA + b".", signature) is False


@pytest.mark.parametrize("alg", ALGS)
def test_a_signature_one_octet_short_or_long_is_refused(alg):
    key = _key(alg)
    signature = raw_sign(KEYS[KEY_FOR_ALG[alg]], alg, DATA)
    assert key.verify(DATA, signature[:-1]) is False
    assert key.verify(DATA, signature + b"\0") is False
    assert key.verify(DATA, b"\0" + signature) is False


def test_ed448_signatures_are_114_octets_and_verify():
    key = _key("EdDSA", "ed448")
    signature = KEYS["ed448"].sign(DATA)
    assert len(signature) == 114 and key.verify(DATA, signature) is True
    assert key.verify(DATA, signature[:64]) is False
    ed25519 = _key("EdDSA", "ed25519")
    good = KEYS["ed25519"].sign(DATA)
    assert ed25519.verify(DATA, good[:63] + bytes([good[63] ^ 1])) is False  # not b"\0": 1 in 256 ends so


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"])
def test_an_rsa_signature_with_another_hash_is_refused(alg):
    other = OTHER_HASH[alg[2:]]
    if alg.startswith("RS"):
        signature = KEYS["rsa"].sign(DATA, padding.PKCS1v15(), other())
    else:
        signature = KEYS["rsa"].sign(
            DATA, padding.PSS(mgf=padding.MGF1(other()), salt_length=other.digest_size), other()
        )
    assert _key(alg).verify(DATA, signature) is False


@pytest.mark.parametrize("alg", ["PS256", "PS384", "PS512"])
def test_pss_needs_mgf1_of_the_same_hash_and_a_salt_the_hashs_length(alg):
    hash_cls = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}[alg[2:]]
    other = OTHER_HASH[alg[2:]]
    key = _key(alg)
    other_mgf = KEYS["rsa"].sign(
        DATA, padding.PSS(mgf=padding.MGF1(other()), salt_length=hash_cls.digest_size), hash_cls()
    )
    assert key.verify(DATA, other_mgf) is False
    for salt in (0, hash_cls.digest_size - 1, hash_cls.digest_size + 1):
        signature = KEYS["rsa"].sign(DATA, padding.PSS(mgf=padding.MGF1(hash_cls()), salt_length=salt), hash_cls())
        assert key.verify(DATA, signature) is False, salt
    assert key.verify(DATA, KEYS["rsa"].sign(DATA, padding.PKCS1v15(), hash_cls())) is False


def test_a_pkcs1_signature_is_refused_where_pss_is_configured_and_the_other_way():
    assert _key("PS256").verify(DATA, raw_sign(KEYS["rsa"], "RS256", DATA)) is False
    assert _key("RS256").verify(DATA, raw_sign(KEYS["rsa"], "PS256", DATA)) is False


@pytest.mark.parametrize("alg", ["ES256", "ES384", "ES512"])
def test_an_ecdsa_signature_with_another_hash_or_in_der_is_refused(alg):
    octets = EC_OCTETS[alg]
    private = KEYS[KEY_FOR_ALG[alg]]
    der = private.sign(DATA, ec.ECDSA(OTHER_HASH[alg[2:]]()))
    r, s = decode_dss_signature(der)
    assert _key(alg).verify(DATA, r.to_bytes(octets, "big") + s.to_bytes(octets, "big")) is False
    right = private.sign(
        DATA, ec.ECDSA({"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}[alg[2:]])
    )
    assert _key(alg).verify(DATA, right) is False  # DER, not R || S


@pytest.mark.parametrize("alg", ["ES256", "ES384", "ES512"])
def test_r_and_s_are_split_at_the_curves_octet_length(alg):
    octets = EC_OCTETS[alg]
    signature = raw_sign(KEYS[KEY_FOR_ALG[alg]], alg, DATA)
    swapped = signature[octets:] + signature[:octets]
    assert _key(alg).verify(DATA, swapped) is False


def test_a_key_is_bound_to_its_algorithm_kid_and_material():
    key = key_from_jwk(jwk_of(KEYS["p256"], kid="k1"), "ES256")
    assert (key.alg, key.kid) == ("ES256", "k1")
    assert key.fingerprint == ("k1", "ES256", public_der(KEYS["p256"]))
    pem = load_pem_key(public_pem(KEYS["rsa"]), "PS384")
    assert (pem.alg, pem.kid, pem.fingerprint) == ("PS384", None, (None, "PS384", public_der(KEYS["rsa"])))


# --- check_public_key, and how its refusals describe the key they got


def _public(name: str):
    return KEYS[name].public_key()


@pytest.mark.parametrize(
    ("alg", "name", "message"),
    [
        ("RS256", "p256", "RS256 needs an RSA key, got an EC key on secp256r1"),
        ("PS512", "ed25519", "PS512 needs an RSA key, got an Ed25519 key"),
        ("RS384", "rsa_small", "RSA key of 1024 bits is too small; at least 2048 bits required"),
        ("ES256", "rsa", "ES256 needs an EC key on P-256, got an RSA key of 2048 bits"),
        ("ES256", "p384", "ES256 needs an EC key on P-256, got an EC key on secp384r1"),
        ("ES384", "p521", "ES384 needs an EC key on P-384, got an EC key on secp521r1"),
        ("ES512", "p256", "ES512 needs an EC key on P-521, got an EC key on secp256r1"),
        ("EdDSA", "p256", "EdDSA needs an Ed25519 or Ed448 key, got an EC key on secp256r1"),
        ("EdDSA", "rsa", "EdDSA needs an Ed25519 or Ed448 key, got an RSA key of 2048 bits"),
        ("HS256", "rsa", "algorithm 'HS256' is not supported"),
        ("none", "ed448", "algorithm 'none' is not supported"),
    ],
)
def test_a_key_that_does_not_fit_its_algorithm_is_refused_saying_what_it_is(alg, name, message):
    assert unusable(check_public_key, _public(name), alg) == message


@pytest.mark.parametrize(
    ("alg", "name"),
    [
        ("RS256", "rsa"),
        ("PS256", "rsa"),
        ("ES256", "p256"),
        ("ES384", "p384"),
        ("ES512", "p521"),
        ("EdDSA", "ed25519"),
        ("EdDSA", "ed448"),
    ],
)
def test_a_key_that_fits_passes(alg, name):
    assert check_public_key(_public(name), alg) is None


class _Stranger:
    pass


def test_a_refused_key_is_described_by_its_kind_size_or_curve():
    assert unusable(check_public_key, _public("ed448"), "RS256") == "RS256 needs an RSA key, got an Ed448 key"
    assert (
        unusable(check_public_key, _public("ed25519"), "ES256") == "ES256 needs an EC key on P-256, got an Ed25519 key"
    )
    assert (
        unusable(check_public_key, _public("rsa"), "ES512")
        == "ES512 needs an EC key on P-521, got an RSA key of 2048 bits"
    )
    assert unusable(check_public_key, _public("p521"), "PS256") == "PS256 needs an RSA key, got an EC key on secp521r1"
    assert unusable(check_public_key, _Stranger(), "EdDSA") == "EdDSA needs an Ed25519 or Ed448 key, got a Stranger"


def test_a_pem_key_of_another_kind_is_named_by_its_class():
    other = x25519.X25519PrivateKey.generate().public_key()
    pem = other.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert unusable(load_pem_key, pem, "EdDSA") == "EdDSA needs an Ed25519 or Ed448 key, got a X25519PublicKey"


# --- load_pem_key


def test_a_certificate_gives_its_public_key():
    key = load_pem_key(certificate_pem(KEYS["p256"]), "ES256")
    assert key.fingerprint == (None, "ES256", public_der(KEYS["p256"]))
    assert key.verify(DATA, raw_sign(KEYS["p256"], "ES256", DATA)) is True


def test_a_pkcs1_rsa_public_key_is_read():
    pkcs1 = KEYS["rsa"].public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.PKCS1)
    assert load_pem_key(pkcs1, "RS256").verify(DATA, raw_sign(KEYS["rsa"], "RS256", DATA)) is True


def test_a_private_key_is_refused_before_it_is_parsed():
    pem = KEYS["p256"].private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    message = "a private key, which this service must never hold; give the public key"
    assert unusable(load_pem_key, pem, "ES256") == message
    assert unusable(load_pem_key, b"-----BEGIN EC PRIVATE KEY----- junk", "ES256") == message


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"junk",
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        b"-----BEGIN CERTIFICATE-----\nAA\n",
    ],
)
def test_what_is_not_a_pem_key_or_certificate_is_refused(data):
    assert unusable(load_pem_key, data, "RS256") == "not a valid PEM public key or certificate"


def test_a_pem_key_is_checked_against_its_algorithm():
    assert unusable(load_pem_key, public_pem(KEYS["p256"]), "ES384") == (
        "ES384 needs an EC key on P-384, got an EC key on secp256r1"
    )


# --- key_from_jwk (its members read as base64url strings)


@pytest.mark.parametrize(
    ("alg", "name", "extra", "message"),
    [
        ("ES256", "p256", {"kid": 7}, "jwk 'kid' is not a string"),
        ("ES256", "p256", {"use": "enc"}, "jwk 'use' is 'enc', not 'sig'"),
        ("ES256", "p256", {"key_ops": ["sign"]}, "jwk 'key_ops' does not allow 'verify'"),
        ("ES256", "p256", {"key_ops": "verify"}, "jwk 'key_ops' does not allow 'verify'"),
        ("ES256", "p256", {"alg": "ES384"}, "jwk 'alg' is 'ES384', not the configured ES256"),
        ("RS256", "rsa", {"kty": "EC"}, "jwk 'kty' is 'EC', RS256 needs 'RSA'"),
        ("PS256", "rsa", {"kty": DROP}, "jwk 'kty' is None, PS256 needs 'RSA'"),
        ("RS256", "rsa", {"n": DROP}, "jwk member 'n' is missing or not a string"),
        ("RS256", "rsa", {"e": "=="}, "jwk member 'e' is not base64url"),
        ("RS256", "rsa", {"e": "a+b/"}, "jwk member 'e' is not base64url"),
        ("RS256", "rsa", {"n": ""}, "jwk member 'n' is not base64url"),
        ("PS256", "rsa", {"n": 5}, "jwk member 'n' is missing or not a string"),
        ("RS256", "rsa", {"e": "AAAA"}, "jwk does not describe a valid public key"),
        ("RS256", "rsa_small", {}, "RSA key of 1024 bits is too small; at least 2048 bits required"),
        ("ES256", "p256", {"kty": "RSA"}, "jwk 'kty' is 'RSA', ES256 needs 'EC'"),
        ("ES256", "p256", {"crv": "P-384"}, "jwk 'crv' is 'P-384', ES256 needs 'P-256'"),
        ("ES512", "p521", {"crv": DROP}, "jwk 'crv' is None, ES512 needs 'P-521'"),
        ("ES256", "p256", {"x": b64(b"\1" * 31)}, "jwk coordinates are not 32 octets each"),
        ("ES384", "p384", {"y": b64(b"\1" * 49)}, "jwk coordinates are not 48 octets each"),
        ("ES256", "p256", {"y": b64(b"\1" * 32)}, "jwk does not describe a valid public key"),
        ("ES256", "p256", {"y": DROP}, "jwk member 'y' is missing or not a string"),
        ("EdDSA", "ed25519", {"kty": "EC"}, "jwk 'kty' is 'EC', EdDSA needs 'OKP'"),
        ("EdDSA", "ed25519", {"crv": "X25519"}, "jwk 'crv' is 'X25519', EdDSA needs 'Ed25519' or 'Ed448'"),
        ("EdDSA", "ed25519", {"x": b64(b"\1" * 57)}, "jwk 'x' is not 32 octets"),
        ("EdDSA", "ed448", {"x": b64(b"\1" * 32)}, "jwk 'x' is not 57 octets"),
        ("EdDSA", "ed448", {"x": 3}, "jwk member 'x' is missing or not a string"),
        ("HS256", "rsa", {}, "algorithm 'HS256' is not supported"),
    ],
)
def test_a_jwk_that_cannot_verify_is_refused_saying_why(alg, name, extra, message):
    jwk = {k: v for k, v in {**jwk_of(KEYS[name]), **extra}.items() if v is not DROP}
    assert unusable(key_from_jwk, jwk, alg) == message


@pytest.mark.parametrize("alg", ALGS)
def test_a_jwk_with_use_sig_key_ops_verify_and_its_alg_is_taken(alg):
    jwk = jwk_of(KEYS[KEY_FOR_ALG[alg]], alg=alg, kid="k", use="sig", key_ops=["sign", "verify"])
    key = key_from_jwk(jwk, alg)
    assert (key.alg, key.kid) == (alg, "k")
    assert key.verify(DATA, raw_sign(KEYS[KEY_FOR_ALG[alg]], alg, DATA)) is True


def test_an_ed448_jwk_is_an_ed448_key():
    key = key_from_jwk(jwk_of(KEYS["ed448"]), "EdDSA")
    assert key.fingerprint == (None, "EdDSA", public_der(KEYS["ed448"]))
    assert key.verify(DATA, KEYS["ed448"].sign(DATA)) is True


def test_an_rsa_jwk_reads_n_and_e_big_endian():
    key = key_from_jwk(jwk_of(KEYS["rsa"]), "RS512")
    assert key.fingerprint == (None, "RS512", public_der(KEYS["rsa"]))


def _r_s(alg: str) -> tuple[int, int, int, int]:
    octets = EC_OCTETS[alg]
    good = raw_sign(KEYS[KEY_FOR_ALG[alg]], alg, DATA)
    return octets, ORDERS[alg], int.from_bytes(good[:octets], "big"), int.from_bytes(good[octets:], "big")


@pytest.mark.parametrize("alg", ["ES256", "ES384", "ES512"])
def test_the_orders_are_the_curves(alg):
    """ECDSA's malleable twin (r, n - s) verifies only for the true group order n."""
    octets, order, r, s = _r_s(alg)
    assert order.bit_length() == {"ES256": 256, "ES384": 384, "ES512": 521}[alg]
    assert _key(alg).verify(DATA, r.to_bytes(octets, "big") + (order - s).to_bytes(octets, "big")) is True


class _Spy:
    """A public key that records each signature handed to it, and refuses them all. Its
    `public_bytes` is what `VerifyKey` reads for the fingerprint, and nothing more."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def public_bytes(self, encoding: object, format: object) -> bytes:
        return b"spy"

    def verify(self, signature: bytes, data: bytes, algorithm: object) -> None:
        self.seen.append(signature)
        raise InvalidSignature


@pytest.mark.parametrize("alg", ["ES256", "ES384", "ES512"])
def test_an_r_or_s_of_zero_or_of_the_group_order_or_past_it_never_reaches_the_signature_check(alg):
    """FIPS 186-5 section 6.4.2 step 1 (0 < r, s < n) is checked before OpenSSL is asked,
    which would refuse them too: refused by the range, its own answer either way."""
    octets, order, r, s = _r_s(alg)
    spy = _Spy()
    check = VerifyKey(alg, None, spy).verify
    past = (1 << (8 * octets)) - 1  # the largest value of the JOSE form
    for bad_r, bad_s in ((0, 0), (0, s), (r, 0), (order, s), (r, order), (past, s), (r, past)):
        assert check(DATA, bad_r.to_bytes(octets, "big") + bad_s.to_bytes(octets, "big")) is False
        assert _key(alg).verify(DATA, bad_r.to_bytes(octets, "big") + bad_s.to_bytes(octets, "big")) is False
    assert spy.seen == []
    for near_r, near_s in ((1, s), (r, 1), (order - 1, s), (r, order - 1)):
        assert check(DATA, near_r.to_bytes(octets, "big") + near_s.to_bytes(octets, "big")) is False
    assert len(spy.seen) == 4
