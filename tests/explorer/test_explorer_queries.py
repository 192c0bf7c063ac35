"""The explorer's query form in a real browser (issue 34 item 5): ranges, prefixes, null
tests and cursor pages, each checked against what `GET /api/...` answers.

- A sortable column has "from" and "to" inputs (`field__gte`, `field__lte`), a sortable
  string column a "starts with" input (`field__prefix`), a nullable filter or sort column a
  null test (`field__null`); exact filters say they match exact values. Live mode follows
  the same conditions through `/live-query`.
- Next follows the `Link: rel="next"` header's cursor; Previous goes back through the
  cursors already followed.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlparse

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from support.explorer_kit import cell, open_explorer, row_ids, wait_for, wait_for_page

AGES = [(f"p{n}@example.com", f"P{n:02d}", age) for n, age in enumerate([31, 27, 45, 27, None, 38, 52, 33, 19])]


def seed(server) -> list[int]:
    ids = []
    for email, name, age in AGES:
        reply = server.post("/api/user", {"email": email, "name": name, "age": age})
        assert reply.status == 201, reply
        ids.append(reply.json["id"])
    return ids


def api(server, query: list[tuple[str, str]]):
    reply = server.get("/api/user?" + urlencode(query))
    assert reply.status == 200, reply
    return reply


def ids_of(reply) -> list[str]:
    return [str(r["id"]) for r in reply.json["data"]]


def control(page, name: str):
    return page.find_element(By.CSS_SELECTOR, f'#filters [name="{name}"]')


def test_range_prefix_and_null_inputs_query_what_the_api_answers_and_live_follows_the_range(serve, page):
    server = serve()
    ids = seed(server)
    open_explorer(page, server.port)
    wait_for_page(page, "/api/user?limit=20")
    assert control(page, "email").get_attribute("placeholder") == "exact value"
    assert control(page, "name__prefix").get_attribute("placeholder") == "starts with"
    assert not page.find_elements(By.CSS_SELECTOR, '#filters [name="email__gte"]')  # email is not @sort

    control(page, "age__gte").send_keys("27")
    control(page, "age__lte").send_keys("38", Keys.ENTER)
    query = [("age__gte", "27"), ("age__lte", "38"), ("limit", "20")]
    wait_for_page(page, "/api/user?" + urlencode(query))
    assert row_ids(page) == ids_of(api(server, query)) and len(row_ids(page)) == 5

    control(page, "name__prefix").send_keys("P0", Keys.ENTER)
    query = [("name__prefix", "P0"), ("age__gte", "27"), ("age__lte", "38"), ("limit", "20")]
    wait_for_page(page, "/api/user?" + urlencode(query))
    assert row_ids(page) == ids_of(api(server, query))

    page.find_element(By.CSS_SELECTOR, '#filters button[type="reset"]').click()
    wait_for_page(page, "/api/user?limit=20")
    Select(control(page, "age__null")).select_by_value("true")
    wait_for_page(page, "/api/user?age__null=true&limit=20")
    assert row_ids(page) == [str(ids[4])]

    Select(control(page, "age__null")).select_by_value("")
    control(page, "age__gte").send_keys("30")
    control(page, "age__lte").send_keys("40", Keys.ENTER)
    wait_for_page(page, "/api/user?age__gte=30&age__lte=40&limit=20")
    page.find_element(By.ID, "live").click()
    wait_for_page(page, None, state="live")
    inside = api(server, [("age__gte", "30"), ("age__lte", "40")])
    assert sorted(row_ids(page), key=int) == ids_of(inside)
    young = ids[1]  # 27: outside
    server.request("PATCH", f"/api/user/{young}", body={"age": 35})  # into the range
    wait_for(page, lambda: str(young) in row_ids(page), "the record entering the range")
    assert cell(page, young, "age") == "35"
    server.request("PATCH", f"/api/user/{young}", body={"age": 41})  # out of it
    wait_for(page, lambda: str(young) not in row_ids(page), "the record leaving the range")
    assert sorted(row_ids(page), key=int) == ids_of(inside)


def test_next_follows_the_link_cursor_and_previous_goes_back(serve, page):
    server = serve()
    seed(server)
    open_explorer(page, server.port, "#/user?sort=-age&limit=2")
    first = [("sort", "-age"), ("limit", "2")]
    wait_for_page(page, "/api/user?" + urlencode(first))
    assert page.find_element(By.ID, "prev").get_attribute("disabled") == "true"
    pages = [ids_of(api(server, first))]
    path = "/api/user?" + urlencode(first)
    for n in range(1, 5):  # 9 records, 2 a page: pages 2 to 5 by cursor
        link = server.get(path).headers["link"]
        path = link[1 : link.index(">")]
        cursor = parse_qs(urlparse(path).query)["cursor"][0]
        page.find_element(By.ID, "next").click()
        wait_for_page(page, "/api/user?" + urlencode([*first, ("cursor", cursor)]))
        pages.append(ids_of(server.get(path)))
        assert row_ids(page) == pages[n]
        assert page.find_element(By.ID, "page-state").text == f"{2 * n + 1}–{2 * n + len(pages[n])} of 9"
    assert page.find_element(By.ID, "next").get_attribute("disabled") == "true"  # no Link on the last page
    assert [i for p in pages for i in p] == ids_of(api(server, [("sort", "-age"), ("limit", "20")]))
    for n in (3, 2, 1, 0):
        page.find_element(By.ID, "prev").click()
        wait_for(page, lambda n=n: row_ids(page) == pages[n], f"page {n + 1} again")
        assert page.find_element(By.ID, "page-state").text == f"{2 * n + 1}–{2 * n + 2} of 9"
    assert page.find_element(By.ID, "prev").get_attribute("disabled") == "true"
