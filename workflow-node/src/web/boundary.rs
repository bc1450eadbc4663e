//! Which requests come from the web view's own pages: the boundary that holds against other
//! pages in the same browser, with tokens or without. A token is no defence when the view is
//! open on loopback, and a browser sends requests to loopback for any page it shows, so:
//!
//! - **`Host`** must name the view: a loopback name (`localhost`, `127.0.0.1`, `[::1]`), the
//!   address it is bound to (any IP literal when bound to all interfaces), or a name given
//!   with `--public-host` (the name a proxy serves it under). A page that rebinds its own
//!   DNS name to 127.0.0.1 sends its own name, and is refused (421).
//! - **State-changing requests** (every method but GET, HEAD and OPTIONS) are refused (403)
//!   when the browser says they come from another origin: `Sec-Fetch-Site` other than
//!   `same-origin` or `none`, or an `Origin` other than this view's. Another port on the
//!   same host is another origin (and the "same site"), so it is refused too.
//! - **API and A2A POSTs** need `Content-Type: application/json` (415): a form or a `text/plain`
//!   fetch is a "simple" request a browser sends cross-origin without asking, a JSON one
//!   is not.
//!
//! Clients that are not browsers (curl, scripts) send no `Origin` nor `Sec-Fetch-Site` and
//! pass, as long as they name the host and send JSON.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// The names the view answers to.
#[derive(Debug, Clone)]
pub(super) struct Boundary {
    /// Hosts (lower case, without port) besides loopback names.
    hosts: Vec<String>,
    /// Whether the view is bound to all interfaces: any IP literal names it.
    any_ip: bool,
}

impl Boundary {
    /// The boundary of a view bound to `addr` and also served as `public_hosts`.
    pub(super) fn new(addr: SocketAddr, public_hosts: &[String]) -> Boundary {
        let mut hosts: Vec<String> = public_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        if !addr.ip().is_unspecified() {
            hosts.push(addr.ip().to_string());
        }
        Boundary {
            hosts,
            any_ip: addr.ip().is_unspecified(),
        }
    }

    /// Whether `host` (a `Host` header: a name or IP, an optional port) names this view.
    fn names_us(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            if ip.is_loopback() || self.any_ip {
                return true;
            }
            return self.hosts.iter().any(|h| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    == Ok(ip)
            });
        }
        self.hosts.contains(&name)
    }

    /// Why `request` is refused, if it is (see the module doc).
    fn refusal(&self, request: &Request) -> Option<ApiError> {
        let headers = request.headers();
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        let Some(host) = host.filter(|h| self.names_us(h)) else {
            return Some(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this web view does not answer to host {:?}: use a loopback name, the \
                     address it is bound to, or a name given with --public-host",
                    host.unwrap_or("")
                ),
            ));
        };
        let method = request.method();
        let path = request.uri().path();
        // MCP asks for `Origin` to be checked on every request (its GET stream carries
        // a session's notifications).
        let mcp = path == "/mcp" || path.starts_with("/mcp/");
        if !mcp && (method == Method::GET || method == Method::HEAD || method == Method::OPTIONS) {
            return None;
        }
        if let Some(why) = cross_origin(headers, host) {
            return Some(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("a request from another web page may not change anything: {why}"),
            ));
        }
        let path = request.uri().path();
        if (path.starts_with("/api/") || path.starts_with("/a2a/")) && !is_json(headers) {
            return Some(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "this API takes JSON: send Content-Type: application/json",
            ));
        }
        None
    }
}

/// The name of a `Host` value, without its port (`[::1]:80` gives `[::1]`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Why the browser's headers say the request comes from another origin, if they do.
fn cross_origin(headers: &HeaderMap, host: &str) -> Option<String> {
    let text = |name| {
        headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("(not text)"))
    };
    if let Some(site) = text("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return Some(format!("Sec-Fetch-Site is {site:?}"));
        }
    }
    let origin = text(header::ORIGIN.as_str())?;
    let own = ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host));
    (!own).then(|| format!("Origin {origin:?} is not this view's ({host})"))
}

/// Whether the body is declared JSON (`application/json`, parameters allowed).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Lets a request through if it passes the boundary (see the module doc).
pub(super) async fn check(
    State(boundary): State<Boundary>,
    request: Request,
    next: Next,
) -> Response {
    match boundary.refusal(&request) {
        Some(refusal) => refusal.into_response(),
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        let mut r = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(Body::empty()).unwrap()
    }

    fn status(b: &Boundary, method: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
        b.refusal(&request(method, path, headers))
            .map_or(200, |e| e.status.as_u16())
    }

    const JSON: (&str, &str) = ("content-type", "application/json; charset=utf-8");

    #[test]
    fn hosts_are_the_views_names_only() {
        let b = Boundary::new("127.0.0.1:8080".parse().unwrap(), &["Mesh.Example".into()]);
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "mesh.example",
            "MESH.example:443",
        ] {
            assert_eq!(
                status(&b, "GET", "/api/runs", &[("host", host)]),
                200,
                "{host}"
            );
        }
        for host in ["evil.example", "evil.example:8080", "10.0.0.1:8080", ""] {
            assert_eq!(status(&b, "GET", "/", &[("host", host)]), 421, "{host}");
        }
        assert_eq!(status(&b, "GET", "/", &[]), 421, "no Host at all");
        let all = Boundary::new("0.0.0.0:8080".parse().unwrap(), &[]);
        assert_eq!(status(&all, "GET", "/", &[("host", "10.0.0.1:8080")]), 200);
        assert_eq!(status(&all, "GET", "/", &[("host", "evil.example")]), 421);
    }

    #[test]
    fn changes_from_other_origins_are_refused() {
        let b = Boundary::new("127.0.0.1:8080".parse().unwrap(), &[]);
        let host = ("host", "127.0.0.1:8080");
        let post = |extra: &[(&str, &str)]| {
            let mut h = vec![host, JSON];
            h.extend_from_slice(extra);
            status(&b, "POST", "/api/runs/x/cancel", &h)
        };
        assert_eq!(post(&[]), 200, "no browser headers: curl");
        assert_eq!(post(&[("origin", "http://127.0.0.1:8080")]), 200);
        assert_eq!(post(&[("sec-fetch-site", "same-origin")]), 200);
        assert_eq!(post(&[("origin", "http://127.0.0.1:9999")]), 403);
        assert_eq!(post(&[("origin", "null")]), 403);
        assert_eq!(post(&[("sec-fetch-site", "same-site")]), 403);
        assert_eq!(post(&[("sec-fetch-site", "cross-site")]), 403);
        // Reading stays open to the view's own names.
        let read = [host, ("origin", "http://evil.example")];
        assert_eq!(status(&b, "GET", "/api/runs", &read), 200);
    }

    #[test]
    fn api_posts_take_json_only() {
        let b = Boundary::new("127.0.0.1:8080".parse().unwrap(), &[]);
        let host = ("host", "127.0.0.1:8080");
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ] {
            let h = [host, ("content-type", ct)];
            assert_eq!(status(&b, "POST", "/api/workflows/W/runs", &h), 415, "{ct}");
        }
        assert_eq!(status(&b, "POST", "/api/workflows/W/runs", &[host]), 415);
        assert_eq!(
            status(&b, "POST", "/api/workflows/W/runs", &[host, JSON]),
            200
        );
    }
}
