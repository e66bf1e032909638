//! `gatehouse healthcheck [--url U]`: exit 0 when U answers 200 within five
//! seconds, else 1. For container health checks: the image needs no curl.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use serde_json::json;

use super::{CliError, CliResult};

const TIMEOUT: Duration = Duration::from_secs(5);

/// `http://<listen>/healthz`; a wildcard listen address (0.0.0.0, ::) is
/// reached on this machine's loopback.
pub fn default_url(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}/healthz", SocketAddr::new(ip, listen.port()))
}

pub async fn run(url: &str) -> CliResult {
    let parsed = reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| {
            CliError::usage(format!(
                "--url must be an http:// or https:// URL, not {url:?}"
            ))
        })?;
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        // A proxy from the environment must not stand between us and ourselves.
        .no_proxy()
        .build()
        .map_err(|e| CliError::failed(format!("cannot make an HTTP client: {e}")))?;
    let status = client
        .get(parsed)
        .send()
        .await
        .map_err(|e| {
            let why = if e.is_timeout() {
                format!("no answer within {} seconds", TIMEOUT.as_secs())
            } else {
                // The innermost cause says it best (e.g. "Connection refused").
                let mut cause: &dyn std::error::Error = &e;
                while let Some(next) = cause.source() {
                    cause = next;
                }
                cause.to_string()
            };
            CliError::failed(format!("{url}: {why}"))
        })?
        .status();
    if status.as_u16() != 200 {
        return Err(CliError::failed(format!(
            "{url} answered {status}, not 200"
        )));
    }
    super::print_json(&json!({"url": url, "status": 200}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_listen_addresses_are_checked_on_loopback() {
        assert_eq!(
            default_url("0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080/healthz"
        );
        assert_eq!(
            default_url("[::]:9000".parse().unwrap()),
            "http://[::1]:9000/healthz"
        );
        assert_eq!(
            default_url("10.1.2.3:80".parse().unwrap()),
            "http://10.1.2.3:80/healthz"
        );
    }
}
