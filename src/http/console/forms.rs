//! What the console's forms share: a redirect after a change, a form turned
//! into one of the API's own bodies (so the console goes through exactly the
//! API's checks), a list typed into one field, the `?done=` note, and the
//! administrators' guard on posted forms.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;
use serde_json::Value;

use super::guard::{ConsoleError, Out, Posted};
use crate::error::Error;

pub fn redirect(to: &str) -> Out {
    Ok(Redirect::to(to).into_response())
}

/// Parses a form built from fields into one of the API's own bodies, so the
/// console goes through exactly the API's checks.
pub fn body_of<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ConsoleError> {
    let bytes = serde_json::to_vec(&v).map_err(Error::internal)?;
    Ok(crate::wire::json::parse_json(&bytes)?)
}

pub fn list_field(s: &str) -> Vec<String> {
    s.split([',', '\n'])
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

#[derive(Deserialize, Default)]
pub struct DoneQuery {
    pub done: Option<String>,
}

pub fn admin_only(posted: &Posted) -> Result<(), ConsoleError> {
    if posted.user.is_admin() {
        Ok(())
    } else {
        Err(ConsoleError::new(
            StatusCode::FORBIDDEN,
            "This is for administrators only.",
        ))
    }
}
