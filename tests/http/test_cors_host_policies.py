"""dbsvc/http/cors.py's CorsPolicy and hosts.py's HostPolicy and host_name, rule by rule of
their module docstrings, headers compared as literals. Fixture-free, so
`bench/mutation_inprocess.py` runs it; tests/http/test_http_cors.py and
tests/app/test_host_check.py hold the same rules through a real server (session 16, wt-mpo6)."""

from __future__ import annotations

import pytest

from dbsvc.http.cors import CorsPolicy
from dbsvc.http.hosts import HostPolicy, host_name

EXPOSED = b"Location, X-Request-Id, Dbsvc-Watermark, Dbsvc-Offset, Link, ETag"
METHODS = b"GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"


def test_no_origins_is_off_and_permits_every_origin():
    for origins in ((), ("", "  ")):
        policy = CorsPolicy(origins)
        assert policy.enabled is False
        assert policy.permits("https://anything.example")
        assert policy.actual_headers("https://anything.example") == [(b"vary", b"Origin")]


def test_a_listed_origin_is_echoed_and_others_get_only_vary():
    policy = CorsPolicy((" https://app.example/ ", "https://b.example"))
    assert policy.enabled is True
    assert policy.permits("https://app.example") and policy.permits("https://app.example/")
    assert not policy.permits("https://evil.example")
    assert policy.actual_headers("https://app.example") == [
        (b"access-control-allow-origin", b"https://app.example"),
        (b"access-control-expose-headers", EXPOSED),
        (b"vary", b"Origin"),
    ]
    assert policy.actual_headers("https://evil.example") == [(b"vary", b"Origin")]
    assert policy.actual_headers(None) == [(b"vary", b"Origin")]


def test_the_wildcard_answers_star_to_any_origin():
    policy = CorsPolicy(("*",))
    assert policy.enabled and policy.permits("https://x.example")
    assert policy.actual_headers("https://x.example")[0] == (b"access-control-allow-origin", b"*")
    assert policy.actual_headers(None) == [(b"vary", b"Origin")]
    listed = CorsPolicy(("https://a.example",))
    assert not listed.permits("https://x.example")


def test_an_origin_outside_latin_1_is_refused_by_the_listed_origins():
    policy = CorsPolicy(("https://café.example",))
    assert policy.actual_headers("https://café.example")[0] == (
        b"access-control-allow-origin",
        "https://café.example".encode("latin-1"),
    )


def test_a_preflight_gets_methods_max_age_and_the_allowed_requested_headers():
    policy = CorsPolicy(("https://app.example",))
    assert policy.preflight_headers("https://app.example", " Authorization , X-Custom,if-match") == [
        (b"access-control-allow-origin", b"https://app.example"),
        (b"access-control-allow-methods", METHODS),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
        (b"access-control-allow-headers", b"authorization, if-match"),
    ]
    base = policy.preflight_headers("https://app.example", None)
    assert len(base) == 4
    assert policy.preflight_headers("https://app.example", "") == base
    assert policy.preflight_headers("https://app.example", "X-Custom") == base


def test_a_preflight_from_another_origin_gets_only_vary():
    policy = CorsPolicy(("https://app.example",))
    assert policy.preflight_headers("https://evil.example", "authorization") == [(b"vary", b"Origin")]
    assert policy.preflight_headers(None, "authorization") == [(b"vary", b"Origin")]


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("LocalHost:3000", "localhost"),
        (" localhost. ", "localhost"),
        ("[::1]:3000", "[::1]"),
        ("[::1]", "[::1]"),
        ("[::1", "[::1"),
        ("[::1]:80]", "[::1]"),
        ("example.com", "example.com"),
    ],
)
def test_host_name_drops_the_port_and_the_root_dot(host, name):
    assert host_name(host) == name


def test_a_domain_matches_itself_and_every_name_under_it():
    policy = HostPolicy((".Example.com", "api.local"))
    assert policy.enabled
    assert policy.permits("example.com:3000")
    assert policy.permits("a.b.example.com")
    assert policy.permits("API.local")
    assert not policy.permits("badexample.com")
    assert not policy.permits("example.com.evil")
    assert not policy.permits(".example.com.evil")
    assert not policy.permits("local")


def test_a_listed_name_is_not_a_domain():
    policy = HostPolicy(("example.com",))
    assert policy.permits("example.com")
    assert not policy.permits("a.example.com")
    assert policy.remembered == frozenset({"example.com"})
