//! `GET /v1/models` in Anthropic's list shape (contract, "`/v1/models` in
//! Anthropic's shape"): `{data: [{type, id, display_name, created_at}],
//! has_more, first_id, last_id}`, ordered by id, paged by `limit` (1 to
//! 1000, default 20) and `after_id`.

use serde_json::{json, Value};

use crate::error::Error;

pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 1000;

/// The `limit` query parameter: absent → 20; else an integer 1 to 1000.
pub fn parse_limit(limit: Option<&str>) -> Result<usize, Error> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                Error::validation(
                    "limit",
                    format!("'limit' must be an integer from 1 to {MAX_LIMIT}."),
                )
            }),
    }
}

/// One page of `models` (id, created at in ms), which need not be sorted.
pub fn page(mut models: Vec<(&str, i64)>, limit: usize, after_id: Option<&str>) -> Value {
    models.sort_by(|a, b| a.0.cmp(b.0));
    let start = after_id.map_or(0, |a| models.partition_point(|(id, _)| *id <= a));
    let rest = &models[start.min(models.len())..];
    let shown = &rest[..limit.min(rest.len())];
    let data: Vec<Value> = shown
        .iter()
        .map(|(id, created)| {
            json!({"type": "model", "id": id, "display_name": id, "created_at": crate::time::rfc3339(*created)})
        })
        .collect();
    json!({
        "data": data,
        "has_more": rest.len() > shown.len(),
        "first_id": shown.first().map(|m| m.0),
        "last_id": shown.last().map(|m| m.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_ids_in_order() {
        let models = vec![("c", 0), ("a", 1_000), ("b", 2_000)];
        let p = page(models.clone(), 2, None);
        assert_eq!(p["data"][0]["id"], "a");
        assert_eq!(p["data"][0]["display_name"], "a");
        assert_eq!(p["data"][0]["type"], "model");
        assert_eq!(p["data"][0]["created_at"], "1970-01-01T00:00:01.000Z");
        assert_eq!(
            (p["first_id"].as_str(), p["last_id"].as_str()),
            (Some("a"), Some("b"))
        );
        assert_eq!(p["has_more"], true);
        let p = page(models.clone(), 2, Some("b"));
        assert_eq!(p["data"].as_array().unwrap().len(), 1);
        assert_eq!(p["has_more"], false);
        let p = page(models, 2, Some("c"));
        assert_eq!(
            p,
            json!({"data": [], "has_more": false, "first_id": null, "last_id": null})
        );
    }

    #[test]
    fn limit_is_1_to_1000() {
        assert_eq!(parse_limit(None).unwrap(), 20);
        assert_eq!(parse_limit(Some("1")).unwrap(), 1);
        assert_eq!(parse_limit(Some("1000")).unwrap(), 1000);
        for bad in ["0", "1001", "x", "-1", ""] {
            assert_eq!(
                parse_limit(Some(bad)).unwrap_err().param.as_deref(),
                Some("limit"),
                "{bad}"
            );
        }
    }
}
