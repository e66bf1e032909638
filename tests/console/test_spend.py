"""The console's spend pages in Chromium: prices set, refused (with the
API's message), versioned and ended; the usage page's cost column, spend
chart, groupings and CSV columns (docs/spend.md)."""

import time

from conftest import ADMIN_EMAIL, ADMIN_PASSWORD, USER_PASSWORD, http


def submit_price(console, model, **fields):
    console.go("/console/admin/prices")
    form = console.page.locator("form#set-price")
    form.locator("select[name=provider]").select_option("stub")
    form.locator("input[name=upstream_model]").fill(model)
    for name, value in fields.items():
        form.locator(f"[name={name}]").fill(value)
    form.locator("button[type=submit]").click()
    console.page.wait_for_load_state()


def trimmed(amount: str) -> str:
    s = amount.rstrip("0")
    return s[:-1] if s.endswith(".") else s


def test_prices_are_set_refused_versioned_and_ended_in_the_console(console, gateway):
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    submit_price(console, "org/priced-model", input="1.00", output="2", cache_read="0.1")
    row = console.page.locator('tr[data-price="stub/org/priced-model"]')
    cells = row.locator("td").all_inner_texts()
    assert cells[:5] == ["stub", "org/priced-model", "1", "2", "0.1"], cells
    _, current, _ = http("GET", f"{gateway.url}/api/admin/prices/stub/org/priced-model", token=gateway.admin)
    assert current["version"] in row.inner_text()

    # One past a bound: the API's message, and nothing changes.
    submit_price(console, "org/priced-model", input="1000000.000000001", output="2")
    error = console.page.locator("p.error").inner_text()
    assert "'input'" in error and "1000000" in error, error
    submit_price(console, "org/priced-model", input="1", output="2",
                 tiers='[{"above_prompt_tokens": 5, "input": "1", "output": "1"}, {"above_prompt_tokens": 5, "input": "1", "output": "1"}]')
    assert "'tiers[1].above_prompt_tokens'" in console.page.locator("p.error").inner_text()
    _, still, _ = http("GET", f"{gateway.url}/api/admin/prices/stub/org/priced-model", token=gateway.admin)
    assert still == current

    # A new version, and the pair's history shows both.
    submit_price(console, "org/priced-model", input="1.5", output="2")
    console.page.locator('tr[data-price="stub/org/priced-model"] a:has-text("History")').click()
    console.page.wait_for_load_state()
    rows = console.page.locator("table#price-history tbody tr")
    assert rows.count() == 2
    assert "current" in rows.nth(0).inner_text() and "1.5" in rows.nth(0).inner_text()

    console.go("/console/admin/prices")
    console.page.locator('tr[data-price="stub/org/priced-model"] button:has-text("End")').click()
    console.page.wait_for_load_state()
    assert "Price ended" in console.page.locator("p.note").inner_text()
    assert console.page.locator('tr[data-price="stub/org/priced-model"]').count() == 0
    status, _, _ = http("GET", f"{gateway.url}/api/admin/prices/stub/org/priced-model", token=gateway.admin)
    assert status == 404
    # The two refusals are answered 400 (Chromium logs each); nothing else failed.
    assert [e for e in console.errors if "status of 400" not in e] == [], console.errors
    assert len(console.errors) == 2, console.errors


def test_the_usage_page_shows_cost_spend_and_csv_columns(console, gateway):
    status, _, _ = http("PUT", f"{gateway.url}/api/admin/prices/stub/up-chat",
                        {"input": "1000", "output": "2000"}, gateway.admin)
    assert status == 200
    status, key, _ = http("POST", f"{gateway.url}/api/api-keys", {"name": "console-spend"}, gateway.admin)
    assert status == 201
    status, answer, headers = http(
        "POST", f"{gateway.url}/v1/chat/completions",
        {"model": "console-chat", "messages": [{"role": "user", "content": "what does it cost"}]},
        key["key"],
    )
    assert status == 200, answer
    assert headers["x-gatehouse-cost-status"] == "exact"
    # The record is written off the request path: wait for its cost in the totals.
    deadline = time.monotonic() + 10
    while True:
        _, rows, _ = http("GET", f"{gateway.url}/api/admin/usage?group_by=model", token=gateway.admin)
        row = next((r for r in rows if r["key"] == "console-chat"), None)
        if row and row["cost"] != "0.000000000":
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.05)

    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go("/console/admin/usage")
    cell = console.page.locator("table#usage-totals tr:has(td:text-is('console-chat')) td.cost").inner_text()
    assert cell == f"{trimmed(row['cost'])} USD", cell
    chart = console.page.locator("figure#spend-chart")
    assert "Spend per day (USD)" in chart.inner_text()
    assert chart.locator("svg rect").count() >= 1

    for group in ["key", "provider", "api"]:
        resp = console.go(f"/console/admin/usage?group_by={group}")
        assert resp.status == 200, group
    assert "chat" in console.page.locator("table#usage-totals").inner_text()
    resp = console.page.request.get(f"{gateway.url}/console/admin/usage.csv?group_by=provider")
    assert resp.status == 200
    head, *lines = resp.text().strip().splitlines()
    assert head == "provider,requests,prompt_tokens,completion_tokens,errors,cost,unpriced_requests"
    stub_line = next(l for l in lines if l.startswith('"stub"'))
    assert stub_line.split(",")[5] != "0.000000000", stub_line
    assert not console.errors, console.errors


def save_limits(console, **fields):
    for name, value in fields.items():
        console.page.fill(f"input[name={name}]", value)
    console.page.click("button:has-text('Save limits')")
    console.page.wait_for_load_state()


def nanos(amount: str) -> int:
    units, _, frac = amount.partition(".")
    return int(units) * 10**9 + int((frac + "0" * 9)[:9])


def test_budgets_are_set_in_the_limits_forms_and_their_spend_shows_against_them(console, gateway):
    status, body, _ = http("POST", f"{gateway.url}/api/admin/models",
                           {"id": "console-budget", "kind": "chat", "provider": "stub", "upstream_model": "up-budget"},
                           gateway.admin)
    assert status == 201, body
    status, _, _ = http("PUT", f"{gateway.url}/api/admin/prices/stub/up-budget",
                        {"input": "1000", "output": "2000"}, gateway.admin)
    assert status == 200

    # A key's owner sets its budgets: one past the bound is refused with the
    # API's message and nothing is saved; the bound itself is taken.
    email, login = gateway.user("budget")
    console.sign_in(email, USER_PASSWORD)
    console.page.fill("input[name=name]", "budgeted backend")
    console.page.click("button:has-text('Create key')")
    console.page.wait_for_load_state()
    key = console.page.locator("#new-key").inner_text()
    console.go("/console/keys")
    console.page.locator("tr", has_text="budgeted backend").locator("a:has-text('limits and use')").click()
    console.page.wait_for_load_state()
    limits_url = console.page.url
    save_limits(console, budget_per_day="1000000000.000000001")
    error = console.page.locator(".error").inner_text()
    assert "'limits.budget_per_day'" in error, error
    save_limits(console, budget_per_day="0")
    assert "'limits.budget_per_day'" in console.page.locator(".error").inner_text()
    _, keys, _ = http("GET", f"{gateway.url}/api/api-keys", token=login)
    key_id = next(k["id"] for k in keys if k["name"] == "budgeted backend")
    _, view, _ = http("GET", f"{gateway.url}/api/api-keys/{key_id}/limits", token=login)
    assert view["limits"]["budget_per_day"] is None, view
    save_limits(console, budget_per_day="1000000000", budget_per_month="")
    assert console.page.url.endswith("/console/keys?done=updated")
    assert "budget 1000000000/day" in console.page.locator("tr", has_text="budgeted backend").inner_text()
    console.go(limits_url.removeprefix(gateway.url))
    save_limits(console, budget_per_day="1.5", budget_per_month="20")
    _, view, _ = http("GET", f"{gateway.url}/api/api-keys/{key_id}/limits", token=login)
    assert (view["limits"]["budget_per_day"], view["limits"]["budget_per_month"]) == ("1.500000000", "20.000000000")

    # A priced request under the budget (reserving for at most 16 output
    # tokens): its cost is spend today and this month, each with a bar
    # against its budget.
    status, answer, headers = http(
        "POST", f"{gateway.url}/v1/chat/completions",
        {"model": "console-budget", "max_tokens": 16, "messages": [{"role": "user", "content": "what is left"}]},
        key,
    )
    assert status == 200, answer
    cost = headers["x-gatehouse-cost"]
    assert nanos(cost) > 0
    console.go(limits_url.removeprefix(gateway.url))
    day = console.page.locator("tr[data-limit=budget_per_day]")
    assert day.locator("input").input_value() == "1.5"
    used = day.locator("td.used").inner_text()
    assert used.startswith(f"{trimmed(cost)} USD spent today of 1.5"), used
    bar = day.locator("meter")
    assert (bar.get_attribute("max"), bar.get_attribute("value")) == ("1500000000", str(nanos(cost)))
    month = console.page.locator("tr[data-limit=budget_per_month]")
    assert month.locator("td.used").inner_text().startswith(f"{trimmed(cost)} USD spent this month of 20")
    assert month.locator("meter").get_attribute("max") == "20000000000"
    reserved = console.page.locator("tr[data-used=reserved] td.used")
    assert reserved.inner_text().startswith("0 USD reserved of 1.5"), reserved.inner_text()
    assert reserved.locator("meter").get_attribute("value") == "0"

    # An admin sets the user's month budget; the user's spend shows against it.
    _, me, _ = http("GET", f"{gateway.url}/api/users/me", token=login)
    console.page.click("header button:has-text('Sign out')")
    console.page.wait_for_load_state()
    console.sign_in(ADMIN_EMAIL, ADMIN_PASSWORD)
    console.go(f"/console/admin/users/{me['id']}/limits")
    save_limits(console, budget_per_month="0.25")
    assert console.page.url.endswith("/console/admin/users?done=updated")
    console.go(f"/console/admin/users/{me['id']}/limits")
    month = console.page.locator("tr[data-limit=budget_per_month]")
    assert month.locator("td.used").inner_text().startswith(f"{trimmed(cost)} USD spent this month of 0.25")
    assert month.locator("meter").get_attribute("max") == "250000000"
    assert console.page.locator("tr[data-limit=budget_per_day] meter").count() == 0, "no day budget, no bar"
    _, view, _ = http("GET", f"{gateway.url}/api/admin/users/{me['id']}/limits", token=gateway.admin)
    assert view["limits"]["budget_per_month"] == "0.250000000"

    # And an agent's day budget, shown on the agent's page.
    gateway.agent("budget-agent")
    console.go("/console/admin/agents/budget-agent/limits")
    save_limits(console, budget_per_day="0.5")
    assert "budget 0.5/day" in console.page.locator("span.limits").inner_text()
    _, view, _ = http("GET", f"{gateway.url}/api/admin/agents/budget-agent/limits", token=gateway.admin)
    assert view["limits"]["budget_per_day"] == "0.500000000"
    assert view["used"]["spend_today"] == "0.000000000"
    console.go("/console/admin/agents/budget-agent/limits")
    day = console.page.locator("tr[data-limit=budget_per_day]")
    assert day.locator("td.used").inner_text().startswith("0 USD spent today of 0.5")
    assert day.locator("meter").get_attribute("value") == "0"
    assert console.errors == [], console.errors
