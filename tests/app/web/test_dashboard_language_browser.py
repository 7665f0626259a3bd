"""Every page in the user's language, in a real browser: an admin switches to Simplified Chinese in the header
and the overview, the greenhouse page's settings and forecast panels, the users and the policy pages read in
Chinese from the catalogue (audit/wording.json), with none of their English left; switching back restores
English. The login page, before anyone is known, follows the browser's preferred language.

The broker, service and plant simulator are the browser tests' own (tests/app/web/test_dashboard_browser.py),
started once for this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from audit import wording
from tests.app.web.test_dashboard_browser import GH, Page, browser, stack  # noqa: F401 (browser, stack: fixtures)

pytestmark = [pytest.mark.mqtt, pytest.mark.slow]


def _zh(key: str) -> str:
    return wording.text(key, "zh-Hans")


def _en(key: str) -> str:
    return wording.text(key, "en")


def _switch(page: Any, lang: str) -> None:
    """Choose ``lang`` in the header's selector (stored for the user; the page reloads in it)."""
    if page.get_attribute("html", "lang") == lang:
        return
    with page.expect_navigation():
        page.select_option("#language", lang)
    page.wait_for_function("(lang) => document.documentElement.lang === lang", arg=lang)


@pytest.fixture(scope="module")
def ada(stack: dict[str, Any], browser: Any) -> Iterator[Page]:  # noqa: F811
    """The admin's tab for the whole module (admins see every page and the settings panel); English again
    when the module ends, so no other test inherits her choice."""
    p = Page(browser, stack["base"], "ada")
    try:
        yield p
    finally:
        p.page.goto("/")
        _switch(p.page, "en")
        p.close()


def test_the_overview_and_header_in_chinese(ada: Page) -> None:
    page = ada.page
    page.goto("/")
    _switch(page, "zh-Hans")
    row = page.locator(f"#overview tr[data-gh='{GH}']")
    row.wait_for()
    assert page.inner_text("h1.page-title") == _zh("page.overview.title")
    head = page.inner_text("#overview thead")
    assert _zh("page.overview.col.telemetry") in head and _zh("page.overview.col.edge") in head
    assert page.text_content(f"#overview tr[data-gh='{GH}'] .badge.edge-online") == _zh("badge.edge.online")
    assert page.text_content(f"#overview tr[data-gh='{GH}'] td:nth-child(2) .badge") in (
        _zh("badge.mode.auto"), _zh("badge.mode.manual"), _zh("badge.estop"))
    topbar = page.inner_text("header.topbar")
    assert _zh("nav.overview") in topbar and _zh("page.role.admin") in topbar and _zh("page.brand") in topbar
    body = page.inner_text("body").lower()  # badges are upper-cased by the style sheet
    for english in ("greenhouses", "last telemetry", "edge box", "online", "auto", "overview", "operations"):
        assert english not in body, english
    ada.shot("overview-zh-hans")


def test_the_settings_and_forecast_panels_in_chinese(ada: Page) -> None:
    page = ada.greenhouse()
    _switch(page, "zh-Hans")
    page.wait_for_selector("#settings-zones tbody tr[data-zone='0']")
    settings = page.inner_text("#settings")
    assert page.inner_text("#settings h2") == _zh("gh.settings")
    assert page.inner_text("#settings-save") == _zh("page.settings.save")
    assert _zh("page.settings.col.low") in settings and _zh("zone").format(n=1) in settings
    soil = page.locator("#settings-zones tbody tr[data-zone='0'] [data-field='soil']")
    assert soil.input_value() == "loam" and _zh("soil.loam") in soil.inner_text()  # words shown, code sent
    for english in ("Settings", "Save settings", "Band low", "loam", "Zone "):
        assert english not in settings, english
    page.wait_for_selector("#chart-forecast .uplot", timeout=60000)
    page.wait_for_selector("#forecast-totals tbody tr")
    forecast = page.inner_text("#forecast")
    assert page.inner_text("#forecast h2") == _zh("page.forecast.title")
    assert page.inner_text("#whatif-run") == _zh("page.forecast.run")
    assert page.inner_text("#fc-name-0") == _zh("page.forecast.name.forecast")
    assert _zh("page.forecast.row.water_cost") in forecast and _zh("page.forecast.chart") in forecast
    assert page.inner_text("#forecast-note").startswith(_zh("page.forecast.kind.forecast"))
    for english in ("Forecast", "Show what-if", "what-if", "Water cost", "Lamp hours", "Zone "):
        assert english not in forecast, english
    ada.shot("greenhouse-settings-forecast-zh-hans")


def test_the_users_and_policy_pages_in_chinese(ada: Page) -> None:
    page = ada.page
    page.goto("/admin/users")
    _switch(page, "zh-Hans")
    page.wait_for_selector("#users tr[data-user='ada']")
    assert page.inner_text("h1.page-title") == _zh("page.users.title")
    assert page.inner_text("#add-user-submit") == _zh("page.users.submit")
    assert page.inner_text("#users tr[data-user='ada'] button >> nth=0") == _zh("page.users.reset")
    assert _zh("badge.user.active") in page.inner_text("#users tr[data-user='ada']")
    main = page.inner_text("main")
    for english in ("Users and roles", "Add with a generated password", "Reset password", "Last login",
                    "active"):
        assert english not in main, english
    page.goto("/admin/policy")
    page.wait_for_selector("#in-force tbody tr")
    assert page.inner_text("h1.page-title") == _zh("page.policy.title")
    assert page.inner_text("#in-force caption") == _zh("page.policy.in_force")
    assert _zh("page.policy.col.eval_reward") in page.inner_text("#members")
    main = page.inner_text("main")
    for english in ("Policy versions", "In force", "Last retraining", "Registry", "Eval mean reward"):
        assert english not in main, english


def test_switching_back_restores_english(ada: Page) -> None:
    page = ada.greenhouse()
    _switch(page, "zh-Hans")
    assert page.inner_text("#forecast h2") == _zh("page.forecast.title")
    _switch(page, "en")
    page.wait_for_selector(".tile[data-zone='0'] .moisture")
    assert page.inner_text("#settings h2") == "Settings" and page.inner_text("#whatif-run") == "Show what-if"
    assert page.inner_text("#forecast h2") == _en("page.forecast.title")
    page.goto("/")
    page.locator(f"#overview tr[data-gh='{GH}']").wait_for()
    assert page.inner_text("h1.page-title") == "Greenhouses"
    assert "online" in page.inner_text(f"#overview tr[data-gh='{GH}']").lower()
    body = page.inner_text("body")
    assert _zh("page.overview.title") not in body and _zh("nav.overview") not in body


def test_the_login_page_follows_the_browsers_language(stack: dict[str, Any], browser: Any) -> None:  # noqa: F811
    for locale, lang in (("zh-CN", "zh-Hans"), ("en-GB", "en")):
        context = browser.new_context(base_url=stack["base"], locale=locale)
        try:
            page = context.new_page()
            page.goto("/login")
            assert page.get_attribute("html", "lang") == lang
            assert page.inner_text("button[type=submit]") == wording.text("page.login.submit", lang)
            page.fill("#username", "nobody")
            page.fill("#password", "wrong password")
            page.click("button[type=submit]")
            page.wait_for_selector("#login-error:not([hidden])")
            assert page.inner_text("#login-error") == wording.text("page.login.wrong", lang)
        finally:
            context.close()
