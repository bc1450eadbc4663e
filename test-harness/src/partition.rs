//! A 3-node JetStream cluster whose routes run through fault proxies
//! ([`crate::proxy::Proxy`]), one per ordered pair of servers, so that a test can cut one
//! server from the other two (a network partition between NATS servers: the stream and
//! bucket leaders move to the majority, the minority server's clients are stranded) and
//! heal it. One proxy per *pair* rather than per server, because a server's route listener
//! is shared by every peer: cutting it alone would also cut the routes the others solicit
//! to it from each other's side. The servers advertise no reachable route address, so
//! gossip gives no way around the proxies (`nats_process::Cluster::start_routed`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::proxy::{Fault, Proxy};
use crate::Cluster;

/// A cluster whose routes can be cut; dropping it stops the servers and the proxies.
pub struct Partitionable {
    cluster: Cluster,
    /// The proxy node `from` dials to reach node `to`, by `(from, to)`.
    links: BTreeMap<(usize, usize), Proxy>,
}

impl Partitionable {
    /// Starts `size` servers with their routes through proxies and waits for a meta leader.
    /// Call it from a tokio runtime (the proxies run on it); it blocks one of its threads
    /// while the servers start.
    pub async fn start(size: usize) -> Result<Partitionable, crate::Error> {
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let mut links = BTreeMap::new();
            let mut dial = |route_ports: &[u16]| {
                links.clear();
                let mut routes = vec![Vec::new(); route_ports.len()];
                for (from, dials) in routes.iter_mut().enumerate() {
                    for (to, &port) in route_ports.iter().enumerate() {
                        if from == to {
                            continue;
                        }
                        let upstream = SocketAddr::from(([127, 0, 0, 1], port));
                        let proxy = handle.block_on(Proxy::start(upstream)).map_err(|e| {
                            crate::Error::Cluster(format!("a route proxy to :{port}: {e}"))
                        })?;
                        dials.push(proxy.addr().port());
                        links.insert((from, to), proxy);
                    }
                }
                Ok(routes)
            };
            let cluster = Cluster::start_routed(size, &mut dial)?;
            Ok(Partitionable { cluster, links })
        })
        .await
        .map_err(|e| crate::Error::Cluster(format!("starting the cluster: {e}")))?
    }

    /// The servers.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The servers, to stop or start one.
    pub fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// Client URLs of the servers.
    pub fn urls(&self) -> Vec<String> {
        self.cluster.urls()
    }

    /// Cuts server `node` from every other server: its routes are reset and new ones
    /// refused, both ways, until [`Partitionable::heal`]. Its clients stay connected to it.
    pub fn isolate(&self, node: usize) {
        for ((from, to), proxy) in &self.links {
            if *from == node || *to == node {
                proxy.set(Fault::Refuse);
            }
        }
    }

    /// Lets every route through again; the servers reconnect on their own.
    pub fn heal(&self) {
        for proxy in self.links.values() {
            proxy.set(Fault::Pass);
        }
    }

    /// Waits (blocking a thread of a multi-thread runtime) until the servers `among` agree on a meta
    /// leader among themselves: the majority side of a partition has elected its own, or
    /// after a heal every server follows one.
    pub async fn wait_leader_among(&self, among: &[usize]) -> Result<(), crate::Error> {
        tokio::task::block_in_place(|| self.cluster.wait_leader_among(among))
    }
}
