//! `GET /api/admin/usage`: request and token totals per model, user or agent.

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::app::AppState;
use crate::error::{Error, Result};
use crate::http::extract::AdminUser;
use crate::store::usage::{GroupBy, UsageTotals};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(usage))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UsageQuery {
    /// RFC 3339; records at or after it (default: all).
    from: Option<String>,
    /// RFC 3339; records before it (default: all).
    to: Option<String>,
    /// `model` (default), `user` (keyed by e-mail) or `agent`.
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
            Error::validation("group_by", "'group_by' must be one of model, user, agent.")
        })?,
    };
    Ok((from, to, group))
}

/// Usage totals: every request counts, failed ones included; `errors` counts those with status 400 or more.
#[utoipa::path(get, path = "/api/admin/usage", tag = "admin", params(UsageQuery),
    responses((status = 200, description = "`[{key, requests, prompt_tokens, completion_tokens, errors}]` ordered by key"),
              (status = 400, description = "validation_error"),
              (status = 403, description = "forbidden")))]
async fn usage(
    State(app): State<AppState>,
    _admin: AdminUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Vec<UsageTotals>>> {
    let (from, to, group) = parse_query(raw.as_deref())?;
    Ok(Json(app.store.usage_totals(from, to, group).await?))
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
    }
}
