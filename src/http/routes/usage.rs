//! `GET /api/admin/usage`: request, token and cost totals per model, user,
//! agent, key or provider; `GET /api/admin/usage/records`: the records.

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::http::extract::AdminUser;
use crate::spend::amount::format_nanos;
use crate::spend::Currency;
use crate::store::usage::{GroupBy, RecordFilter, UsageRow, UsageTotals};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(usage))
        .routes(routes!(usage_records))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageQuery {
    /// RFC 3339; records at or after it (default: all).
    from: Option<String>,
    /// RFC 3339; records before it (default: all).
    to: Option<String>,
    /// `model` (default), `user` (keyed by e-mail), `agent`, `key` (the API key's id), `provider` or `api` (chat's inbound dialect).
    group_by: Option<String>,
}

fn time_param(name: &str, v: Option<&str>, default: i64) -> Result<i64> {
    match v.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(default),
        Some(s) => crate::time::parse_rfc3339(s).ok_or_else(|| {
            Error::validation(
                name,
                format!("'{name}' must be an RFC 3339 time, e.g. 2026-01-31T00:00:00Z."),
            )
        }),
    }
}

/// Parses the query string; every bad value is a validation error.
fn parse_query(raw: Option<&str>) -> Result<(i64, i64, GroupBy)> {
    let q: UsageQuery = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|_| Error::validation("query", "The query string could not be read."))?;
    let from = time_param("from", q.from.as_deref(), 0)?;
    let to = time_param("to", q.to.as_deref(), i64::MAX)?;
    if to < from {
        return Err(Error::validation("to", "'to' must not be before 'from'."));
    }
    let group = match q.group_by.as_deref().map(str::trim) {
        None | Some("") => GroupBy::Model,
        Some(g) => GroupBy::parse(g).ok_or_else(|| {
            Error::validation(
                "group_by",
                "'group_by' must be one of model, user, agent, key, provider, api.",
            )
        })?,
    };
    Ok((from, to, group))
}

/// One group's totals as the API shows them: the cost as an amount.
pub fn totals_json(t: &UsageTotals, currency: Currency) -> serde_json::Value {
    serde_json::json!({
        "key": t.key, "requests": t.requests, "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens, "errors": t.errors,
        "cost": format_nanos(t.cost_nanos), "currency": currency.as_str(),
        "unpriced_requests": t.unpriced_requests,
    })
}

/// Usage totals: every request counts, failed ones included; `errors` counts those with status 400 or more.
#[utoipa::path(get, path = "/api/admin/usage", tag = "admin", params(UsageQuery),
    responses((status = 200, description = "`[{key, requests, prompt_tokens, completion_tokens, errors, cost, currency, unpriced_requests}]` ordered by key; `cost` is an amount string (unpriced records count 0)"),
              (status = 400, description = "validation_error"),
              (status = 403, description = "forbidden")))]
async fn usage(
    State(app): State<AppState>,
    _admin: AdminUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<serde_json::Value>>> {
    let (from, to, group) = parse_query(raw.as_deref())?;
    let currency = app.prices().currency;
    let rows = app.store.usage_totals(from, to, group).await?;
    Ok(Json(
        rows.iter().map(|t| totals_json(t, currency)).collect(),
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct RecordsQuery {
    /// Only the record of this request (its `x-request-id`).
    request_id: Option<String>,
    /// RFC 3339; records at or after it.
    from: Option<String>,
    /// RFC 3339; records before it.
    to: Option<String>,
    /// 1 to 1000, default 100.
    limit: Option<String>,
}

/// The most records one call returns.
pub const MAX_RECORDS: i64 = 1000;

fn parse_records_query(raw: Option<&str>) -> Result<RecordFilter> {
    let q: RecordsQuery = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|_| Error::validation("query", "The query string could not be read."))?;
    let from = time_param("from", q.from.as_deref(), 0)?;
    let to = time_param("to", q.to.as_deref(), i64::MAX)?;
    if to < from {
        return Err(Error::validation("to", "'to' must not be before 'from'."));
    }
    let limit = match q.limit.as_deref().map(str::trim) {
        None | Some("") => 100,
        Some(l) => match l.parse::<i64>() {
            Ok(n) if (1..=MAX_RECORDS).contains(&n) => n,
            _ => {
                return Err(Error::validation(
                    "limit",
                    format!("'limit' must be a whole number from 1 to {MAX_RECORDS}."),
                ))
            }
        },
    };
    Ok(RecordFilter {
        request_id: q.request_id.filter(|r| !r.is_empty()),
        from,
        to,
        limit,
    })
}

/// A record as the API shows it.
fn record_json(r: &UsageRow, currency: Currency) -> serde_json::Value {
    serde_json::json!({
        "id": r.id, "at": crate::time::rfc3339(r.at), "request_id": r.request_id,
        "user": r.user_email, "api_key_id": r.api_key_id, "agent": r.agent,
        "device_id": r.device_id, "model": r.model, "provider": r.provider,
        "upstream_model": r.upstream_model, "kind": r.kind, "api": r.api, "status": r.status,
        "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cache_read_tokens, "cache_write_tokens": r.cache_write_tokens,
        "reasoning_tokens": r.reasoning_tokens,
        "cost": r.cost_nanos.map(format_nanos), "cost_status": r.cost_status,
        "price_version": r.price_version, "currency": currency.as_str(),
    })
}

/// Usage records, newest first, each with its cost as it was fixed when recorded.
#[utoipa::path(get, path = "/api/admin/usage/records", tag = "admin", params(RecordsQuery),
    responses((status = 200, description = "`[{id, at, request_id, user, api_key_id, agent, device_id, model, provider, upstream_model, kind, status, prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, cost, cost_status, price_version, currency}]` newest first"),
              (status = 400, description = "validation_error (`limit` outside 1..1000, bad times)"),
              (status = 403, description = "forbidden")))]
async fn usage_records(
    State(app): State<AppState>,
    _admin: AdminUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<serde_json::Value>>> {
    let filter = parse_records_query(raw.as_deref())?;
    let currency = app.prices().currency;
    let rows = app.store.usage_records(&filter).await?;
    Ok(Json(
        rows.iter().map(|r| record_json(r, currency)).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_defaults_and_errors() {
        assert_eq!(parse_query(None).unwrap(), (0, i64::MAX, GroupBy::Model));
        let (from, to, g) = parse_query(Some(
            "from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00%2B00:00&group_by=user",
        ))
        .unwrap();
        assert_eq!((to - from, g), (86_400_000, GroupBy::User));
        let param = |q: &str| parse_query(Some(q)).err().and_then(|e| e.param);
        assert_eq!(param("group_by=day"), Some("group_by".into()));
        assert_eq!(param("from=yesterday"), Some("from".into()));
        assert_eq!(param("to=2026-13-01T00:00:00Z"), Some("to".into()));
        assert_eq!(
            param("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z"),
            Some("to".into())
        );
        assert_eq!(param("group_by=agent"), None);
        assert_eq!(param("group_by=key"), None);
        assert_eq!(param("group_by=provider"), None);
    }

    #[test]
    fn records_take_a_limit_from_1_to_1000() {
        let param = |q: &str| parse_records_query(Some(q)).err().and_then(|e| e.param);
        assert_eq!(parse_records_query(None).unwrap().limit, 100);
        assert_eq!(parse_records_query(Some("limit=1")).unwrap().limit, 1);
        assert_eq!(parse_records_query(Some("limit=1000")).unwrap().limit, 1000);
        assert_eq!(param("limit=0"), Some("limit".into()));
        assert_eq!(param("limit=1001"), Some("limit".into()));
        assert_eq!(param("limit=ten"), Some("limit".into()));
        assert_eq!(
            parse_records_query(Some("request_id=abc"))
                .unwrap()
                .request_id,
            Some("abc".into())
        );
    }
}
