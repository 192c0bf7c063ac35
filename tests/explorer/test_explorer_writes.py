"""The explorer writes (issue 37 item 2): create, edit (PATCH with If-Match) and delete from the
record pane of a real browser against a real server, with the service's 422 messages beside
each field, 409s and 412s explained, and the data checked through the API after every step."""

from __future__ import annotations

import json

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from support.explorer_kit import cell, open_explorer, row_ids, screenshot, wait_for, wait_for_page


def pane_state(page) -> str:
    return page.find_element(By.ID, "record").get_attribute("data-state") or ""


def fill(page, field: str, value: str) -> None:
    box = page.find_element(By.CSS_SELECTOR, f'#record-form [name="{field}"]')
    if box.tag_name == "select":
        Select(box).select_by_value(value)
    else:
        box.clear()
        box.send_keys(value)


def field_error(page, field: str) -> str:
    return page.find_element(By.CSS_SELECTOR, f'#record-form .field-error[data-field="{field}"]').text


def form_problem(page) -> str:
    return page.find_element(By.CSS_SELECTOR, "#record-form .form-problem").text


def all_users(server) -> list[dict]:
    return server.get("/api/user?limit=100").json["data"]


def open_row(page, key) -> None:
    page.find_element(By.CSS_SELECTOR, f'#records tbody tr[data-id="{key}"]').click()
    wait_for(page, lambda: pane_state(page) == "shown", f"the record pane showing {key}")


def test_create_edit_and_delete_from_the_record_pane(serve, page):
    server = serve()
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")

    page.find_element(By.ID, "new-record").click()
    wait_for(page, lambda: pane_state(page) == "create", "the create form")
    assert page.find_element(By.ID, "record-title").text == "New User"
    fill(page, "email", "ann@example.com")
    fill(page, "name", "Ann")
    fill(page, "age", "31")
    fill(page, "role", "editor")
    fill(page, "profile", '{"bio": "hi"}')
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: "Created User" in page.find_element(By.ID, "write-note").text, "the create's answer")
    [stored] = all_users(server)
    assert {k: stored[k] for k in ("email", "name", "age", "role", "profile")} == {
        "email": "ann@example.com",
        "name": "Ann",
        "age": 31,
        "role": "editor",
        "profile": {"bio": "hi"},
    }
    key = stored["id"]
    wait_for(page, lambda: pane_state(page) == "shown", "the created record in the pane")
    assert page.find_element(By.ID, "record-title").text == f"User {key}"
    etag = server.get(f"/api/user/{key}").headers["etag"]
    assert page.find_element(By.ID, "record-etag").text == f"ETag {etag}"
    wait_for(page, lambda: row_ids(page) == [str(key)], "the table showing the new row")

    page.find_element(By.ID, "record-edit").click()
    wait_for(page, lambda: pane_state(page) == "edit", "the edit form")
    assert page.find_element(By.CSS_SELECTOR, '#record-form [name="name"]').get_attribute("value") == "Ann"
    assert not page.find_elements(By.CSS_SELECTOR, '#record-form [name="id"]')  # the key is not edited
    fill(page, "name", "Ann Lee")
    page.find_element(By.CSS_SELECTOR, '#record-form [name="age.null"]').click()  # age -> null
    screenshot(page, "explorer-edit")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: "Saved User" in page.find_element(By.ID, "write-note").text, "the edit's answer")
    after = server.get(f"/api/user/{key}")
    assert (after.json["name"], after.json["age"], after.json["email"]) == ("Ann Lee", None, "ann@example.com")
    new_etag = after.headers["etag"]
    assert new_etag != etag
    wait_for(page, lambda: page.find_element(By.ID, "record-etag").text == f"ETag {new_etag}", "the new ETag")
    wait_for(page, lambda: cell(page, key, "name") == "Ann Lee", "the table showing the edit")

    delete = page.find_element(By.ID, "record-delete")
    delete.click()
    assert delete.text == "Really delete?"  # a second click confirms; no dialog box
    assert server.get(f"/api/user/{key}").status == 200
    delete.click()
    wait_for(page, lambda: "Deleted User" in page.find_element(By.ID, "write-note").text, "the delete's answer")
    assert server.get(f"/api/user/{key}").status == 404
    wait_for(page, lambda: row_ids(page) == [], "the row leaving the table")
    assert page.find_element(By.ID, "record").get_attribute("hidden") is not None


def test_the_services_422_messages_are_shown_beside_each_field_and_nothing_is_written(serve, page):
    server = serve()
    server.post("/api/user", {"email": "keep@example.com", "name": "Keep"})
    before = all_users(server)
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")
    page.find_element(By.ID, "new-record").click()
    wait_for(page, lambda: pane_state(page) == "create", "the create form")
    fill(page, "email", "new@example.com")
    fill(page, "name", "")
    fill(page, "age", "old")
    fill(page, "joined", "yesterday")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: pane_state(page) == "refused", "the refusal")
    # The same body through the API: the page shows the service's own words, field by field.
    sent = {"email": "new@example.com", "name": "", "age": "old", "joined": "yesterday"}
    refusal = server.post("/api/user", sent)
    assert refusal.status == 422
    expected = {e["field"]: e["message"] for e in refusal.json["errors"]}
    assert set(expected) == {"name", "age", "joined"}
    for field, message in expected.items():
        assert field_error(page, field) == message
    assert field_error(page, "email") == ""
    assert "refused some values" in form_problem(page)
    assert all_users(server) == before

    fill(page, "profile", "{not json")  # caught before sending: no request at all
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: field_error(page, "profile").startswith("is not JSON"), "the JSON check")
    assert all_users(server) == before


def test_a_409_is_explained_and_changes_nothing(serve, page):
    server = serve()
    ann = server.post("/api/user", {"email": "ann@example.com", "name": "Ann"}).json["id"]
    server.post("/api/blog-post", {"author_id": ann, "title": "Hi", "body": "...", "score": 1.0, "published": True})
    before = all_users(server)
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")

    page.find_element(By.ID, "new-record").click()
    wait_for(page, lambda: pane_state(page) == "create", "the create form")
    fill(page, "email", "ann@example.com")
    fill(page, "name", "Twin")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: pane_state(page) == "refused", "the unique refusal")
    assert form_problem(page).startswith("Another record already holds this value, and the field is unique.")
    assert "unique_violation" in form_problem(page) and "email" in form_problem(page)

    open_row(page, ann)
    page.find_element(By.ID, "record-delete").click()
    page.find_element(By.ID, "record-delete").click()
    wait_for(page, lambda: "Other records still reference this one" in page.find_element(By.ID, "record").text, "409")
    assert "referenced" in page.find_element(By.ID, "record-fields").text
    assert all_users(server) == before


def test_an_edit_of_a_record_changed_since_it_was_read_is_412_and_overwrites_nothing(serve, page):
    """Optimistic concurrency (issue 35): the page's PATCH carries the ETag it read."""
    server = serve()
    key = server.post("/api/user", {"email": "e@example.com", "name": "First"}).json["id"]
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")
    open_row(page, key)
    page.find_element(By.ID, "record-edit").click()
    wait_for(page, lambda: pane_state(page) == "edit", "the edit form")
    assert server.request("PATCH", f"/api/user/{key}", body={"name": "Someone else"}).status == 200
    fill(page, "name", "Mine")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: "changed since this pane read it" in form_problem(page), "the 412, explained")
    assert server.get(f"/api/user/{key}").json["name"] == "Someone else"
    # the form holds the current version now: saving again is a deliberate second write
    assert page.find_element(By.CSS_SELECTOR, '#record-form [name="name"]').get_attribute("value") == "Someone else"
    etag = server.get(f"/api/user/{key}").headers["etag"]
    assert page.find_element(By.ID, "record-etag").text == f"ETag {etag}"


def test_the_past_is_read_only(serve, page):
    server = serve()
    key = server.post("/api/user", {"email": "p@example.com", "name": "Past"}).json["id"]
    server.request("PATCH", f"/api/user/{key}", body={"name": "Present"})
    open_explorer(page, server.port, "#/user?as_of=1")
    wait_for_page(page, "/api/user?limit=20&as_of=1")
    assert page.find_element(By.ID, "new-record").get_attribute("disabled") is not None
    open_row(page, key)
    assert page.find_element(By.ID, "record-edit").get_attribute("hidden") is not None
    assert page.find_element(By.ID, "record-delete").get_attribute("hidden") is not None
    assert json.loads(json.dumps(server.get(f"/api/user/{key}").json))["name"] == "Present"


def test_on_a_guarded_service_writes_carry_the_token_and_a_missing_one_is_explained(serve, page, tmp_path):
    from selenium.webdriver.common.keys import Keys

    from support.idp import TestIdp

    idp = TestIdp(tmp_path / "idp")
    server = serve(env=idp.server_env(SERVICE_EXPLORER="on"), data_dir=idp.data_dir())
    auth = {"Authorization": f"Bearer {idp.token()}"}
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20", state="error")
    page.find_element(By.ID, "new-record").click()
    wait_for(page, lambda: pane_state(page) == "create", "the create form")
    fill(page, "email", "t@example.com")
    fill(page, "name", "Tok")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: pane_state(page) == "refused", "the 401")
    assert form_problem(page).startswith("This service needs a token for writes: paste one in the token box.")
    assert server.get("/api/user", headers=auth).json["total"] == 0

    page.find_element(By.ID, "token").send_keys(idp.token(), Keys.ENTER)
    wait_for_page(page, "/api/user?limit=20")
    page.find_element(By.ID, "new-record").click()
    wait_for(page, lambda: pane_state(page) == "create", "the create form again")
    fill(page, "email", "t@example.com")
    fill(page, "name", "Tok")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: "Created User" in page.find_element(By.ID, "write-note").text, "the create with the token")
    [stored] = server.get("/api/user", headers=auth).json["data"]
    assert (stored["email"], stored["name"]) == ("t@example.com", "Tok")


def test_saving_an_edit_that_changes_nothing_writes_nothing(serve, page):
    """An edit sends only the fields that changed: with none, no PATCH (a PATCH of the same
    values would still be a write, a new version and ETag)."""
    server = serve()
    key = server.post("/api/user", {"email": "same@example.com", "name": "Same", "profile": {"a": [1, 2]}}).json["id"]
    etag = server.get(f"/api/user/{key}").headers["etag"]
    open_explorer(page, server.port, "#/user")
    wait_for_page(page, "/api/user?limit=20")
    open_row(page, key)
    page.find_element(By.ID, "record-edit").click()
    wait_for(page, lambda: pane_state(page) == "edit", "the edit form")
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: form_problem(page) == "Nothing changed.", "the form saying nothing changed")
    assert server.get(f"/api/user/{key}").headers["etag"] == etag
    fill(page, "name", "Changed")  # one field changed: only it is sent, the rest stay as stored
    page.find_element(By.ID, "record-save").click()
    wait_for(page, lambda: "Saved User" in page.find_element(By.ID, "write-note").text, "the edit's answer")
    after = server.get(f"/api/user/{key}")
    assert after.headers["etag"] != etag
    assert (after.json["name"], after.json["profile"], after.json["email"]) == (
        "Changed",
        {"a": [1, 2]},
        "same@example.com",
    )
