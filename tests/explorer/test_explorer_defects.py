"""Explorer defects found trying it as a new user would (issue 37 item 3), each reproduced in a
real browser against a real server: the record pane under the `as_of` slider, the pane opening
off-screen, live mode's order of nulls, several quick writes each marked, an unknown model in
the link, and the favicon."""

from __future__ import annotations

from urllib.parse import urlencode

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from support.explorer_kit import open_explorer, row_ids, wait_for, wait_for_page


def pane_state(page) -> str:
    return page.find_element(By.ID, "record").get_attribute("data-state") or ""


def pane_field(page, field: str) -> str:
    return page.find_element(By.CSS_SELECTOR, f'#record-fields dd[data-field="{field}"]').text


def test_moving_the_slider_reads_the_open_record_as_of_the_new_watermark(serve, page):
    server = serve()
    server.post("/api/user", {"email": "a@example.com", "name": "Early"})  # watermark 1
    key = server.post("/api/user", {"email": "b@example.com", "name": "Before"}).json["id"]  # 2
    server.request("PATCH", f"/api/user/{key}", body={"name": "After"})  # 3
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")
    page.find_element(By.CSS_SELECTOR, f'#records tbody tr[data-id="{key}"]').click()
    wait_for(page, lambda: pane_state(page) == "shown" and pane_field(page, "name") == "After", "the present record")

    slider = page.find_element(By.ID, "as-of")
    wait_for(page, lambda: slider.get_attribute("max") == "3", "the slider reaching watermark 3")
    slider.send_keys(Keys.ARROW_LEFT)  # watermark 2: the record as created
    wait_for_page(page, "/api/user?limit=20&as_of=2")
    wait_for(page, lambda: pane_state(page) == "shown" and pane_field(page, "name") == "Before", "the past version")
    assert page.find_element(By.ID, "record-title").text == f"User {key} as of watermark 2"
    assert page.find_element(By.ID, "record-etag").text == 'ETag "2"'

    slider.send_keys(Keys.ARROW_LEFT)  # watermark 1: it did not exist yet
    wait_for_page(page, "/api/user?limit=20&as_of=1")
    wait_for(page, lambda: pane_state(page) == "absent", "the pane saying the record was not there")
    assert page.find_element(By.ID, "record-title").text == f"User {key} as of watermark 1"
    assert page.find_element(By.ID, "record-fields").text == f"absent\nUser {key} did not exist at watermark 1."
    assert page.find_element(By.ID, "record-etag").text == ""
    assert server.get(f"/api/user/{key}?as_of=1").status == 404

    page.find_element(By.ID, "as-of-now").click()
    wait_for(page, lambda: pane_state(page) == "shown" and pane_field(page, "name") == "After", "the present again")
    assert page.find_element(By.ID, "record-title").text == f"User {key}"


def test_a_clicked_row_opens_the_record_pane_where_it_can_be_seen(serve, page):
    server = serve()
    keys = [server.post("/api/user", {"email": f"u{n}@example.com", "name": f"U{n}"}).json["id"] for n in range(60)]
    open_explorer(page, server.port, "#/user?limit=50")
    wait_for_page(page, "/api/user?limit=50")
    row = page.find_element(By.CSS_SELECTOR, f'#records tbody tr[data-id="{keys[0]}"]')
    page.execute_script("arguments[0].scrollIntoView({block: 'start'})", row)
    row.click()
    wait_for(page, lambda: pane_state(page) == "shown", "the record pane")

    def title_in_view() -> bool:
        return page.execute_script(
            "const r = document.getElementById('record-title').getBoundingClientRect();"
            "return r.top >= 0 && r.bottom <= window.innerHeight;"
        )

    wait_for(page, title_in_view, "the pane's title inside the window")


def test_live_mode_orders_nulls_as_the_api_does(serve, page):
    """`null` sorts after every value going up and before every value going down
    (docs/guide/queries.md): toggling Live must not reorder the table."""
    server = serve()
    for n, age in enumerate([30, None, 20, None, 40]):
        server.post("/api/user", {"email": f"n{n}@example.com", "name": f"N{n}", "age": age})
    for sort in ("age", "-age"):
        query = {"sort": sort, "limit": 20}
        api = [str(r["id"]) for r in server.get("/api/user?" + urlencode(query)).json["data"]]
        open_explorer(page, server.port, f"#/user?sort={sort}")
        wait_for_page(page, "/api/user?" + urlencode(query))
        assert row_ids(page) == api
        page.find_element(By.ID, "live").click()
        wait_for_page(page, None, state="live")
        assert row_ids(page) == api, sort
        page.get("about:blank")


def test_every_row_of_several_quick_writes_is_marked(serve, page):
    server = serve()
    open_explorer(page, server.port, "#/user?live=1")
    wait_for_page(page, None, state="live")
    ops = [
        {"op": "create", "model": "user", "record": {"email": f"q{n}@example.com", "name": f"Q{n}"}} for n in range(3)
    ]
    reply = server.post("/batch", {"ops": ops})
    assert reply.status == 200, reply
    ids = [str(r["id"]) for r in reply.json["results"]]
    wait_for(page, lambda: sorted(row_ids(page)) == sorted(ids), "the three rows")
    marks = page.execute_script(
        "return [...document.querySelectorAll('#records tbody tr')].map((tr) => [tr.dataset.id, tr.className]);"
    )
    assert sorted(marks) == sorted([i, "added"] for i in ids)


def test_a_link_to_a_model_the_schema_lacks_says_so(serve, page):
    server = serve()
    open_explorer(page, server.port, "#/nosuch")
    status = page.find_element(By.ID, "status")
    wait_for(page, lambda: "nosuch" in status.text, "the status naming the link")
    assert status.text == (
        "No model is at #/nosuch: this service has User (#/user), BlogPost (#/blog-post), Comment (#/comment)."
    )
    assert status.get_attribute("class") == "problem"
    assert page.find_element(By.ID, "model-pane").get_attribute("hidden") is not None
    assert page.find_element(By.ID, "records").get_attribute("data-url") is None  # nothing was read
    page.find_element(By.CSS_SELECTOR, '#model-list a[data-model="comment"]').click()
    wait_for_page(page, "/api/comment?limit=20")
    assert status.text == ""


def test_the_page_asks_for_nothing_that_is_not_there(serve, page):
    """No 404 in the browser's log: the page names its own icon, so no /favicon.ico is asked for."""
    server = serve()
    page.get_log("browser")  # what earlier tests of this browser left (reading the log empties it)
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20")
    wait_for(page, lambda: page.find_elements(By.CSS_SELECTOR, "#ops table.models"), "the Service pane")
    icon = page.execute_script("return document.querySelector('link[rel=icon]').href")
    assert icon == f"http://127.0.0.1:{server.port}/_/favicon.svg"
    reply = server.get("/_/favicon.svg")
    assert (reply.status, reply.headers["content-type"]) == (200, "image/svg+xml")
    problems = [e["message"] for e in page.get_log("browser") if "404" in e["message"] or e["level"] == "SEVERE"]
    assert problems == []
