"""The explorer with `expand` in the OpenAPI document (issue 34 item 4): `expand` is a list
parameter (an array, form style), not a filter, so it gets no filter box. Headless Chromium,
as tests/explorer/test_explorer_browser.py."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from support.explorer_kit import open_explorer, wait_for_page


def test_a_model_with_refs_gets_its_filters_and_no_expand_box(serve, page):
    server = serve()
    open_explorer(page, server.port, "#/blog-post")
    wait_for_page(page, "/api/blog-post?limit=20")
    boxes = [e.get_attribute("name") for e in page.find_elements(By.CSS_SELECTOR, "#filters select, #filters input")]
    assert {"author_id", "published", "score"} <= set(boxes)
    assert "expand" not in boxes
