"""The blog application called directly, with no socket: for the tests of what the app
keeps between requests (readcache.py's past and present pages), which compare an app that
kept an answer with a fresh one over the same store."""

from __future__ import annotations

from dbsvc.app import Application
from dbsvc.http.message import split_target
from dbsvc.http.types import Request
from dbsvc.realtime.broker import Broker
from support.storage import BLOG


def answer(app: Application, target: str) -> tuple[int, bytes, list[tuple[str, str]]]:
    """(status, body, headers) of a GET of `target`."""
    path, pairs = split_target(target)
    response = app(Request("GET", target, path, pairs, []))
    return response.status, response.body, response.headers


def fresh(store) -> Application:
    """An application with nothing kept yet: what the answer must be."""
    return Application(BLOG, store, Broker(store, BLOG.BY_NAME, 64))
