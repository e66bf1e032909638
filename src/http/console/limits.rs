//! Limits in the console: the four limits (contract "Limits and budgets") and
//! the two budgets in money (contract "Spend in money" → "Console") of an API
//! key (its owner), of a user and of an agent (admins), each with what is
//! used now: the budgets with spend today, spend this month and what open
//! requests reserve, each with a bar against its budget. A form becomes the
//! API's own `limits` object and goes through
//! the same functions as `PATCH /api/api-keys/{id}`, `PATCH
//! /api/admin/users/{id}` and `PATCH /api/admin/agents/{address}`, so the
//! console refuses the same values with the same message.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use maud::{html, Markup};
use serde_json::{json, Map, Value};

use super::guard::{ConsoleAdmin, ConsoleError, ConsoleUser, Out, Posted};
use super::layout::{csrf, enc, page};
use crate::agents::AgentPatch;
use crate::app::AppState;
use crate::auth::accounts;
use crate::error::{Error, ErrorKind};
use crate::limits::engine::Used;
use crate::limits::{Limits, FIELDS};
use crate::spend::budget::FIELDS as BUDGETS;
use crate::spend::{Amount, Currency};

type Form = std::collections::HashMap<String, String>;

fn field<'a>(form: &'a Form, name: &str) -> &'a str {
    form.get(name).map(String::as_str).unwrap_or("")
}

/// The form's fields as the API's `limits` object: a blank field is "no
/// limit"; anything else is passed on as typed (a number when it reads as
/// one, else text; a budget always as text, the API's amounts being
/// strings) so the API's own check names what is wrong. The `clear` button
/// sends `null`: every limit removed.
pub fn limits_json(form: &Form) -> Value {
    if field(form, "clear") == "1" {
        return Value::Null;
    }
    let mut out = Map::new();
    for name in FIELDS {
        let raw = field(form, name).trim();
        if raw.is_empty() {
            continue;
        }
        let v = if let Ok(n) = raw.parse::<i64>() {
            json!(n)
        } else if let Some(f) = raw.parse::<f64>().ok().filter(|f| f.is_finite()) {
            json!(f)
        } else {
            json!(raw)
        };
        out.insert(name.to_string(), v);
    }
    for name in BUDGETS {
        let raw = field(form, name).trim();
        if !raw.is_empty() {
            out.insert(name.to_string(), json!(raw));
        }
    }
    Value::Object(out)
}

fn budget_of(l: &Limits, name: &str) -> Option<Amount> {
    if name == "budget_per_day" {
        l.budget_per_day
    } else {
        l.budget_per_month
    }
}

/// An amount as the console shows it: up to 9 decimals, trailing zeros dropped.
fn short(nanos: i64) -> String {
    super::prices::short_nanos(nanos)
}

/// Nano-units as a bar's figure (a bar is drawn, not read to the nano).
fn bar_value(nanos: i64) -> f64 {
    nanos.max(0) as f64
}

/// A bar of `used` against `budget` (nano-units), warning from 70 %.
fn budget_bar(used: i64, budget: Amount) -> Markup {
    let max = budget.nanos() as f64;
    html! {
        meter min="0" max=(max) low=(max * 0.7) high=(max * 0.9) optimum="0" value=(bar_value(used)) { }
    }
}

fn label(name: &str) -> &'static str {
    match name {
        "requests_per_minute" => "Requests per minute",
        "tokens_per_minute" => "Tokens per minute",
        "tokens_per_day" => "Tokens per day (UTC)",
        _ => "Requests at once",
    }
}

fn limit_of(l: &Limits, name: &str) -> Option<u64> {
    match name {
        "requests_per_minute" => l.requests_per_minute,
        "tokens_per_minute" => l.tokens_per_minute,
        "tokens_per_day" => l.tokens_per_day,
        _ => l.max_parallel,
    }
}

fn used_of(u: &Used, name: &str) -> i64 {
    match name {
        "requests_per_minute" => u.requests_this_minute,
        "tokens_per_minute" => u.tokens_this_minute,
        "tokens_per_day" => u.tokens_today,
        _ => u.in_flight,
    }
}

/// "60 requests/min · 10000 tokens/day", or "none".
pub fn summary(l: &Limits) -> String {
    let short = |n: &str| match n {
        "requests_per_minute" => "requests/min",
        "tokens_per_minute" => "tokens/min",
        "tokens_per_day" => "tokens/day",
        _ => "at once",
    };
    let parts: Vec<String> = FIELDS
        .iter()
        .filter_map(|n| limit_of(l, n).map(|v| format!("{v} {}", short(n))))
        .chain(BUDGETS.iter().filter_map(|n| {
            let per = if *n == "budget_per_day" {
                "day"
            } else {
                "month"
            };
            budget_of(l, n).map(|b| {
                format!(
                    "budget {}/{per}",
                    super::prices::short_nanos(b.nanos() as i64)
                )
            })
        }))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" · ")
    }
}

/// The limits table with what is used now, and the form that changes them.
/// `typed` refills the fields after a refused value.
pub fn section(
    user: &ConsoleUser,
    action: &str,
    limits: &Limits,
    used: &Used,
    currency: Currency,
    typed: Option<&Form>,
    error: Option<&str>,
) -> Markup {
    // Open reservations count against both budgets; the bar is drawn
    // against the day's when there is one.
    let reserved_against = limits.budget_per_day.or(limits.budget_per_month);
    html! {
        section.limits id="limits" {
            @if let Some(e) = error { p.error role="alert" { (e) } }
            form.stack method="post" action=(action) {
                (csrf(user))
                table {
                    thead { tr { th { "Limit" } th { "Set to (blank: no limit)" } th { "Used now" } } }
                    tbody {
                        @for name in FIELDS {
                            @let limit = limit_of(limits, name);
                            @let used_now = used_of(used, name);
                            @let value = typed.map(|f| field(f, name).to_string()).unwrap_or_else(|| limit.map(|v| v.to_string()).unwrap_or_default());
                            tr data-limit=(name) {
                                td { label for=(name) { (label(name)) } }
                                td { input id=(name) name=(name) value=(value) inputmode="numeric" size="12" autocomplete="off"; }
                                td.used {
                                    span.count { (used_now) }
                                    @if let Some(l) = limit {
                                        " of " (l) " "
                                        meter min="0" max=(l) low=(l * 7 / 10) high=(l * 9 / 10) optimum="0" value=(used_now.max(0)) { }
                                    }
                                }
                            }
                        }
                        @for name in BUDGETS {
                            @let budget = budget_of(limits, name);
                            @let (spent, what) = if name == "budget_per_day" { (used.spend_today, "spent today") } else { (used.spend_this_month, "spent this month") };
                            @let value = typed.map(|f| field(f, name).to_string()).unwrap_or_else(|| budget.map(|b| short(b.nanos() as i64)).unwrap_or_default());
                            tr data-limit=(name) {
                                td { label for=(name) { (if name == "budget_per_day" { "Budget per day (UTC)" } else { "Budget per month (UTC)" }) " in " (currency) } }
                                td { input id=(name) name=(name) value=(value) inputmode="decimal" size="12" autocomplete="off"; }
                                td.used {
                                    span.amount { (short(spent)) } " " (currency) " " (what)
                                    @if let Some(b) = budget {
                                        " of " (short(b.nanos() as i64)) " "
                                        (budget_bar(spent, b))
                                    }
                                }
                            }
                        }
                        tr data-used="reserved" {
                            td { "Reserved by requests under way" }
                            td.muted { "–" }
                            td.used {
                                span.amount { (short(used.reserved)) } " " (currency) " reserved"
                                @if let Some(b) = reserved_against {
                                    " of " (short(b.nanos() as i64)) " "
                                    (budget_bar(used.reserved, b))
                                }
                            }
                        }
                    }
                }
                p.actions {
                    button type="submit" { "Save limits" }
                    " "
                    button.danger type="submit" name="clear" value="1" { "Remove all limits" }
                }
            }
            p.muted { "A request must fit every limit that applies: its key's (or sign-in's), its user's, and on agent chat the agent's. Over one: 429. Counts are for the whole cluster; the minute and the day are the current ones." }
            p.muted { "Budgets are amounts in " (currency) " (up to 9 decimals) for the UTC day and month. A request is admitted while what was spent, what requests under way reserved and its own reservation fit the budget; it is then charged its cost. Spend is counted whether a budget is set or not." }
        }
    }
}

/// A refused value is shown on the form again with the API's message (a
/// page like any other, 200: the browser logs no failed load); anything
/// else is an error page.
fn refused(e: Error) -> Result<String, ConsoleError> {
    if e.kind == ErrorKind::Invalid {
        Ok(e.message)
    } else {
        Err(e.into())
    }
}

// ---- API keys (their owner) ----

async fn key_page(
    app: &AppState,
    user: &ConsoleUser,
    id: &str,
    typed: Option<&Form>,
    error: Option<&str>,
) -> Out {
    let uid = &user.session.user.id;
    let (limits, used) = crate::http::routes::limits::key_usage(app, uid, id).await?;
    let name = app
        .store
        .list_api_keys(uid)
        .await?
        .into_iter()
        .find(|k| k.id == id)
        .map(|k| k.name)
        .unwrap_or_default();
    let action = format!("/console/keys/{}/limits", enc(id));
    let body = html! {
        h1 { "Limits of key " (name) }
        (section(user, &action, &limits, &used, app.prices().currency, typed, error))
        p { a href="/console/keys" { "← My API keys" } }
    };
    Ok(page(user, "Key limits", "/console/keys", body).into_response())
}

pub async fn key_limits(
    State(app): State<AppState>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Out {
    key_page(&app, &user, &id, None, None).await
}

pub async fn set_key_limits(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    let uid = posted.user.session.user.id.clone();
    match crate::http::routes::users::set_key_limits(&app, &uid, &id, &limits_json(&posted.form))
        .await
    {
        Ok(()) => Ok(Redirect::to("/console/keys?done=updated").into_response()),
        Err(e) => {
            let msg = refused(e)?;
            key_page(&app, &posted.user, &id, Some(&posted.form), Some(&msg)).await
        }
    }
}

// ---- users (admins) ----

async fn user_page(
    app: &AppState,
    admin: &ConsoleUser,
    id: &str,
    typed: Option<&Form>,
    error: Option<&str>,
) -> Out {
    let u = app.store.user_by_id(id).await?.ok_or_else(|| {
        ConsoleError::new(StatusCode::NOT_FOUND, "There is no user with this id.")
    })?;
    let (limits, used) =
        crate::http::routes::limits::user_usage(app, id, u.limits.as_deref()).await;
    let action = format!("/console/admin/users/{}/limits", enc(id));
    let body = html! {
        h1 { "Limits of " (u.email) }
        p.muted { "For all of the user's API keys and agent sign-ins together." }
        (section(admin, &action, &limits, &used, app.prices().currency, typed, error))
        p { a href="/console/admin/users" { "← Users" } }
    };
    Ok(page(admin, "User limits", "/console/admin/users", body).into_response())
}

pub async fn user_limits(
    State(app): State<AppState>,
    ConsoleAdmin(admin): ConsoleAdmin,
    Path(id): Path<String>,
) -> Out {
    user_page(&app, &admin, &id, None, None).await
}

pub async fn set_user_limits(
    State(app): State<AppState>,
    Path(id): Path<String>,
    posted: Posted,
) -> Out {
    super::forms::admin_only(&posted)?;
    let result = async {
        let limits = Limits::from_json(&limits_json(&posted.form))?;
        crate::http::routes::admin::store_user_limits(&app, &id, limits).await?;
        // As the API's PATCH: drops the user's cached credentials (with their
        // limits) here and on the other servers.
        accounts::update_user(&app.auth, &id, accounts::UserChange::default()).await?;
        Ok::<(), Error>(())
    }
    .await;
    match result {
        Ok(()) => Ok(Redirect::to("/console/admin/users?done=updated").into_response()),
        Err(e) => {
            let msg = refused(e)?;
            user_page(&app, &posted.user, &id, Some(&posted.form), Some(&msg)).await
        }
    }
}

// ---- agents (admins) ----

async fn agent_page(
    app: &AppState,
    admin: &ConsoleUser,
    address: &str,
    typed: Option<&Form>,
    error: Option<&str>,
) -> Out {
    let agent = app.agent(address).await?.ok_or_else(|| {
        ConsoleError::new(
            StatusCode::NOT_FOUND,
            "There is no agent with this address.",
        )
    })?;
    let used = crate::http::routes::limits::agent_usage(app, address, agent.limits).await;
    let base = format!("/console/admin/agents/{}", enc(address));
    let body = html! {
        h1 { "Limits of agent " (address) }
        p.muted { "For every chat with this agent, all users together." }
        (section(admin, &format!("{base}/limits"), &agent.limits, &used, app.prices().currency, typed, error))
        p { a href=(base) { "← Agent " (address) } }
    };
    Ok(page(admin, "Agent limits", "/console/admin/agents", body).into_response())
}

pub async fn agent_limits(
    State(app): State<AppState>,
    ConsoleAdmin(admin): ConsoleAdmin,
    Path(address): Path<String>,
) -> Out {
    agent_page(&app, &admin, &address, None, None).await
}

pub async fn set_agent_limits(
    State(app): State<AppState>,
    Path(address): Path<String>,
    posted: Posted,
) -> Out {
    super::forms::admin_only(&posted)?;
    let result = async {
        let patch: AgentPatch = crate::wire::json::parse_json(
            &serde_json::to_vec(&json!({ "limits": limits_json(&posted.form) }))
                .map_err(Error::internal)?,
        )?;
        crate::http::routes::agents::change_agent(&app, &address, &patch).await?;
        Ok::<(), Error>(())
    }
    .await;
    match result {
        Ok(()) => Ok(Redirect::to(&format!(
            "/console/admin/agents/{}?done=updated",
            enc(&address)
        ))
        .into_response()),
        Err(e) => {
            let msg = refused(e)?;
            agent_page(&app, &posted.user, &address, Some(&posted.form), Some(&msg)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(fields: &[(&str, &str)]) -> Form {
        fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn blank_fields_are_no_limit_and_values_pass_as_typed() {
        let v = limits_json(&posted(&[
            ("requests_per_minute", " 60 "),
            ("tokens_per_minute", ""),
            ("tokens_per_day", "1.5"),
            ("max_parallel", "lots"),
        ]));
        assert_eq!(
            v,
            json!({"requests_per_minute": 60, "tokens_per_day": 1.5, "max_parallel": "lots"})
        );
        // The API's check then refuses what is not a positive whole number.
        let e = Limits::from_json(&v).expect_err("refused");
        assert_eq!(e.field, "limits.tokens_per_day");
    }

    #[test]
    fn budgets_pass_as_text_and_blank_is_no_budget() {
        let v = limits_json(&posted(&[
            ("budget_per_day", " 5 "),
            ("budget_per_month", ""),
        ]));
        assert_eq!(v, json!({"budget_per_day": "5"}));
        let l = Limits::from_json(&v).expect("a budget of 5");
        assert_eq!(l.budget_per_day, Some(Amount::units(5)));
        assert_eq!(l.budget_per_month, None);
        // The API's check words what is wrong with a bad amount.
        let v = limits_json(&posted(&[("budget_per_month", "0")]));
        let e = Limits::from_json(&v).expect_err("refused");
        assert_eq!(e.field, "limits.budget_per_month");
    }

    #[test]
    fn the_clear_button_removes_every_limit() {
        let v = limits_json(&posted(&[("clear", "1"), ("requests_per_minute", "5")]));
        assert_eq!(v, Value::Null);
    }

    #[test]
    fn the_summary_names_each_limit_set() {
        assert_eq!(summary(&Limits::default()), "none");
        let l = Limits {
            requests_per_minute: Some(60),
            max_parallel: Some(2),
            ..Default::default()
        };
        assert_eq!(summary(&l), "60 requests/min · 2 at once");
        let l = Limits {
            budget_per_day: Some(Amount(2_500_000_000)),
            budget_per_month: Some(Amount::units(40)),
            ..Default::default()
        };
        assert_eq!(summary(&l), "budget 2.5/day · budget 40/month");
    }
}
