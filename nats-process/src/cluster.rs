//! [`Cluster`]: a JetStream cluster of nats-servers on loopback, for failover tests.
//!
//! Route and monitoring ports are picked up front (bind `127.0.0.1:0`, note the port,
//! release it); a start that loses a port to someone else is retried with fresh ports.
//! Ready means every running node reports, on its `/jsz` monitoring endpoint, the same
//! JetStream meta leader, and that leader is one of the running nodes.
//!
//! A cluster can also be started *routed* ([`Cluster::start_routed`]): each node dials the
//! route ports the caller gives it (proxies in front of its peers' route listeners, which a
//! test can cut to partition one server from the others) and advertises a route address
//! nobody listens on, so that no peer learns a way around those proxies by gossip.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::{ClusterConfig, Error, NatsServer, Options};

/// Attempts at starting the whole cluster (each with fresh ports).
const START_ATTEMPTS: usize = 3;
/// Deadline for a meta leader to be agreed on.
const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// Interval between `/jsz` polls.
const POLL: Duration = Duration::from_millis(20);

/// A running JetStream cluster; node `i` is named `n{i}`. Dropping it stops every node and
/// removes their directories.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<NatsServer>,
    running: Vec<bool>,
}

impl Cluster {
    /// Starts `size` nodes (3 for a useful cluster) and waits until they agree on a
    /// JetStream meta leader.
    pub fn start(size: usize) -> Result<Cluster, Error> {
        Self::start_with(size, None)
    }

    /// Starts `size` nodes whose routes go where `dial` says: given every node's own route
    /// port, it returns for each node `i` the ports node `i` dials to reach its peers (one
    /// per peer; proxies in front of the peers' route ports). Every node advertises an
    /// address nobody listens on (`127.0.0.1:1`, a privileged port), so routes exist only
    /// where `dial` put them. `dial` is called again, with fresh ports, when a start is
    /// retried.
    pub fn start_routed(size: usize, dial: &mut Dial<'_>) -> Result<Cluster, Error> {
        Self::start_with(size, Some(dial))
    }

    fn start_with(size: usize, mut dial: Option<&mut Dial<'_>>) -> Result<Cluster, Error> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(size, dial.as_deref_mut()) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Cluster("no attempt made".into())))
    }

    fn try_start(size: usize, dial: Option<&mut Dial<'_>>) -> Result<Cluster, Error> {
        let ports = free_ports(2 * size)?;
        let (route_ports, http_ports) = ports.split_at(size);
        let (routes, advertise) = match dial {
            Some(dial) => {
                let routes = dial(route_ports)?;
                if routes.len() != size {
                    return Err(Error::Cluster(format!(
                        "routes given for {} nodes, not {size}",
                        routes.len()
                    )));
                }
                (routes, Some(NOWHERE.to_owned()))
            }
            None => (vec![route_ports.to_vec(); size], None),
        };
        let mut nodes = Vec::with_capacity(size);
        for i in 0..size {
            nodes.push(NatsServer::start(Options {
                server_name: Some(format!("n{i}")),
                http_port: Some(http_ports[i]),
                cluster: Some(ClusterConfig {
                    name: "mesh".into(),
                    port: route_ports[i],
                    routes: routes[i].clone(),
                    advertise: advertise.clone(),
                }),
                ..Options::default()
            })?);
        }
        let cluster = Cluster {
            running: vec![true; size],
            nodes,
        };
        cluster.wait_ready()?;
        Ok(cluster)
    }

    /// Client URLs of all nodes, running or not.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &NatsServer {
        &self.nodes[i]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Stops node `i` gracefully, then waits until the remaining nodes agree on a meta
    /// leader among themselves (which needs a majority to remain).
    pub fn stop_node(&mut self, i: usize) -> Result<(), Error> {
        self.nodes[i].stop()?;
        self.running[i] = false;
        self.wait_ready()
    }

    /// Kills node `i` (SIGKILL, a crash), then waits as [`Cluster::stop_node`] does.
    pub fn kill_node(&mut self, i: usize) -> Result<(), Error> {
        self.nodes[i].kill()?;
        self.running[i] = false;
        self.wait_ready()
    }

    /// Starts node `i` again on its ports and store, and waits until it has rejoined.
    pub fn start_node(&mut self, i: usize) -> Result<(), Error> {
        self.nodes[i].restart()?;
        self.running[i] = true;
        self.wait_ready()
    }

    /// Waits until every running node reports the same meta leader, one of the running
    /// nodes.
    pub fn wait_ready(&self) -> Result<(), Error> {
        let running: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.running[i]).collect();
        self.wait_leader_among(&running)
    }

    /// Waits until the nodes `among` all report the same meta leader, one of them: after a
    /// partition, the majority side has elected its own.
    pub fn wait_leader_among(&self, among: &[usize]) -> Result<(), Error> {
        let deadline = Instant::now() + LEADER_TIMEOUT;
        let running = among;
        let names: Vec<String> = running.iter().map(|i| format!("n{i}")).collect();
        loop {
            let leaders: Vec<Result<String, String>> =
                running.iter().map(|&i| self.meta_leader(i)).collect();
            let agreed = match leaders.first() {
                Some(Ok(first)) => {
                    names.contains(first) && leaders.iter().all(|l| l.as_ref().ok() == Some(first))
                }
                _ => false,
            };
            if agreed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Cluster(format!(
                    "nodes {names:?} did not agree on a JetStream meta leader within \
                     {LEADER_TIMEOUT:?}; they report {leaders:?}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The meta leader that node `i` reports on `/jsz`, or why it cannot tell.
    fn meta_leader(&self, i: usize) -> Result<String, String> {
        let port = self.nodes[i].http_port().ok_or("no monitoring port")?;
        let body = http_get(port, "/jsz").map_err(|e| e.to_string())?;
        let json: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        match json["meta_cluster"]["leader"].as_str() {
            Some(leader) if !leader.is_empty() => Ok(leader.to_owned()),
            _ => Err("no leader yet".into()),
        }
    }
}

/// Where a routed cluster's nodes say they can be reached: port 1 of loopback, which only
/// root could listen on, so a peer that learns of it and dials it is refused.
const NOWHERE: &str = "127.0.0.1:1";

/// Given every node's route port, the ports each node dials ([`Cluster::start_routed`]).
pub type Dial<'a> = dyn FnMut(&[u16]) -> Result<Vec<Vec<u16>>, Error> + 'a;

/// `n` distinct ports that were free a moment ago (all bound at once, then released).
fn free_ports(n: usize) -> Result<Vec<u16>, Error> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::io("binding 127.0.0.1:0", e))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| Error::io("reading a bound port", e))
}

/// A plain HTTP/1.0 GET on 127.0.0.1 returning the body; enough for the monitoring
/// endpoints, which answer small JSON documents and close the connection.
pub(crate) fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(body.to_owned())
        }
        _ => Err(std::io::Error::other(format!(
            "unexpected answer from :{port}{path}"
        ))),
    }
}
