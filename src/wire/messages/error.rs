//! Anthropic's error shape: `{"type":"error","error":{type,message,code,param},"request_id"}`,
//! the body of every error Gatehouse itself answers on the Messages routes,
//! and the `event: error` that ends a failed Messages stream.

use serde_json::{json, Value};

use crate::error::Error;

/// Anthropic's `error.type` for a status (contract, "Errors on the Anthropic routes").
pub fn anthropic_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The body of an error answered on a Messages route.
pub fn anthropic_body(e: &Error, request_id: &str) -> Value {
    json!({
        "type": "error",
        "error": {
            "type": anthropic_type(e.status()),
            "message": e.message,
            "code": e.code,
            "param": e.param,
        },
        "request_id": request_id,
    })
}

/// The data of the `event: error` that ends a Messages stream failing after
/// it began: only the three types a stream may carry.
pub fn stream_error(e: &Error) -> Value {
    let t = match e.status() {
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": t, "message": e.message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn each_status_gets_the_contracts_error_type() {
        for (status, t) in [
            (400, "invalid_request_error"),
            (409, "invalid_request_error"),
            (422, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (504, "timeout_error"),
            (529, "overloaded_error"),
            (500, "api_error"),
            (502, "api_error"),
            (503, "api_error"),
        ] {
            assert_eq!(anthropic_type(status), t, "{status}");
        }
    }

    #[test]
    fn the_body_carries_code_param_and_request_id() {
        let e = Error::validation("max_tokens", "bad");
        let b = anthropic_body(&e, "req-1");
        assert_eq!(
            b,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad",
                   "code": "validation_error", "param": "max_tokens"}, "request_id": "req-1"})
        );
        let t = Error::new(ErrorKind::GatewayTimeout, "upstream_timeout", "slow");
        assert_eq!(stream_error(&t)["error"]["type"], "timeout_error");
        let o = Error::new(ErrorKind::Upstream(529), "upstream_error", "busy");
        assert_eq!(stream_error(&o)["error"]["type"], "overloaded_error");
        let b = Error::new(ErrorKind::BadGateway, "upstream_error", "cut");
        assert_eq!(stream_error(&b)["error"]["type"], "api_error");
    }
}
