"""The explorer in a real browser (headless Chromium through Selenium): what a person sees.

Each test that writes, restarts or guards starts its own server (`python dbsvc.py serve
schemas/blog.dbs` on port 0); the tests that only read share one seeded server (`seeded`).
Records are written through the HTTP API with `http.client`, and the page is checked against
what `GET /api/...` answers. The guide's screenshots (docs/img/explorer-*.png) are taken here, so they show the
page as it is.
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlencode

import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from support.explorer_kit import cell, open_explorer, row_ids, screenshot, wait_for, wait_for_page
from support.idp import TestIdp
from support.server import server_pool

PEOPLE = [
    ("ann@example.com", "Ann", 31, "admin"),
    ("bo@example.com", "Bo", 27, "editor"),
    ("cy@example.com", "Cy", 45, "editor"),
    ("di@example.com", "Di", 27, "reader"),
    ("ed@example.com", "Ed", None, "editor"),
    ("flo@example.com", "Flo", 38, "reader"),
]


def seed(server, headers: dict | None = None) -> list[int]:
    ids = []
    for email, name, age, role in PEOPLE:
        reply = server.post("/api/user", {"email": email, "name": name, "age": age, "role": role}, headers=headers)
        assert reply.status == 201, reply
        ids.append(reply.json["id"])
    posts = [("Hello, world", 4.5), ("Notes on logs", 3.0), ("Watermarks", 5.0)]
    for n, (title, score) in enumerate(posts):
        reply = server.post(
            "/api/blog-post",
            {"author_id": ids[n % 2], "title": title, "body": "...", "score": score, "published": n != 1},
            headers=headers,
        )
        assert reply.status == 201, reply
    return ids


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """One server holding `seed`'s records for the module's tests that only read: none of them
    writes (the table, filters, sorts, the search box, a refused filter, a model's filter
    boxes), so each sees exactly the seeded records, whatever ran before it. No token is set
    on its origin, so the tab's session storage carries nothing from one test to the next."""
    with server_pool(tmp_path_factory.mktemp("seeded") / "data") as pool:
        server = pool()
        seed(server)
        yield server


def api_ids(server, query: dict, headers: dict | None = None) -> list[str]:
    reply = server.get("/api/user?" + urlencode(query), headers=headers)
    assert reply.status == 200, reply
    return [str(record["id"]) for record in reply.json["data"]]


def header(driver, field: str):
    return driver.find_element(By.CSS_SELECTOR, f'#records thead th[data-field="{field}"]')


def shift_click(driver, element) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).key_down(Keys.SHIFT).click(element).key_up(Keys.SHIFT).perform()


def test_table_lists_the_seeded_records(seeded, page):
    server = seeded
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20")
    listed = server.get("/api/user?limit=20").json["data"]
    assert row_ids(page) == [str(r["id"]) for r in listed]
    for record in listed:
        for field in ("email", "name", "role", "joined"):
            assert cell(page, record["id"], field) == str(record[field])
        assert cell(page, record["id"], "age") == ("null" if record["age"] is None else str(record["age"]))
    assert page.find_element(By.ID, "page-state").text == f"1–{len(listed)} of {len(listed)}"
    models = [a.text.split("\n")[0] for a in page.find_elements(By.CSS_SELECTOR, "#model-list a")]
    assert models == ["User", "BlogPost", "Comment"]
    assert "writes through the public API" in page.find_element(By.CSS_SELECTOR, ".bar .note").text
    wait_for(page, lambda: page.find_elements(By.CSS_SELECTOR, "#ops table.models tbody tr"), "the Service pane")
    metrics, snapshot = server.get("/metrics").json, server.get("/snapshot").json
    shown = [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in page.find_elements(By.CSS_SELECTOR, "#ops table.models tbody tr")
    ]
    assert shown == [
        [name, str(metrics["rows_per_model"][name]), str(watermark)]
        for name, watermark in snapshot["watermarks"].items()
    ]
    assert page.find_element(By.CSS_SELECTOR, "#ops .epoch").text == f"epoch {snapshot['epoch']}"
    assert f"head offset\n{snapshot['offset']}" in page.find_element(By.ID, "ops").text
    screenshot(page, "explorer-list")


def test_filter_and_multi_key_sort_show_exactly_what_the_api_returns(seeded, page):
    server = seeded
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20")

    Select(page.find_element(By.CSS_SELECTOR, '#filters select[name="role"]')).select_by_value("editor")
    wait_for_page(page, "/api/user?role=editor&limit=20")
    assert row_ids(page) == api_ids(server, {"role": "editor", "limit": 20})

    header(page, "age").click()  # sort=age
    wait_for_page(page, "/api/user?role=editor&sort=age&limit=20")
    assert row_ids(page) == api_ids(server, {"role": "editor", "sort": "age", "limit": 20})

    header(page, "age").click()  # the same key again: descending
    wait_for_page(page, "/api/user?role=editor&sort=-age&limit=20")
    assert row_ids(page) == api_ids(server, {"role": "editor", "sort": "-age", "limit": 20})

    Select(page.find_element(By.CSS_SELECTOR, '#filters select[name="role"]')).select_by_value("")
    wait_for_page(page, "/api/user?sort=-age&limit=20")
    shift_click(page, header(page, "name"))  # a second key
    expected = {"sort": "-age,name", "limit": 20}
    wait_for_page(page, "/api/user?" + urlencode(expected))
    assert row_ids(page) == api_ids(server, expected)
    assert header(page, "age").find_element(By.CLASS_NAME, "key").text == "▼1"
    assert header(page, "name").find_element(By.CLASS_NAME, "key").text == "▲2"

    name_filter = page.find_element(By.CSS_SELECTOR, '#filters input[name="name"]')
    name_filter.send_keys("Di", Keys.ENTER)
    expected = {"name": "Di", "sort": "-age,name", "limit": 20}
    wait_for_page(page, "/api/user?" + urlencode(expected))
    assert row_ids(page) == api_ids(server, expected)
    assert len(row_ids(page)) == 1

    Select(page.find_element(By.ID, "projection")).select_by_value("card")
    expected = {"name": "Di", "projection": "card", "sort": "-age,name", "limit": 20}
    wait_for_page(page, "/api/user?" + urlencode(expected))
    headings = [th.get_attribute("data-field") for th in page.find_elements(By.CSS_SELECTOR, "#records thead th")]
    assert headings == ["id", "name"]


def test_a_model_with_search_fields_has_a_search_box_whose_words_filter_the_table(seeded, page):
    server = seeded
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")
    assert not page.find_elements(By.CSS_SELECTOR, '#filters input[name="search"]')  # User has no @search field
    open_explorer(page, server.port, "#/blog-post")
    wait_for_page(page, "/api/blog-post?limit=20")
    box = page.find_element(By.CSS_SELECTOR, '#filters input[name="search"]')
    assert box.get_attribute("placeholder") == "words (each a prefix)"
    box.send_keys("NOTE lo", Keys.ENTER)
    wait_for_page(page, "/api/blog-post?" + urlencode({"search": "NOTE lo", "limit": 20}))
    reply = server.get("/api/blog-post?" + urlencode({"search": "NOTE lo", "limit": 20}))
    assert row_ids(page) == [str(r["id"]) for r in reply.json["data"]] == ["2"]


def test_a_bad_filter_value_shows_the_services_problem_and_the_data_stays(seeded, page):
    server = seeded
    open_explorer(page, server.port, "#/blog-post?score=abc")
    wait_for_page(page, "/api/blog-post?score=abc&limit=20", state="error")
    status = page.find_element(By.ID, "status")
    assert "bad_query" in status.text and "score" in status.text
    assert row_ids(page) == []
    assert server.get("/api/blog-post").json["total"] == 3


def test_as_of_slider_shows_an_older_version_of_an_updated_record(serve, page):
    server = serve()
    created = server.post("/api/user", {"email": "tt@example.com", "name": "Before", "age": 20})
    key = created.json["id"]
    assert server.request("PATCH", f"/api/user/{key}", body={"name": "After", "age": 21}).status == 200
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20")
    assert cell(page, key, "name") == "After"

    slider = page.find_element(By.ID, "as-of")
    wait_for(page, lambda: slider.get_attribute("max") == "2", "the slider reaching watermark 2")
    slider.send_keys(Keys.ARROW_LEFT)  # one row back: watermark 1
    wait_for_page(page, "/api/user?limit=20&as_of=1")
    assert cell(page, key, "name") == "Before"
    assert cell(page, key, "age") == "20"
    assert server.get(f"/api/user/{key}?as_of=1").json["name"] == "Before"

    page.find_element(By.CSS_SELECTOR, f'#records tbody tr[data-id="{key}"]').click()
    record = page.find_element(By.ID, "record")
    wait_for(page, lambda: record.get_attribute("data-state") == "shown", "the record view")
    assert page.find_element(By.ID, "record-title").text == f"User {key} as of watermark 1"
    assert page.find_element(By.CSS_SELECTOR, '#record-fields dd[data-field="name"]').text == "Before"
    # the version shown is the one read (as of watermark 1: the create's, offset 1), issue 35
    assert page.find_element(By.ID, "record-etag").text == 'ETag "1"'
    screenshot(page, "explorer-record")

    page.find_element(By.ID, "as-of-now").click()
    wait_for_page(page, "/api/user?limit=20")
    assert cell(page, key, "name") == "After"


def test_live_mode_shows_creates_changes_and_deletes_as_they_happen(serve, page):
    server = serve()
    seed(server)
    open_explorer(page, server.port, "#/user?role=editor")
    wait_for_page(page, "/api/user?role=editor&limit=20")
    page.find_element(By.ID, "live").click()
    wait_for_page(page, None, state="live")
    assert sorted(row_ids(page), key=int) == sorted(api_ids(server, {"role": "editor"}), key=int)
    seen = {}

    start = time.monotonic()
    key = server.post("/api/user", {"email": "new@example.com", "name": "Newcomer", "role": "editor"}).json["id"]
    wait_for(page, lambda: str(key) in row_ids(page), "the created record's row")
    seen["create"] = time.monotonic() - start

    start = time.monotonic()
    server.request("PATCH", f"/api/user/{key}", body={"name": "Renamed", "age": 50})
    wait_for(page, lambda: cell(page, key, "name") == "Renamed", "the patched value")
    seen["update"] = time.monotonic() - start
    assert cell(page, key, "age") == "50"

    moved = server.get("/api/user?role=editor&sort=name&limit=1").json["data"][0]["id"]
    start = time.monotonic()
    server.request("PATCH", f"/api/user/{moved}", body={"role": "reader"})  # leaves the filter
    wait_for(page, lambda: str(moved) not in row_ids(page), "the row leaving the filter")
    seen["leave"] = time.monotonic() - start

    feed = page.find_element(By.ID, "feed-list")
    wait_for(page, lambda: len(feed.find_elements(By.TAG_NAME, "li")) >= 3, "the feed pane's events")
    kinds = [li.get_attribute("data-kind") for li in feed.find_elements(By.TAG_NAME, "li")]
    assert kinds[:3] == ["update", "update", "insert"]  # newest first
    screenshot(page, "explorer-live")

    start = time.monotonic()
    assert server.request("DELETE", f"/api/user/{key}").status == 204
    wait_for(page, lambda: str(key) not in row_ids(page), "the deleted record's row leaving")
    seen["delete"] = time.monotonic() - start
    assert sorted(row_ids(page), key=int) == sorted(api_ids(server, {"role": "editor"}), key=int)
    print("explorer live latency (s):", json.dumps({k: round(v, 3) for k, v in seen.items()}))


def test_live_mode_resumes_after_the_server_restarts(serve, page, tmp_path):
    with socket.socket() as probe:  # a fixed port, so the page's origin survives
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = tmp_path / "restart"
    server = serve(env={"SERVICE_PORT": str(port)}, data_dir=data)
    first = server.post("/api/user", {"email": "a@example.com", "name": "Before"}).json["id"]
    open_explorer(page, port, "#/user?live=1")
    wait_for_page(page, None, state="live")
    assert row_ids(page) == [str(first)]

    server.proc.kill()  # kill -9: the sockets just drop
    server.proc.wait(timeout=30)
    wait_for(page, lambda: "reconnecting" in page.find_element(By.ID, "live-state").text, "the page noticing")
    server = serve(env={"SERVICE_PORT": str(port)}, data_dir=data)
    second = server.post("/api/user", {"email": "b@example.com", "name": "After"}).json["id"]
    wait_for(page, lambda: str(second) in row_ids(page), "a row written after the restart")
    assert row_ids(page) == [str(first), str(second)]
    assert page.find_element(By.ID, "live").is_selected()


def test_markup_in_a_record_renders_as_text_and_runs_nothing(serve, page):
    server = serve()
    hostile = "<img src=x onerror=alert(1)>"
    script = "<script>window.__pwned = 1</script>"
    key = server.post(
        "/api/user",
        {
            "email": "x@example.com",
            "name": hostile,
            "profile": {"bio": script, "html": "<b onmouseover=alert(2)>hi</b>"},
        },
    ).json["id"]
    open_explorer(page, server.port, "#/user?live=1")
    wait_for_page(page, None, state="live")
    assert cell(page, key, "name") == hostile
    server.request("PATCH", f"/api/user/{key}", body={"email": "y@example.com"})  # the feed pane too
    wait_for(page, lambda: page.find_elements(By.CSS_SELECTOR, "#feed-list li"), "the feed event")
    page.find_element(By.CSS_SELECTOR, f'#records tbody tr[data-id="{key}"]').click()
    wait_for(page, lambda: page.find_element(By.ID, "record").get_attribute("data-state") == "shown", "the record view")
    assert page.find_element(By.CSS_SELECTOR, '#record-fields dd[data-field="name"]').text == hostile
    assert script in page.find_element(By.CSS_SELECTOR, '#record-fields dd[data-field="profile"]').text
    assert hostile in page.find_element(By.ID, "feed-list").text
    assert page.find_elements(By.CSS_SELECTOR, "main img, main script, main b") == []
    assert page.execute_script("return window.__pwned === undefined")
    with pytest.raises(NoAlertPresentException):
        _ = page.switch_to.alert.text  # reading an alert that is not there raises


def test_a_guarded_service_shows_nothing_without_a_token_and_the_data_with_one(serve, page, tmp_path):
    idp = TestIdp(tmp_path / "idp")
    server = serve(env=idp.server_env(SERVICE_EXPLORER="on"), data_dir=idp.data_dir())
    auth = {"Authorization": f"Bearer {idp.token()}"}
    seed(server, auth)
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20", state="error")
    assert row_ids(page) == []
    assert "needs a token" in page.find_element(By.ID, "status").text

    token = idp.token()
    page.find_element(By.ID, "token").send_keys(token, Keys.ENTER)
    wait_for_page(page, "/api/user?limit=20")
    assert row_ids(page) == api_ids(server, {"limit": 20}, auth)
    assert page.execute_script("return sessionStorage.getItem('dbsvc.explorer.token')") == token
    assert page.find_element(By.ID, "token").get_attribute("value") == ""
    assert page.find_element(By.ID, "token-state").text.startswith("token set, expires")

    page.find_element(By.ID, "live").click()  # the WebSocket carries the token too
    wait_for_page(page, None, state="live")
    key = server.post("/api/user", {"email": "tok@example.com", "name": "Token"}, headers=auth).json["id"]
    wait_for(page, lambda: str(key) in row_ids(page), "a live row on the guarded service")

    page.find_element(By.ID, "token-forget").click()
    wait_for(page, lambda: "needs a token" in page.find_element(By.ID, "status").text, "the 401 again")
    assert row_ids(page) == []


def test_a_token_for_another_tenant_is_refused_and_shows_nothing(serve, page, tmp_path):
    idp = TestIdp(tmp_path / "idp")
    server = serve(env=idp.server_env(SERVICE_EXPLORER="on"), data_dir=idp.data_dir())
    seed(server, {"Authorization": f"Bearer {idp.token()}"})
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20", state="error")
    page.find_element(By.ID, "token").send_keys(idp.token(tenant="other"), Keys.ENTER)
    wait_for(page, lambda: "refused for this tenant" in page.find_element(By.ID, "status").text, "the 403")
    assert row_ids(page) == []


def test_a_model_with_refs_gets_its_filters_and_no_expand_box(seeded, page):
    """`expand` is a comma list (an array parameter, form style, not exploded), not a filter."""
    server = seeded
    open_explorer(page, server.port, "#/blog-post")
    wait_for_page(page, "/api/blog-post?limit=20")
    boxes = [e.get_attribute("name") for e in page.find_elements(By.CSS_SELECTOR, "#filters select, #filters input")]
    assert {"author_id", "published", "score"} <= set(boxes)
    assert "expand" not in boxes
