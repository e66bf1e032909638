//! Metrics labels: each request is counted by method, route template and
//! status (by the edge middleware, `http::edge`). The registry itself is
//! `runtime::metrics`.

use axum::http::Method;

/// The method as a metrics label: one of a fixed set, so made-up methods
/// cannot grow `/metrics` without bound.
pub fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_methods_fold_into_other() {
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::TRACE), "other");
        assert_eq!(method_label(&Method::from_bytes(b"BREW").unwrap()), "other");
        assert_eq!(method_label(&Method::from_bytes(b"GET2").unwrap()), "other");
    }
}
