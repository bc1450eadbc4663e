//! The nats-server config file we generate for each server we start.

use std::fmt::Write as _;
use std::path::Path;

/// The cluster part of a server's config: its route listener and the routes to its peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Cluster name, the same on every node.
    pub name: String,
    /// Port of this node's route listener on 127.0.0.1.
    pub port: u16,
    /// Route ports of all nodes on 127.0.0.1 (our own is harmless and skipped by the server).
    pub routes: Vec<u16>,
    /// The route address this node tells its peers (`cluster.advertise`), which they may
    /// dial when they learn of it from another peer; `None`: its listen address. Routes
    /// through proxies advertise an address nobody listens on, so that no peer reaches a
    /// node except through the proxy its routes name.
    pub advertise: Option<String>,
}

/// Everything that varies between the config files we write.
#[derive(Debug, Clone)]
pub(crate) struct Rendered<'a> {
    /// A config file to include first (its path relative to the generated file).
    pub(crate) include: Option<&'a str>,
    pub(crate) server_name: Option<&'a str>,
    /// `None` for an ephemeral port (`-1`).
    pub(crate) port: Option<u16>,
    /// `-1` for an ephemeral port.
    pub(crate) http_port: Option<i32>,
    pub(crate) log_file: &'a Path,
    pub(crate) store_dir: &'a Path,
    pub(crate) max_payload: Option<u64>,
    pub(crate) max_file_store: Option<u64>,
    pub(crate) cluster: Option<&'a ClusterConfig>,
    pub(crate) extra: Option<&'a str>,
}

impl Rendered<'_> {
    /// The config file's text.
    pub(crate) fn text(&self) -> String {
        let mut c = String::new();
        let mut line = |s: String| {
            c.push_str(&s);
            c.push('\n');
        };
        // First, so that every setting below overrides the included file's.
        if let Some(include) = self.include {
            line(format!("include {}", quote(include)));
        }
        if let Some(name) = self.server_name {
            line(format!("server_name: {}", quote(name)));
        }
        let port = self.port.map_or("-1".to_owned(), |p| p.to_string());
        line(format!("listen: \"127.0.0.1:{port}\""));
        if let Some(http) = self.http_port {
            line(format!("http: \"127.0.0.1:{http}\""));
        }
        line(format!(
            "log_file: {}",
            quote(&self.log_file.to_string_lossy())
        ));
        if let Some(max) = self.max_payload {
            line(format!("max_payload: {max}"));
        }
        let max_file = self
            .max_file_store
            .map_or(String::new(), |m| format!("\n  max_file_store: {m}"));
        line(format!(
            "jetstream {{\n  store_dir: {}{max_file}\n}}",
            quote(&self.store_dir.to_string_lossy())
        ));
        if let Some(cluster) = self.cluster {
            let mut routes = String::new();
            for port in &cluster.routes {
                // Writing to a String cannot fail.
                let _ = write!(routes, "\n    \"nats://127.0.0.1:{port}\"");
            }
            let advertise = cluster
                .advertise
                .as_ref()
                .map_or(String::new(), |a| format!("\n  advertise: {}", quote(a)));
            line(format!(
                "cluster {{\n  name: {}\n  listen: \"127.0.0.1:{}\"{advertise}\n  routes: [{routes}\n  ]\n}}",
                quote(&cluster.name),
                cluster.port
            ));
        }
        if let Some(extra) = self.extra {
            line(extra.to_owned());
        }
        c
    }
}

/// A double-quoted config string (the format accepts JSON-style escapes).
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            _ => out.push(ch),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_cluster_node() {
        let cluster = ClusterConfig {
            name: "mesh".into(),
            port: 6222,
            routes: vec![6222, 6223],
            advertise: Some("127.0.0.1:1".into()),
        };
        let text = Rendered {
            include: None,
            server_name: Some("n0"),
            port: None,
            http_port: Some(8222),
            log_file: Path::new("/tmp/x/server.log"),
            store_dir: Path::new("/tmp/x/js"),
            max_payload: Some(8 << 20),
            max_file_store: Some(4 << 20),
            cluster: Some(&cluster),
            extra: None,
        }
        .text();
        assert!(text.contains("listen: \"127.0.0.1:-1\""));
        assert!(text.contains("store_dir: \"/tmp/x/js\""));
        assert!(text.contains("max_payload: 8388608"));
        assert!(text.contains("max_file_store: 4194304"));
        assert!(text.contains("\"nats://127.0.0.1:6223\""));
        assert!(text.contains("advertise: \"127.0.0.1:1\""));
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
