//! Prices (admins): the current price of each (provider, upstream model)
//! with its version and since when, forms that set and end a price, and each
//! pair's history. The same functions as `/api/admin/prices`, so a refused
//! value shows the API's message (docs/spend.md).

use axum::extract::{Query, State};
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::forms::{admin_only, redirect, DoneQuery};
use super::guard::{ConsoleAdmin, ConsoleError, Out, Posted};
use super::layout::{csrf, done_note, enc, page};
use crate::app::AppState;
use crate::error::Error;
use crate::http::routes::prices::{end_price, set_price};
use crate::spend::price::{Price, Rates};
use crate::spend::Amount;

/// An amount as the console shows it: up to 9 decimals, trailing zeros dropped.
pub fn short_amount(a: Amount) -> String {
    let s = a.to_string();
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_string()
}

/// A sum of nano-units as the console shows it (see [`short_amount`]).
pub fn short_nanos(n: i64) -> String {
    let s = crate::spend::amount::format_nanos(n);
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_string()
}

fn opt(a: Option<Amount>) -> String {
    a.map_or_else(|| "—".to_string(), short_amount)
}

fn rates_cells(r: &Rates) -> Markup {
    html! {
        td { (short_amount(r.input)) } td { (short_amount(r.output)) }
        td { (opt(r.cache_read)) } td { (opt(r.cache_write)) } td { (opt(r.reasoning)) }
    }
}

fn tiers_text(p: &Price) -> String {
    if p.spec.tiers.is_empty() {
        return "—".into();
    }
    p.spec
        .tiers
        .iter()
        .map(|t| {
            format!(
                "> {}: {} / {}",
                t.above_prompt_tokens,
                short_amount(t.rates.input),
                short_amount(t.rates.output)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn pair_query(p: &Price) -> String {
    format!(
        "provider={}&upstream_model={}",
        enc(&p.provider),
        enc(&p.upstream_model)
    )
}

pub async fn prices(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<DoneQuery>,
) -> Out {
    let list = app.store.current_prices().await?;
    let providers = app.store.list_providers().await?;
    let currency = app.prices().currency;
    let body = html! {
        h1 { "Prices" }
        (done_note(q.done.as_deref()))
        p { "Rates in " (currency) " per 1,000,000 tokens, for each provider and the upstream model it is sent. A request is priced with the rates current when it was admitted; its cost never changes afterwards." }
        @if list.is_empty() { p.empty { "No prices yet: every request is unpriced." } } @else {
            table id="prices" {
                thead { tr { th { "Provider" } th { "Upstream model" } th { "Input" } th { "Output" } th { "Cache read" } th { "Cache write" } th { "Reasoning" } th { "Request" } th { "Tiers" } th { "Version" } th { "Since" } th {} } }
                tbody {
                    @for p in &list {
                        tr data-price=(format!("{}/{}", p.provider, p.upstream_model)) {
                            td { (p.provider) }
                            td { code { (p.upstream_model) } }
                            (rates_cells(&p.spec.base))
                            td { (opt(p.spec.request)) }
                            td { (tiers_text(p)) }
                            td { code { (p.version) } }
                            td { (crate::time::rfc3339(p.effective_from)) }
                            td {
                                a href=(format!("/console/admin/prices/history?{}", pair_query(p))) { "History" }
                                " "
                                form.inline method="post" action="/console/admin/prices/end" {
                                    (csrf(&user))
                                    input type="hidden" name="provider" value=(p.provider);
                                    input type="hidden" name="upstream_model" value=(p.upstream_model);
                                    button.danger type="submit" { "End" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Set a price" }
        p.muted { "Amounts are decimals with up to 9 fractional digits, from 0 to 1000000. An unset cache or reasoning rate is priced as input or output. Setting the same price again makes no new version." }
        form.stack id="set-price" method="post" action="/console/admin/prices" {
            (csrf(&user))
            label { "Provider" select name="provider" required {
                @for p in &providers { option value=(p.name) { (p.name) } }
            } }
            label { "Upstream model" input name="upstream_model" required; }
            label { "Input" input name="input" required inputmode="decimal"; }
            label { "Output" input name="output" required inputmode="decimal"; }
            label { "Cache read (optional)" input name="cache_read" inputmode="decimal"; }
            label { "Cache write (optional)" input name="cache_write" inputmode="decimal"; }
            label { "Reasoning (optional)" input name="reasoning" inputmode="decimal"; }
            label { "Request fee (optional)" input name="request" inputmode="decimal"; }
            label { "Tiers (optional, JSON: [{\"above_prompt_tokens\": 128000, \"input\": \"2\", \"output\": \"4\"}])"
                textarea name="tiers" rows="3" {} }
            button type="submit" { "Set price" }
        }
    };
    Ok(page(&user, "Prices", "/console/admin/prices", body))
}

/// The form as the API's body: empty fields left out, amounts as strings.
fn price_body(posted: &Posted) -> Result<Value, ConsoleError> {
    let mut body = Map::new();
    for f in [
        "input",
        "output",
        "cache_read",
        "cache_write",
        "reasoning",
        "request",
    ] {
        let v = posted.get(f).trim();
        if !v.is_empty() {
            body.insert(f.into(), Value::String(v.to_string()));
        }
    }
    let tiers = posted.get("tiers").trim();
    if !tiers.is_empty() {
        let list: Value = serde_json::from_str(tiers).map_err(|_| {
            ConsoleError::from(Error::validation(
                "tiers",
                "'tiers' must be a JSON list like [{\"above_prompt_tokens\": 128000, \"input\": \"2\", \"output\": \"4\"}].",
            ))
        })?;
        body.insert("tiers".into(), list);
    }
    Ok(Value::Object(body))
}

pub async fn set(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    let body = price_body(&posted)?;
    set_price(
        &app,
        posted.get("provider").trim(),
        posted.get("upstream_model").trim(),
        &body,
    )
    .await?;
    redirect("/console/admin/prices?done=updated")
}

pub async fn end(State(app): State<AppState>, posted: Posted) -> Out {
    admin_only(&posted)?;
    end_price(&app, posted.get("provider"), posted.get("upstream_model")).await?;
    redirect("/console/admin/prices?done=price-ended")
}

#[derive(Deserialize)]
pub struct PairQuery {
    provider: String,
    upstream_model: String,
}

pub async fn history(
    State(app): State<AppState>,
    ConsoleAdmin(user): ConsoleAdmin,
    Query(q): Query<PairQuery>,
) -> Out {
    let list: Vec<Price> = app
        .store
        .list_prices(true, Some(&q.provider))
        .await?
        .into_iter()
        .filter(|p| p.upstream_model == q.upstream_model)
        .collect();
    let title = format!("Price history: {}/{}", q.provider, q.upstream_model);
    let body = html! {
        h1 { (title) }
        p { a href="/console/admin/prices" { "All prices" } }
        @if list.is_empty() { p.empty { "This pair has never had a price." } } @else {
            table id="price-history" {
                thead { tr { th { "Version" } th { "From" } th { "To" } th { "Input" } th { "Output" } th { "Cache read" } th { "Cache write" } th { "Reasoning" } th { "Request" } th { "Tiers" } } }
                tbody {
                    @for p in list.iter().rev() {
                        tr {
                            td { code { (p.version) } }
                            td { (crate::time::rfc3339(p.effective_from)) }
                            td { @match p.effective_to { Some(t) => (crate::time::rfc3339(t)), None => "current" } }
                            (rates_cells(&p.spec.base))
                            td { (opt(p.spec.request)) }
                            td { (tiers_text(p)) }
                        }
                    }
                }
            }
        }
    };
    Ok(page(&user, &title, "/console/admin/prices", body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_show_without_trailing_zeros() {
        assert_eq!(short_amount(Amount(1_820_000)), "0.00182");
        assert_eq!(short_amount(Amount::units(2)), "2");
        assert_eq!(short_amount(Amount(0)), "0");
        assert_eq!(short_amount(Amount(1)), "0.000000001");
    }
}
