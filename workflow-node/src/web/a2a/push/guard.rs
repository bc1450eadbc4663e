//! Which webhook URLs a push notification may go to: the guard against a client that
//! names an address inside the deployment (server-side request forgery). A URL is
//! `https://` (or plain `http://`) with a host, no user info; every address its host resolves to must be a
//! public one unless the deployment allows private ones (`--push-allow-private`, for
//! tests and closed networks). The check is made when a config is set and again at each
//! send, whose connection then goes to the address checked (a name that resolves to
//! another address in between changes nothing).

use std::net::{IpAddr, SocketAddr};

use reqwest::Url;

/// The webhook `url`, read and checked for its form (not yet its addresses).
pub(crate) fn parse(url: &str) -> Result<Url, String> {
    if url.len() > 2048 {
        return Err("the URL is longer than 2048 characters".into());
    }
    let parsed = Url::parse(url).map_err(|e| format!("the URL {url:?} cannot be read: {e}"))?;
    match parsed.scheme() {
        "http" | "https" => {}
        other => return Err(format!("the URL's scheme {other:?} is not https or http")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the URL may not carry user info: use the config's token".into());
    }
    Ok(parsed)
}

/// The address to send to: the first `url`'s host resolves to, every one checked.
pub(crate) async fn resolve(url: &Url, allow_private: bool) -> Result<SocketAddr, String> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(80);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("the host {host:?} does not resolve: {e}"))?
        .collect();
    let Some(first) = addrs.first().copied() else {
        return Err(format!("the host {host:?} resolves to no address"));
    };
    if !allow_private {
        if let Some(bad) = addrs.iter().find(|a| !public(a.ip())) {
            return Err(format!(
                "the host {host:?} resolves to {}, which is not a public address: this \
                 deployment does not send webhooks inside its own network",
                bad.ip()
            ));
        }
    }
    Ok(first)
}

/// Whether `ip` is a public unicast address (not loopback, private, link-local, shared,
/// documentation, multicast or unspecified).
pub(crate) fn public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (18..20).contains(&o[1]))
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || s[0] == 0x2001 && s[1] == 0x0db8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(!public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_are_https_or_http_with_a_host() {
        assert!(parse("http://example.com/hook").is_ok());
        assert!(parse("https://example.com/hook").is_ok());
        assert!(parse("file:///etc/passwd").is_err());
        assert!(parse("http://user:pw@example.com/").is_err());
        assert!(parse("not a url").is_err());
    }

    #[tokio::test]
    async fn loopback_is_refused_unless_allowed() {
        let url = parse("http://127.0.0.1:9/hook").unwrap();
        assert!(resolve(&url, false)
            .await
            .unwrap_err()
            .contains("not a public address"));
        assert_eq!(resolve(&url, true).await.unwrap().port(), 9);
    }
}
